"""An OpenEnv server for a step-mode environment (nenyax_serve_start)."""

from __future__ import annotations

from typing import Any, Optional

from ._native import call_string, check, ffi, free_now, json_arg, lib
from .env import Env, _options


class Server:
    """A running OpenEnv server: ``url``, ``stop()``, and a context manager that stops it."""

    def __init__(self, handle: Any, env: Env) -> None:
        self._handle = ffi.gc(handle, lib.nenyax_server_stop)
        self._env = env  # the environment's callbacks must outlive the server
        self.url: str = call_string(lib.nenyax_server_url, handle).decode("utf-8")

    def stop(self) -> None:
        """Close every connection and session and free the server (idempotent)."""
        if self._handle is not None:
            handle, self._handle = self._handle, None
            free_now(handle, lib.nenyax_server_stop)

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"Server({self.url!r})"


def serve(
    env: Env,
    *,
    host: Optional[str] = None,
    port: int = 0,
    max_sessions: Optional[int] = None,
    idle_timeout_s: Optional[float] = None,
    **options: Any,
) -> Server:
    """Serve ``env`` over OpenEnv (WebSocket /ws; HTTP /reset, /step, /state, /health) on background threads.

    ``port=0`` picks a free port (read it from ``server.url``). Other options of nenyax_serve_start
    (max_message_bytes, max_connections, ping_interval_s, head_timeout_s) pass through. A
    callback-defined environment must be defined with ``thread_safe=True``.
    """
    opts = _options(host=host, port=port, max_sessions=max_sessions, idle_timeout_s=idle_timeout_s, **options)
    out = ffi.new("nenyax_server_t **")
    check(lib.nenyax_serve_start(env.handle, *json_arg(opts), out))
    return Server(out[0], env)
