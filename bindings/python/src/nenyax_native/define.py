"""Environments defined from Python: a spec (dict or TOML file), task rows + a scorer, or state functions."""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

from ._native import check, ffi, json_arg, lib, reply_set, utf8
from .env import Env, load
from .judges import JudgeLike, judge_spec
from .policy import escaped, free_user_data, guarded, new_user_data, text_arg


def define(
    name: Union[str, "os.PathLike[str]", Mapping[str, Any]],
    *,
    tasks: Optional[List[Dict[str, Any]]] = None,
    score: Optional[Callable[[Dict[str, Any], str], float]] = None,
    reference: Optional[Callable[[Dict[str, Any]], str]] = None,
    judge: Optional[JudgeLike] = None,
    description: Optional[str] = None,
    reset: Optional[Callable[[int], Any]] = None,
    observe: Optional[Callable[[Any], Any]] = None,
    step: Optional[Callable[[Any, Any], Tuple[Any, float, bool]]] = None,
    max_steps: int = 100,
    thread_safe: bool = False,
) -> Env:
    """Define an environment; which kind is decided by the arguments given.

    - ``define(spec_dict)``: the fields of a ``define:`` file (name, description, tasks or
      tasks_file, judge); ``define("path/caps.toml")``: such a file.
    - ``define(name, tasks=rows, judge=...)``: rows with a "prompt" and the judge's field.
    - ``define(name, tasks=rows, score=fn(row, reply) -> float, reference=fn(row) -> reply)``.
    - ``define(name, reset=fn(seed) -> state, observe=fn(state) -> obs, step=fn(state, action) ->
      (state, reward, done), max_steps=...)``: states and observations are JSON-able; an
      observation that is a str becomes the text the policy sees.

    ``thread_safe`` lets the library call the functions from its worker threads concurrently.
    """
    if isinstance(name, Mapping):
        return _define_spec(dict(name))
    name = os.fspath(name)
    if name.endswith(".toml"):
        if not os.path.exists(name):
            raise FileNotFoundError(f"define: no such file {name!r}")
        return load(f"define:{name}")
    stateful = (reset, observe, step)
    if any(f is not None for f in stateful):
        if not all(callable(f) for f in stateful):
            raise TypeError("a stateful environment needs all three of reset, observe and step as functions")
        if tasks is not None or score is not None:
            raise TypeError("give either tasks (with score or judge) or reset/observe/step, not both")
        return _define_stateful(name, reset, observe, step, max_steps, thread_safe)  # type: ignore[arg-type]
    if tasks is None:
        raise TypeError(f"define({name!r}) needs tasks=[{{'prompt': ..., 'answer': ...}}, ...], or reset/observe/step functions")
    if score is not None:
        if judge is not None:
            raise TypeError("give score (a Python scorer) or judge (a judge spec), not both")
        return _define_tasks(name, tasks, score, reference, thread_safe)
    if reference is not None:
        raise TypeError("reference needs score: with a judge spec the oracle is the task's answer field")
    spec: Dict[str, Any] = {"name": name, "tasks": tasks}
    if judge is not None:
        spec["judge"] = judge_spec(judge)
    if description is not None:
        spec["description"] = description
    return _define_spec(spec)


def _define_spec(spec: Dict[str, Any]) -> Env:
    if "judge" in spec:
        spec["judge"] = judge_spec(spec["judge"])
    ptr, size = json_arg(spec)
    out = ffi.new("nenyax_env_t **")
    check(lib.nenyax_env_define(ptr, size, out))
    return Env(out[0])


def _score(user_data: Any, task_ptr: Any, task_len: int, reply_ptr: Any, reply_len: int, score_out: Any, error: Any) -> int:
    def body() -> None:
        fns = ffi.from_handle(user_data)
        value = fns["score"](json.loads(text_arg(task_ptr, task_len)), text_arg(reply_ptr, reply_len))
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"score must return a number, not {type(value).__name__}")
        score_out[0] = float(value)

    return guarded(body, error)


def _reference(user_data: Any, task_ptr: Any, task_len: int, reply: Any) -> int:
    def body() -> None:
        out = ffi.from_handle(user_data)["reference"](json.loads(text_arg(task_ptr, task_len)))
        if not isinstance(out, str):
            raise TypeError(f"reference must return the reply text (a str), not {type(out).__name__}")
        reply_set(reply, out)

    return guarded(body, reply)


def _reset(user_data: Any, seed: int, state_out: Any) -> int:
    return guarded(lambda: reply_set(state_out, json.dumps(ffi.from_handle(user_data)["reset"](seed))), state_out)


def _observe(user_data: Any, state_ptr: Any, state_len: int, obs_out: Any) -> int:
    def body() -> None:
        fns = ffi.from_handle(user_data)
        reply_set(obs_out, json.dumps(fns["observe"](json.loads(text_arg(state_ptr, state_len)))))

    return guarded(body, obs_out)


def _step(user_data: Any, state_ptr: Any, state_len: int, action_ptr: Any, action_len: int, state_out: Any, reward: Any, done: Any) -> int:
    def body() -> None:
        fns = ffi.from_handle(user_data)
        result = fns["step"](json.loads(text_arg(state_ptr, state_len)), json.loads(text_arg(action_ptr, action_len)))
        if not (isinstance(result, tuple) and len(result) == 3):
            raise TypeError(f"step must return (state, reward, done), not {result!r:.80}")
        reply_set(state_out, json.dumps(result[0]))
        reward[0] = float(result[1])
        done[0] = bool(result[2])

    # The step callback has no error slot: its message goes into the state reply, which the
    # library reports when the call fails.
    return guarded(body, state_out)


_SCORE = ffi.callback("int32_t(void *, const char *, size_t, const char *, size_t, double *, nenyax_reply_t *)", _score, error=1, onerror=escaped)
_REFERENCE = ffi.callback("int32_t(void *, const char *, size_t, nenyax_reply_t *)", _reference, error=1, onerror=escaped)
_RESET = ffi.callback("int32_t(void *, int64_t, nenyax_reply_t *)", _reset, error=1, onerror=escaped)
_OBSERVE = ffi.callback("int32_t(void *, const char *, size_t, nenyax_reply_t *)", _observe, error=1, onerror=escaped)
_STEP = ffi.callback(
    "int32_t(void *, const char *, size_t, const char *, size_t, nenyax_reply_t *, double *, bool *)", _step, error=1
)


def _define_tasks(name: str, tasks: List[Dict[str, Any]], score: Callable, reference: Optional[Callable], thread_safe: bool) -> Env:
    vtable = ffi.new("nenyax_task_vtable_t *")
    vtable.version = lib.NENYAX_VTABLE_VERSION
    vtable.score = _SCORE
    vtable.reference = _REFERENCE if reference is not None else ffi.NULL
    user_data = new_user_data({"score": score, "reference": reference})
    data, tasks_json = utf8(name), json.dumps(tasks).encode("utf-8")
    out = ffi.new("nenyax_env_t **")
    flags = lib.NENYAX_THREAD_SAFE if thread_safe else 0
    check(lib.nenyax_env_define_tasks(data, len(data), tasks_json, len(tasks_json), vtable, user_data, free_user_data, flags, out))
    return Env(out[0])


def _define_stateful(name: str, reset: Callable, observe: Callable, step: Callable, max_steps: int, thread_safe: bool) -> Env:
    if max_steps < 1:
        raise ValueError(f"max_steps must be at least 1, not {max_steps}")
    vtable = ffi.new("nenyax_state_vtable_t *")
    vtable.version = lib.NENYAX_VTABLE_VERSION
    vtable.reset, vtable.observe, vtable.step = _RESET, _OBSERVE, _STEP
    user_data = new_user_data({"reset": reset, "observe": observe, "step": step})
    data = utf8(name)
    out = ffi.new("nenyax_env_t **")
    flags = lib.NENYAX_THREAD_SAFE if thread_safe else 0
    check(lib.nenyax_env_define_stateful(data, len(data), vtable, user_data, free_user_data, flags, max_steps, out))
    return Env(out[0])
