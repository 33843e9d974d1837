"""Policies: Python callables, chat functions, per-episode samplers and endpoints as policy handles.

How a Python object becomes a policy (``as_policy``), decided by its type, never by guessing:

- a :class:`Policy` is used as is; an :class:`Endpoint` or a :class:`FunctionModel` is a chat model;
- a bare callable is an action policy, ``fn(observation) -> action`` (the observation is the
  contract's Observation dict, the action anything JSON-able), as in the Python reference;
- for anything else use :meth:`Policy.from_callable` (``kind``, ``per_episode``, ``thread_safe``).

Callbacks never let an exception reach the library: one that raises fails its episode (the
trajectory's ``error`` is ``"ExcType: message"``) and the batch goes on. A Ctrl-C that lands in a
callback is remembered so that :func:`nenyax_native.run` can stop the batch and re-raise it.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Union

from ._native import check, ffi, json_arg, lib, reply_set

PHASES = {lib.NENYAX_PHASE_RUN: "run", lib.NENYAX_PHASE_TRAIN: "train", lib.NENYAX_PHASE_EVAL: "eval"}

# Python objects the library holds through a user_data pointer, until it calls free_user_data.
_LIVE: Dict[int, Any] = {}
_LIVE_LOCK = threading.Lock()
# Set when a KeyboardInterrupt was raised inside a callback (where it cannot propagate); the
# batch's sink reads it to stop the batch, and ``run`` re-raises it.
interrupted = threading.Event()


def new_user_data(obj: Any) -> Any:
    """A user_data pointer for ``obj``, kept alive until the library calls ``free_user_data``."""
    handle = ffi.new_handle(obj)
    with _LIVE_LOCK:
        _LIVE[int(ffi.cast("uintptr_t", handle))] = handle
    return handle


@ffi.callback("void(void *)")
def free_user_data(user_data: Any) -> None:
    """The library's free_user_data: drop the keepalive of a user_data pointer."""
    with _LIVE_LOCK:
        _LIVE.pop(int(ffi.cast("uintptr_t", user_data)), None)


def guarded(fn: Callable[..., None], out: Any) -> int:
    """Run ``fn()``; on any exception write ``"ExcType: message"`` to the reply ``out`` and return 1."""
    try:
        if interrupted.is_set():  # the run is stopping: fail fast rather than call the user's code
            raise KeyboardInterrupt("the run was interrupted")
        fn()
        return 0
    except BaseException as exc:  # noqa: B036 - nothing may unwind into C, Ctrl-C included
        if isinstance(exc, KeyboardInterrupt):
            interrupted.set()
        if out != ffi.NULL:
            reply_set(out, f"{type(exc).__name__}: {exc}")
        return 1


def escaped(exc_type: Any, exc: Any, tb: Any) -> None:
    """cffi's ``onerror`` for every callback: a Ctrl-C delivered before a callback's ``try`` still stops the run."""
    if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
        interrupted.set()


def text_arg(ptr: Any, size: int) -> str:
    """A (ptr, len) string the library passed to a callback."""
    return ffi.unpack(ptr, size).decode("utf-8")


@dataclass(frozen=True)
class Episode:
    """Which episode and which call a per-episode callback serves (nenyax_episode_t)."""

    phase: str
    round: int
    group: int
    member: int
    step: int
    seed: Optional[int]
    task_id: Optional[str]
    sample_seed: int

    @classmethod
    def from_c(cls, ep: Any) -> "Episode":
        """Copy a nenyax_episode_t (valid only during the callback) into Python values."""
        return cls(
            phase=PHASES.get(ep.phase, str(ep.phase)),
            round=ep.round,
            group=ep.group,
            member=ep.member,
            step=ep.step,
            seed=ep.seed if ep.has_seed else None,
            task_id=text_arg(ep.task_id, ep.task_id_len) if ep.task_id != ffi.NULL else None,
            sample_seed=ep.sample_seed,
        )


def _chat_text(out: Any) -> str:
    """A chat function's reply as text: a str, or a message dict's ``content``."""
    if isinstance(out, str):
        return out
    if isinstance(out, dict) and isinstance(out.get("content"), str):
        return out["content"]
    raise TypeError(f"a chat function must return a str (or a message dict with a 'content' str), not {type(out).__name__}")


@dataclass
class _Callable:
    """What a policy's user_data points at: the function and how to call it."""

    fn: Callable[..., Any]
    chat: bool

    def answer(self, episode: Optional[Episode], payload: Any, reply: Any, record: Any) -> None:
        """Call the function and write its reply (and record) into the library's slots."""
        out = self.fn(payload) if episode is None else self.fn(episode, payload)
        if episode is not None and isinstance(out, tuple):
            out, rec = out
            if rec is not None:
                reply_set(record, json.dumps(rec))
        reply_set(reply, _chat_text(out) if self.chat else json.dumps(out))


def _serve(user_data: Any, episode: Any, ptr: Any, size: int, reply: Any, record: Any) -> int:
    def body() -> None:
        target: _Callable = ffi.from_handle(user_data)
        ep = Episode.from_c(episode) if episode is not None else None
        target.answer(ep, json.loads(text_arg(ptr, size)), reply, record)

    return guarded(body, reply)


# One set of trampolines for the process: each dispatches through user_data to its _Callable.
_ACT = ffi.callback("nenyax_act_fn", lambda u, p, n, r: _serve(u, None, p, n, r, ffi.NULL), error=1, onerror=escaped)
_CHAT = ffi.callback("nenyax_chat_fn", lambda u, p, n, r: _serve(u, None, p, n, r, ffi.NULL), error=1, onerror=escaped)
_ACT_EPISODE = ffi.callback("nenyax_act_episode_fn", lambda u, e, p, n, r, rec: _serve(u, e, p, n, r, rec), error=1, onerror=escaped)
_CHAT_EPISODE = ffi.callback("nenyax_chat_episode_fn", lambda u, e, p, n, r, rec: _serve(u, e, p, n, r, rec), error=1, onerror=escaped)


class Policy:
    """A policy handle: an environment's own (reference/null), an endpoint, or Python callbacks."""

    def __init__(self, handle: Any, keepalive: Any = None, kind: str = "native") -> None:
        self._handle = ffi.gc(handle, lib.nenyax_policy_free)
        # Python objects the C side points at (or that own what it points at) outlive the handle.
        self._keepalive = keepalive
        self.kind = kind

    @property
    def handle(self) -> Any:
        """The nenyax_policy_t pointer (for other bindings' C calls)."""
        return self._handle

    @classmethod
    def from_callable(
        cls,
        fn: Callable[..., Any],
        *,
        kind: str = "act",
        per_episode: bool = False,
        thread_safe: bool = False,
    ) -> "Policy":
        """A policy from ``fn``: act ``fn(observation) -> action`` or chat ``fn(messages) -> str``.

        With ``per_episode`` it is called ``fn(episode, observation_or_messages)`` and may return
        ``(reply, record)``, record = {"prompt_token_ids", "completion_token_ids",
        "completion_logprobs"}. With ``thread_safe`` the library calls it from its worker threads,
        concurrently; otherwise only on the thread that called into the library.
        """
        if kind not in ("act", "chat"):
            raise ValueError(f"kind must be 'act' or 'chat', not {kind!r}")
        if not callable(fn):
            raise TypeError(f"a policy function must be callable, not {type(fn).__name__}")
        vtable = ffi.new("nenyax_policy_vtable_t *")
        vtable.version = lib.NENYAX_POLICY_VTABLE_VERSION
        slot = ("act_episode" if kind == "act" else "chat_episode") if per_episode else kind
        setattr(vtable, slot, {"act": _ACT, "chat": _CHAT, "act_episode": _ACT_EPISODE, "chat_episode": _CHAT_EPISODE}[slot])
        user_data = new_user_data(_Callable(fn, chat=kind == "chat"))
        out = ffi.new("nenyax_policy_t **")
        flags = lib.NENYAX_THREAD_SAFE if thread_safe else 0
        check(lib.nenyax_policy_new(vtable, user_data, free_user_data, flags, out))
        return cls(out[0], keepalive=fn, kind=kind)

    def __repr__(self) -> str:
        return f"Policy(kind={self.kind!r})"


@dataclass
class FunctionModel:
    """A chat model from a Python function ``fn(messages) -> str`` (``FunctionModel(fn)`` or ``(name, fn)``)."""

    fn: Any
    name: Any = "nenyax-function"
    per_episode: bool = False
    thread_safe: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.fn, str) and callable(self.name):  # the (name, fn) order
            self.fn, self.name = self.name, self.fn

    def policy(self) -> Policy:
        """The policy handle for this model."""
        return Policy.from_callable(self.fn, kind="chat", per_episode=self.per_episode, thread_safe=self.thread_safe)


@dataclass
class Endpoint:
    """An OpenAI-compatible chat endpoint (vLLM, SGLang, OpenAI, ...) by ``base_url`` or ``provider``."""

    base_url: Optional[str] = None
    model: Optional[str] = None
    provider: Optional[str] = None
    api_key_env: Optional[str] = None
    timeout_s: Optional[float] = None
    retries: Optional[int] = None
    backoff_s: Optional[float] = None
    params: Dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        """The JSON options of nenyax_policy_endpoint."""
        return {k: v for k, v in self.__dict__.items() if v is not None and v != {}}

    def policy(self) -> Policy:
        """The policy handle for this endpoint (nothing is contacted until a rollout)."""
        ptr, size = json_arg(self.to_dict())
        out = ffi.new("nenyax_policy_t **")
        check(lib.nenyax_policy_endpoint(ptr, size, out))
        return Policy(out[0], kind="chat")


PolicyLike = Union[Policy, FunctionModel, Endpoint, Callable[[Any], Any]]


def as_policy(x: PolicyLike) -> Policy:
    """A Policy from a Policy, FunctionModel, Endpoint or bare callable (an action policy)."""
    if isinstance(x, Policy):
        return x
    if isinstance(x, (FunctionModel, Endpoint)):
        return x.policy()
    if callable(x):
        return Policy.from_callable(x, kind="act")
    raise TypeError(
        f"cannot use a {type(x).__name__} as a policy: pass a callable (observation -> action), "
        "a FunctionModel (messages -> str), an Endpoint or a Policy"
    )

