"""The Verifiers driver's shared pieces: its constants, and the conversion of verifiers'
messages, errors and numbers to the protocol's JSON."""

import dataclasses
import json
import math
import os
import sys

from .protocol import BridgeError, jsonable

VERIFIERS_REQUIREMENT = "verifiers>=0.3.1,<0.5"
# The environment variable the verifiers clients read the API key from. The host's recording
# server needs no key; a dummy is set when the variable is unset (never a real key).
VERIFIERS_KEY_VAR = "NENYAX_RECORDER_KEY"
VERIFIERS_DUMMY_KEY = "nenyax-no-key"
VERIFIERS_RESERVED = ("path", "api", "split")
# max_steps reported for an environment without a turn limit (integer expected by the host).
VERIFIERS_UNLIMITED_STEPS = 10000
# Retries of one model request inside the classic client (ClientConfig.max_retries defaults to
# 10, which makes a dead endpoint take minutes); 2 is the OpenAI SDK's default, which is also
# what the v1 harness program uses (not settable from here). A rollout request may set
# `max_retries` (classic API only).
VERIFIERS_DEFAULT_RETRIES = 2


def vf_text(content):
    """Plain text of an OpenAI-style message content (string or list of parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        out = []
        for p in content:
            if isinstance(p, str):
                out.append(p)
            elif isinstance(p, dict):
                if isinstance(p.get("text"), str):
                    out.append(p["text"])
            else:
                t = getattr(p, "text", None)
                if isinstance(t, str):
                    out.append(t)
        return "\n".join(out)
    t = getattr(content, "text", None)
    return t if isinstance(t, str) else str(content)


def vf_message(m):
    """One message as an OpenAI-style JSON dict ({role, content, tool_calls?, ...})."""
    if isinstance(m, dict):
        d = dict(m)
    elif hasattr(m, "model_dump"):
        try:
            d = m.model_dump(mode="json", exclude_none=True)
        except Exception:
            d = m.model_dump()
    elif dataclasses.is_dataclass(m) and not isinstance(m, type):
        d = dataclasses.asdict(m)
    else:
        d = {"role": getattr(m, "role", None), "content": getattr(m, "content", str(m))}
    d = {k: v for k, v in d.items() if v is not None or k == "content"}
    d.setdefault("content", None)
    # Normalize tool calls to the OpenAI chat wire shape.
    calls = d.get("tool_calls")
    if calls:
        fixed = []
        for c in calls:
            if isinstance(c, str):
                # verifiers 0.3.1's rollout outputs hold each tool call as a JSON string.
                try:
                    c = json.loads(c)
                except ValueError:
                    pass
            c = c if isinstance(c, dict) else (c.model_dump(mode="json") if hasattr(c, "model_dump") else {"value": str(c)})
            if "function" not in c and "name" in c:
                c = {
                    "id": c.get("id"),
                    "type": c.get("type") or "function",
                    "function": {"name": c.get("name"), "arguments": c.get("arguments", "")},
                }
            fixed.append(c)
        d["tool_calls"] = fixed
    return jsonable(d)


def vf_messages(ms):
    if ms is None:
        return []
    if isinstance(ms, str):
        return [{"role": "user", "content": ms}]
    return [vf_message(m) for m in ms]


def vf_last_user_text(messages):
    for m in reversed(messages):
        if m.get("role") == "user":
            return vf_text(m.get("content"))
    return vf_text(messages[-1].get("content")) if messages else ""


def vf_error_text(err):
    """A rollout's recorded error as one string (or None)."""
    if err is None or err == "" or err == [] or err == {}:
        return None
    if isinstance(err, BaseException):
        return f"{type(err).__name__}: {err}"
    if isinstance(err, dict):
        # classic verifiers: {error, message, error_chain_repr, error_chain_str}; the chain
        # names the cause (e.g. "ModelError() -> InternalServerError('Error code: 500 ...')").
        kind = err.get("error") or err.get("type") or err.get("error_type") or "Error"
        msg = err.get("message") or ""
        chain = err.get("error_chain_repr") or err.get("error_chain_str")
        if chain and ("->" in str(chain) or not msg or msg == kind):
            return str(chain)
        return f"{kind}: {msg}" if msg else str(kind)
    if isinstance(err, (list, tuple)):
        parts = [vf_error_text(e) for e in err]
        return "; ".join(p for p in parts if p) or None
    t, m = getattr(err, "type", None), getattr(err, "message", None)
    if t is not None or m is not None:
        return f"{t}: {m}"
    return str(err)


def vf_float(v):
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else jsonable(f)


def vf_get(obj, name, default=None):
    """getattr that also swallows property errors: the v1 API changes between releases."""
    try:
        return getattr(obj, name, default)
    except Exception:
        return default


def vf_dump(obj):
    if obj is None:
        return None
    if hasattr(obj, "model_dump"):
        try:
            return obj.model_dump(mode="json", exclude_none=True)
        except Exception:
            pass
    return obj


def vf_duration(span):
    start, end = vf_get(span, "start"), vf_get(span, "end")
    if isinstance(start, (int, float)) and isinstance(end, (int, float)) and end:
        return end - start
    return None


class StdinShield:
    """Points fd 0 at /dev/null while a rollout runs. The verifiers runtimes start programs
    (uv, the harness script) that would otherwise inherit the protocol's stdin pipe and might
    read requests meant for this process. Requests that arrive meanwhile wait in the pipe."""

    def __enter__(self):
        self.saved = None
        try:
            self.saved = os.dup(0)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.close(null)
        except OSError:
            self.saved = None
        return self

    def __exit__(self, *exc):
        if self.saved is not None:
            os.dup2(self.saved, 0)
            os.close(self.saved)
        return False


def missing_uv():
    exe = sys.executable
    return BridgeError(
        "MissingPackage",
        f"verifiers v1 environments run their harness with 'uv', which is neither next to {exe} "
        f"nor on PATH. Install it with: {exe} -m pip install uv  (or run: nenyax setup verifiers)",
        package="uv",
        requirement="uv",
        executable=exe,
    )

