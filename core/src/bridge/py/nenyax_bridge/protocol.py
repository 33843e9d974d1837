"""The JSON-lines protocol, version 1 (docs/bridge.md): the private reply channel, request
framing, JSON encoding and the errors a reply reports.

Standard library only: the entry point imports this before anything else can print."""

import dataclasses
import difflib
import enum
import json
import math
import os
import re
import select
import sys
import time

BRIDGE_VERSION = 1

# The reply channel: set by open_channel(), which the entry point calls before anything else.
_OUT = None


class BridgeError(Exception):
    """An error with a protocol kind and optional extra fields."""

    def __init__(self, kind, message, **fields):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.fields = fields


# ---------------------------------------------------------------------------------------------
# JSON encoding


def jsonable(o):
    """Convert to plain JSON values: numpy -> Python, tuples/sets -> lists, non-finite floats ->
    strings. Never raises; unknown objects become their str()."""
    if o is None or isinstance(o, (bool, str)):
        return o
    if isinstance(o, int):
        return int(o)
    if isinstance(o, float):
        if math.isfinite(o):
            return float(o)
        return "nan" if o != o else ("inf" if o > 0 else "-inf")
    if isinstance(o, dict):
        return {(k if isinstance(k, str) else str(jsonable(k))): jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [jsonable(v) for v in o]
    if isinstance(o, (set, frozenset)):
        items = [jsonable(v) for v in o]
        try:
            items.sort(key=lambda v: json.dumps(v, sort_keys=True))
        except Exception:
            pass
        return items
    mod = type(o).__module__ or ""
    if mod == "numpy" or mod.startswith("numpy."):
        # Observations are mostly arrays: skip the element-wise walk when no element needs it.
        kind = getattr(getattr(o, "dtype", None), "kind", None)
        if kind in ("i", "u", "b") and hasattr(o, "tolist"):
            return o.tolist()
        if kind == "f" and hasattr(o, "tolist"):
            try:
                import numpy as np

                if bool(np.isfinite(o).all()):
                    return o.tolist()
            except Exception:
                pass
        tolist = getattr(o, "tolist", None)
        if tolist is not None:
            try:
                return jsonable(tolist())
            except Exception:
                pass
    if isinstance(o, enum.Enum):
        return jsonable(o.value)
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        try:
            return {f.name: jsonable(getattr(o, f.name)) for f in dataclasses.fields(o)}
        except Exception:
            pass
    if isinstance(o, (bytes, bytearray)):
        return bytes(o).decode("utf-8", "replace")
    try:
        return str(o)
    except Exception:
        return repr(type(o))


def open_channel():
    """Keep the protocol channel private before anything else can print: replies go to a
    duplicate of the real stdout, and fd 1 / sys.stdout then point at stderr (bf, codeio and
    friends print). Called once, first thing, by the entry point."""
    global _OUT
    fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    _OUT = os.fdopen(fd, "wb", buffering=0)


def send(obj):
    try:
        line = json.dumps(obj, allow_nan=False)
    except Exception:
        line = json.dumps(jsonable(obj), allow_nan=False)
    _OUT.write(line.encode("utf-8") + b"\n")


def error_reply(rid, kind, message, **fields):
    err = {"kind": kind, "message": message}
    err.update(jsonable(fields))
    return {"id": rid, "ok": False, "error": err}


def first_paragraph(doc, limit=500):
    if not doc:
        return None
    for para in re.split(r"\n\s*\n", doc.strip()):
        text = " ".join(para.split())
        if text and not text.startswith("#"):
            return text if len(text) <= limit else text[: limit - 3] + "..."
    return None


def missing_package(package, requirement, name, exc):
    exe = sys.executable
    return BridgeError(
        "MissingPackage",
        f"Python package '{package}' is not importable by {exe} ({type(exc).__name__}: {exc}). "
        f"Install it with: {exe} -m pip install '{requirement}'  (or run: nenyax setup {name})",
        package=package,
        requirement=requirement,
        executable=exe,
    )


def suggest(word, choices):
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def want_int(args, key, default=None, name=None):
    v = args.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, float) and v.is_integer():
            return int(v)
        raise BridgeError("InvalidParameter", f"{name or key} must be an integer, got {json.dumps(jsonable(v))}")
    return v


def short(v, limit=200):
    """A value as clipped JSON, for error messages."""
    try:
        s = json.dumps(jsonable(v))
    except Exception:
        s = repr(v)
    return s if len(s) <= limit else s[: limit - 3] + "..."


# ---------------------------------------------------------------------------------------------
# Framing

# Poll stdin this long before sleeping in select(): waking a halted vCPU costs more than a whole
# small step (see core/src/bridge/lines.rs), and a busy trainer sends the next request sooner.
# The host passes its setting (NENYAX_BRIDGE_SPIN_US, 0 turns it off).
SPIN_S = int(os.environ.get("NENYAX_BRIDGE_SPIN_US", "200") or 0) * 1e-6


def requests():
    """Request lines from stdin, read without Python's buffered reader so that the wait can
    spin briefly before it sleeps."""
    fd = sys.stdin.fileno()
    # Without a spin, a plain blocking read is one system call and no exception per request.
    os.set_blocking(fd, SPIN_S <= 0)
    pending = b""
    clock = time.perf_counter
    while True:
        nl = pending.find(b"\n")
        if nl >= 0:
            line, pending = pending[:nl], pending[nl + 1 :]
            yield line
            continue
        t0 = clock()
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
                break
            except BlockingIOError:
                if clock() - t0 > SPIN_S:
                    select.select([fd], [], [])
                else:
                    # Let anything runnable on this core (the host, another worker) go first.
                    os.sched_yield()
        if not chunk:
            if pending.strip():
                yield pending
            return
        pending += chunk
