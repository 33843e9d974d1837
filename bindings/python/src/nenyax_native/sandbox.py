"""Sandboxes: isolated places to run commands and keep files (nenyax_sandbox_*)."""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Sequence, Union

from ._native import call_json, call_string, check, ffi, free_now, json_arg, lib, utf8


class Sandbox:
    """A sandbox (backend ``process``, ``jail`` or ``container``); ``close()`` kills what is left and removes its files.

    Options are those of nenyax_sandbox_new (cpu_s, memory_bytes, wall_s, network, env, ...).
    """

    def __init__(self, backend: str = "process", **options: Any) -> None:
        out = ffi.new("nenyax_sandbox_t **")
        check(lib.nenyax_sandbox_new(*json_arg({"backend": backend, **options}), out))
        self._handle: Any = ffi.gc(out[0], lib.nenyax_sandbox_free)

    @classmethod
    def _wrap(cls, handle: Any) -> "Sandbox":
        box = cls.__new__(cls)
        box._handle = ffi.gc(handle, lib.nenyax_sandbox_free)
        return box

    def exec(
        self,
        command: Union[str, Sequence[str]],
        *,
        cwd: Optional[str] = None,
        env: Optional[Dict[str, str]] = None,
        stdin: Optional[str] = None,
        timeout_s: Optional[float] = None,
    ) -> Dict[str, Any]:
        """Run a shell string or an argv list; the result has exit_code, signal, stdout, stderr, killed, ..."""
        spec: Dict[str, Any] = {"shell": command} if isinstance(command, str) else {"argv": list(command)}
        spec.update({k: v for k, v in (("cwd", cwd), ("env", env), ("stdin", stdin), ("timeout_s", timeout_s)) if v is not None})
        return call_json(lib.nenyax_sandbox_exec, self._live(), *json_arg(spec))

    def put(self, path: str, data: Union[str, bytes], mode: int = 0o644) -> None:
        """Write ``data`` to ``path`` (parents created) with Unix ``mode``."""
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        p = utf8(path)
        check(lib.nenyax_sandbox_put(self._live(), p, len(p), raw, len(raw), mode))

    def get(self, path: str) -> str:
        """The text of the file at ``path``."""
        p = utf8(path)
        return call_string(lib.nenyax_sandbox_get, self._live(), p, len(p)).decode("utf-8")

    def list(self, path: str = ".") -> List[Dict[str, Any]]:
        """The entries of directory ``path``: [{"name", "dir", "size"}], sorted by name."""
        p = utf8(path)
        return json.loads(call_string(lib.nenyax_sandbox_list, self._live(), p, len(p)))

    def fork(self) -> "Sandbox":
        """A new sandbox with the same configuration and a copy of this one's files."""
        out = ffi.new("nenyax_sandbox_t **")
        check(lib.nenyax_sandbox_fork(self._live(), out))
        return Sandbox._wrap(out[0])

    def close(self) -> None:
        """Destroy the sandbox (idempotent)."""
        if self._handle is not None:
            handle, self._handle = self._handle, None
            free_now(handle, lib.nenyax_sandbox_free)

    def _live(self) -> Any:
        if self._handle is None:
            raise ValueError("this sandbox is closed")
        return self._handle

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
