"""A recording: an OpenAI base URL of its own, answered by a chat policy, whose calls are kept."""

from __future__ import annotations

import json
from typing import Any, Dict, List

from ._native import call_string, check, ffi, free_now, lib
from .policy import PolicyLike, as_policy


class Recording:
    """Point your own agent loop at ``base_url``; ``calls()`` returns every ModelCall made through it.

    The policy's callbacks are called from the server's threads, so a Python chat function must be
    thread-safe: pass ``FunctionModel(fn, thread_safe=True)`` (or an Endpoint, which is proxied).
    """

    def __init__(self, policy: PolicyLike) -> None:
        self._policy = as_policy(policy)
        out = ffi.new("nenyax_recording_t **")
        check(lib.nenyax_recording_new(self._policy.handle, out))
        self._handle: Any = ffi.gc(out[0], lib.nenyax_recording_free)
        self.base_url: str = call_string(lib.nenyax_recording_base_url, self._handle).decode("utf-8")

    def calls(self, drain: bool = False) -> List[Dict[str, Any]]:
        """The calls so far (ModelCall dicts); with ``drain`` they are removed."""
        if self._handle is None:
            raise ValueError("this recording is closed")
        return json.loads(call_string(lib.nenyax_recording_calls, self._handle, 1 if drain else 0))

    def close(self) -> None:
        """End the recording (its URL stops answering); idempotent."""
        if self._handle is not None:
            handle, self._handle = self._handle, None
            free_now(handle, lib.nenyax_recording_free)

    def __enter__(self) -> "Recording":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
