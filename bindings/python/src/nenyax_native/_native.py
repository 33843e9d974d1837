"""The C ABI, loaded once: cffi in ABI mode over the bundled include/nenyax.h.

The header is the single source of truth: it is read (not copied by hand) into cffi, so a
function the header declares is callable here as ``lib.nenyax_...`` with no wrapper to drift.
cffi releases the GIL for the duration of every C call and re-acquires it only to run a Python
callback, which is what lets ``run`` keep every worker thread busy.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Optional

from cffi import FFI

from .errors import InvalidArgumentError, error_for_status

try:
    import orjson
except ImportError:  # the optional [fast] extra
    orjson = None

_HERE = Path(__file__).resolve().parent
_LIB_NAME = "libnenyax.dylib" if sys.platform == "darwin" else "libnenyax.so"

ffi = FFI()


def _cdef_source(header: str) -> str:
    """The header as cffi's cdef accepts it: no preprocessor lines but integer #defines."""
    kept = []
    for line in header.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            if re.match(r"#define\s+[A-Z_0-9]+\s+-?\d+\s*$", stripped):
                kept.append(stripped)
            continue
        if stripped.startswith('extern "C"') or stripped.startswith("}  // extern"):
            continue
        kept.append(line)
    return "\n".join(kept)


def _find(name: str, env_var: str) -> Path:
    override = os.environ.get(env_var)
    if override:
        return Path(override)
    bundled = _HERE / name
    if bundled.exists():
        return bundled
    # A checkout used without installing (tests of the binding itself against a fresh build).
    repo = _HERE.parents[3]
    for candidate in (
        repo / "include" / name,
        repo / "target" / "release" / name,
        repo / "target" / "debug" / name,
    ):
        if candidate.exists():
            return candidate
    raise ImportError(
        f"nenyax_native: {name} not found next to the package ({bundled}); reinstall with "
        f"`pip install ./bindings/python` or set {env_var} to its path"
    )


HEADER_PATH = _find("nenyax.h", "NENYAX_HEADER")
LIBRARY_PATH = _find(_LIB_NAME, "NENYAX_LIBRARY")
ffi.cdef(_cdef_source(HEADER_PATH.read_text(encoding="utf-8")))
lib: Any = ffi.dlopen(str(LIBRARY_PATH))

if lib.nenyax_version_number() // 1000 != lib.NENYAX_VERSION_NUMBER // 1000:
    raise ImportError(
        f"nenyax_native: {LIBRARY_PATH} is version {ffi.string(lib.nenyax_version()).decode()} "
        f"but the header {HEADER_PATH} is {lib.NENYAX_VERSION_MAJOR}.{lib.NENYAX_VERSION_MINOR}; "
        "rebuild the package"
    )


def check(err: Any) -> None:
    """Raise the library's error (and free it) if ``err`` is not NULL."""
    if err == ffi.NULL:
        return
    try:
        code = int(lib.nenyax_error_code(err))
        size = ffi.new("size_t *")
        ptr = lib.nenyax_error_message(err, size)
        message = ffi.unpack(ptr, size[0]).decode("utf-8", "replace")
    finally:
        lib.nenyax_error_free(err)
    raise error_for_status(code, message)


def utf8(text: str) -> bytes:
    """The UTF-8 bytes of a str argument."""
    return text.encode("utf-8")


def dumps(value: Any) -> bytes:
    """JSON bytes of ``value``: orjson's when installed (several times faster), json's for what orjson refuses."""
    if orjson is not None:
        try:
            out = orjson.dumps(value)
            # orjson writes NaN and infinities as null; json (below) refuses them, as the library
            # would, so a null in the output is checked there rather than passed on silently.
            if b"null" not in out:
                return out
        except TypeError:  # e.g. non-str dict keys, which json turns into strings
            pass
    try:
        return json.dumps(value, allow_nan=False).encode("utf-8")
    except ValueError as exc:
        raise InvalidArgumentError(f"{exc}: NaN and infinities have no JSON form; replace them before passing the value", 1) from None


def loads(data: str | bytes) -> Any:
    """The value of JSON text: orjson's parse when installed, json's for what orjson refuses (integers over 64 bits)."""
    if orjson is not None:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return json.loads(data)


def json_arg(value: Any) -> tuple[Any, int]:
    """(ptr, len) for an optional JSON argument; (NULL, 0) for None."""
    if value is None:
        return ffi.NULL, 0
    data = value if isinstance(value, bytes) else dumps(value)
    return data, len(data)


def new_string() -> Any:
    """An empty nenyax_string_t out-parameter."""
    return ffi.new("nenyax_string_t *")


def take_bytes(s: Any) -> bytes:
    """The bytes of a nenyax_string_t out-parameter, freeing it."""
    try:
        if s.ptr == ffi.NULL:
            return b""
        return ffi.unpack(s.ptr, s.len)
    finally:
        lib.nenyax_string_free(s)


def take_str(s: Any) -> str:
    """The text of a nenyax_string_t out-parameter, freeing it."""
    return take_bytes(s).decode("utf-8")


def take_json(s: Any) -> Any:
    """The JSON value of a nenyax_string_t out-parameter, freeing it."""
    return loads(take_bytes(s))


def call_string(fn: Any, *args: Any) -> bytes:
    """Call ``fn(*args, out)`` for a function whose last parameter is a nenyax_string_t *."""
    out = new_string()
    check(fn(*args, out))
    return take_bytes(out)


def call_json(fn: Any, *args: Any) -> Any:
    """``call_string``, parsed as JSON."""
    return loads(call_string(fn, *args))


def reply_set(reply: Any, text: Optional[str | bytes]) -> None:
    """Write a callback's reply (a no-op for None)."""
    if text is None:
        return
    data = text if isinstance(text, bytes) else text.encode("utf-8")
    lib.nenyax_reply_set(reply, data, len(data))


def free_now(handle: Any, free: Any) -> None:
    """Free an ``ffi.gc``-owned handle now (its garbage-collection destructor is removed first)."""
    ffi.gc(handle, None)
    free(handle)


def version() -> str:
    """The library's version (libnenyax, not this package)."""
    return ffi.string(lib.nenyax_version()).decode()


def protocol_version() -> str:
    """The contract's protocol version (docs/protocol.md)."""
    return ffi.string(lib.nenyax_protocol_version()).decode()
