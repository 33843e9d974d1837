"""A live step-mode episode, stepped from Python (nenyax_session_*)."""

from __future__ import annotations

import json
from typing import Any, Dict, Optional

from ._native import call_json, ffi, free_now, lib


class Session:
    """One step-mode episode: ``observation``, ``act(action)``, ``done``, ``judgment``; use from one thread."""

    def __init__(self, handle: Any) -> None:
        self._handle = ffi.gc(handle, lib.nenyax_session_free)

    @property
    def observation(self) -> Dict[str, Any]:
        """The current Observation ({"data", "text", "messages", "info"})."""
        return call_json(lib.nenyax_session_observation, self._live())

    def act(self, action: Any) -> Dict[str, Any]:
        """Apply ``action`` (anything JSON-able, e.g. a reply string or 42) and return the Step."""
        data = json.dumps(action).encode("utf-8")
        return call_json(lib.nenyax_session_act, self._live(), data, len(data))

    @property
    def done(self) -> bool:
        """True once the episode terminated or was truncated."""
        return bool(lib.nenyax_session_done(self._live()))

    @property
    def judgment(self) -> Dict[str, Any]:
        """The episode's Judgment so far."""
        return call_json(lib.nenyax_session_judgment, self._live())

    def close(self) -> None:
        """End the episode and free it (idempotent)."""
        if self._handle is not None:
            handle, self._handle = self._handle, None
            free_now(handle, lib.nenyax_session_free)

    def _live(self) -> Any:
        if self._handle is None:
            raise ValueError("this session is closed; open a new one with env.session()")
        return self._handle

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> Optional[bool]:
        self.close()
        return None
