"""Environments, runners and batches over the C ABI handles."""

from __future__ import annotations

import json
import os
import threading
import time
from typing import IO, Any, Callable, Dict, Iterable, Iterator, List, Optional, Union

from . import errors
from ._native import call_json, check, dumps, ffi, json_arg, lib, new_string, take_bytes, utf8
from .judges import JudgeLike, judge_spec
from .policy import Policy, PolicyLike, as_policy, interrupted
from .report import Report
from .session import Session
from .trajectory import Trajectory


def _options(**values: Any) -> Dict[str, Any]:
    """Options JSON without the ones left at None (the library's defaults)."""
    return {k: v for k, v in values.items() if v is not None}


# How long one JSONL chunk of iter_run/write should take at most, once its pace is known.
CHUNK_TARGET_S = 0.5


def _check_n(n: Any) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"n must be a non-negative int, not {n!r}")


def _reraise_interrupt() -> None:
    """Raise the Ctrl-C that a callback caught (it could not propagate through C)."""
    if interrupted.is_set():
        interrupted.clear()
        raise KeyboardInterrupt


class Env:
    """A loaded environment of any format; safe to share between threads."""

    def __init__(self, handle: Any, keepalive: Any = None) -> None:
        self._handle = ffi.gc(handle, lib.nenyax_env_free)
        self._keepalive = keepalive
        self._manifest: Optional[Dict[str, Any]] = None

    @property
    def handle(self) -> Any:
        """The nenyax_env_t pointer."""
        return self._handle

    @property
    def manifest(self) -> Dict[str, Any]:
        """The environment's manifest (docs/protocol.md), as a dict."""
        if self._manifest is None:
            self._manifest = call_json(lib.nenyax_env_manifest, self._handle)
        return self._manifest

    @property
    def id(self) -> str:
        """The manifest's id."""
        return self.manifest.get("id", "")

    @property
    def mode(self) -> str:
        """``step``, ``rollout`` or ``task``."""
        return self.manifest.get("mode", "")

    def tasks(self, limit: int = 0) -> List[Dict[str, Any]]:
        """Up to ``limit`` tasks (0: all), as TaskRef dicts."""
        return call_json(lib.nenyax_env_tasks, self._handle, limit)

    def reference_policy(self) -> Policy:
        """The environment's oracle; UnsupportedError when it has none."""
        out = ffi.new("nenyax_policy_t **")
        check(lib.nenyax_env_reference_policy(self._handle, out))
        return Policy(out[0], keepalive=self)

    def null_policy(self) -> Policy:
        """A policy that should score nothing; UnsupportedError when there is none."""
        out = ffi.new("nenyax_policy_t **")
        check(lib.nenyax_env_null_policy(self._handle, out))
        return Policy(out[0], keepalive=self)

    def rollout(
        self,
        policy: PolicyLike,
        *,
        task: Optional[Dict[str, Any]] = None,
        seed: Optional[int] = None,
        max_steps: Optional[int] = None,
        context: Optional[Dict[str, Any]] = None,
    ) -> Trajectory:
        """One episode on this thread (any ``as_policy`` input). A failed episode is returned with its ``error``.

        ``context`` is what per-episode policies see: {"phase", "round", "group", "member", "seed",
        "task_id", "sample_seed"}.
        """
        if type(policy) is not Policy:
            policy = as_policy(policy)
        if task is None and seed is None and max_steps is None and context is None:
            options, size = ffi.NULL, 0
        else:
            options = dumps(_options(task=task, seed=seed, max_steps=max_steps, context=context))
            size = len(options)
        interrupted.clear()
        out = new_string()
        check(lib.nenyax_env_rollout(self._handle, policy.handle, options, size, out))
        raw = take_bytes(out)
        if interrupted.is_set():
            _reraise_interrupt()
        return Trajectory._lazy(raw)

    def session(self, *, task: Optional[Dict[str, Any]] = None, seed: Optional[int] = None) -> Session:
        """Open a step-mode episode to drive by hand; UnsupportedError for rollout/task environments."""
        out = ffi.new("nenyax_session_t **")
        check(lib.nenyax_session_open(self._handle, *json_arg(_options(task=task, seed=seed) or None), out))
        return Session(out[0])

    def check(self, *, samples: Optional[int] = None, threads: Optional[int] = None) -> Report:
        """Measure conformance (fresh instances are rebuilt the way this handle was made)."""
        return Report(call_json(lib.nenyax_env_check, self._handle, *json_arg(_options(samples=samples, threads=threads) or None)))

    def with_judge(self, judge: JudgeLike) -> "Env":
        """A new environment whose episodes are judged by ``judge`` (this one is unchanged)."""
        spec = json.dumps(judge_spec(judge)).encode("utf-8")
        out = ffi.new("nenyax_env_t **")
        check(lib.nenyax_env_with_judge(self._handle, spec, len(spec), out))
        return Env(out[0], keepalive=self._keepalive)

    def __repr__(self) -> str:
        return f"Env({self.id!r})"


def load(uri: str) -> Env:
    """Load an environment by URI, e.g. ``builtin:arithmetic?size=100``."""
    if not isinstance(uri, str):
        raise TypeError(f"load takes a URI string like 'builtin:arithmetic', not {type(uri).__name__}")
    data = utf8(uri)
    out = ffi.new("nenyax_env_t **")
    check(lib.nenyax_env_load(data, len(data), out))
    return Env(out[0])


def with_judge(env: Union[Env, str], judge: JudgeLike) -> Env:
    """``env`` (an Env or URI) re-judged by ``judge`` (a judge object or spec dict)."""
    return _env(env).with_judge(judge)


def check_env(env: Union[Env, str], *, samples: Optional[int] = None, threads: Optional[int] = None) -> Report:
    """Conformance of a URI (loaded afresh, the full suite) or of an Env handle, as a Report."""
    if isinstance(env, Env):
        return env.check(samples=samples, threads=threads)
    uri = utf8(env)
    return Report(call_json(lib.nenyax_check_uri, uri, len(uri), *json_arg(_options(samples=samples, threads=threads) or None)))


def _sinks(telemetry: Optional[Iterable[Union[str, Dict[str, Any]]]]) -> Optional[List[Dict[str, Any]]]:
    """Telemetry sinks as the library's options take them: a name stands for ``{"name": name}``."""
    if telemetry is None:
        return None
    if isinstance(telemetry, (str, dict)):
        telemetry = [telemetry]
    return [{"name": t} if isinstance(t, str) else dict(t) for t in telemetry]


def _env(env: Union[Env, str]) -> Env:
    return env if isinstance(env, Env) else load(env)


class Runner:
    """A pool of ``threads`` library worker threads (0: one per core) for batches of rollouts."""

    def __init__(self, threads: int = 0) -> None:
        out = ffi.new("nenyax_runner_t **")
        check(lib.nenyax_runner_new(threads, out))
        self._handle = ffi.gc(out[0], lib.nenyax_runner_free)

    @property
    def threads(self) -> int:
        """Its number of worker threads."""
        return int(lib.nenyax_runner_threads(self._handle))

    def run(
        self,
        env: Env,
        policy: PolicyLike,
        n: int = 10,
        *,
        seed: int = 0,
        max_steps: Optional[int] = None,
        tasks: Optional[Iterable[Dict[str, Any]]] = None,
        on_trajectory: Optional[Callable[[Trajectory], Any]] = None,
        progress: Optional[Callable[[int, int], Any]] = None,
        telemetry: Optional[Iterable[Union[str, Dict[str, Any]]]] = None,
    ) -> List[Trajectory]:
        """``n`` episodes in parallel, returned (and streamed to ``on_trajectory``) in job order.

        Ctrl-C stops the batch at the next trajectory or Python callback and raises
        KeyboardInterrupt; an exception from ``on_trajectory`` or ``progress`` stops it and is re-raised.
        ``telemetry`` names sinks (``"otel"``, ``"mlflow"``, ``"wandb"``) or gives them with options
        (``{"name": "otel", "endpoint": ...}``); the library exports off the rollout threads (docs/telemetry.md).
        """
        # Through the sink, one trajectory at a time: no barrier between chunks for slow episodes
        # (model calls), and Ctrl-C is seen after the next episode whatever the policy. Measured
        # within noise of the JSONL chunks per rollout (docs/performance.md, breakdown rows).
        _check_n(n)
        policy = as_policy(policy)
        options = _options(
            n=n, seed=seed, max_steps=max_steps, tasks=None if tasks is None else list(tasks), telemetry=_sinks(telemetry)
        )
        results: List[Trajectory] = []
        raised: List[BaseException] = []

        def sink(_user: Any, _index: int, ptr: Any, size: int) -> int:
            try:
                if interrupted.is_set():  # a policy callback caught the Ctrl-C
                    raise KeyboardInterrupt
                traj = Trajectory._lazy(ffi.unpack(ptr, size))
                results.append(traj)
                if on_trajectory is not None:
                    on_trajectory(traj)
                if progress is not None:
                    progress(len(results), n)
                return 0
            except BaseException as exc:  # noqa: B036 - nothing may unwind into C, Ctrl-C included
                raised.append(exc)
                return 1

        def sink_escaped(exc_type: Any, exc: Any, tb: Any) -> None:
            # A Ctrl-C delivered on the callback's first line, before its ``try``.
            raised.append(exc if exc is not None else exc_type())

        c_sink = ffi.callback("nenyax_trajectory_fn", sink, error=1, onerror=sink_escaped)
        interrupted.clear()
        try:
            check(lib.nenyax_runner_run(self._handle, env.handle, policy.handle, *json_arg(options), c_sink, ffi.NULL, ffi.NULL))
        except errors.CallbackError:
            if not (raised or interrupted.is_set()):
                raise
        finally:
            ctrl_c = interrupted.is_set()
            interrupted.clear()
        if raised:
            raise raised[0]
        if ctrl_c:
            raise KeyboardInterrupt
        return results

    def _chunks(
        self,
        env: Env,
        policy: PolicyLike,
        n: int,
        seed: int,
        max_steps: Optional[int],
        tasks: Optional[Iterable[Dict[str, Any]]],
        chunk: int,
    ) -> Iterator[bytes]:
        """The batch as JSONL, up to ``chunk`` jobs per library call: job i gets task i (cycled) and seed + i,
        as in one call, but the whole batch's JSON is never held at once."""
        _check_n(n)
        if chunk < 1:
            raise ValueError(f"chunk must be at least 1, not {chunk!r}")
        policy = as_policy(policy)
        # The environment's own tasks when none are given, as the library's plan takes them.
        listed = list(tasks or ()) or env.tasks(limit=n)
        encoded = [dumps(t) for t in listed]
        base = {} if max_steps is None else {"max_steps": max_steps}
        # Chunks grow towards ``chunk`` while they finish within CHUNK_TARGET_S, so slow episodes
        # (model calls) come in small chunks: Ctrl-C, which is seen between chunks, and the
        # first results are not held back behind thousands of them.
        floor = min(chunk, 2 * max(1, self.threads))
        size, start = floor, 0
        while start < n:
            count = min(size, n - start)
            t0 = time.monotonic()
            head = dumps({**base, "n": count, "seed": seed + start, "format": "jsonl"})
            if encoded:  # only the tasks of this chunk's jobs, in order (cycled by the library if fewer)
                picked = [encoded[(start + j) % len(encoded)] for j in range(min(count, len(encoded)))]
                head = head[:-1] + b', "tasks": [' + b",".join(picked) + b"]}"
            interrupted.clear()
            out = new_string()
            check(lib.nenyax_runner_run(self._handle, env.handle, policy.handle, head, len(head), ffi.NULL, ffi.NULL, out))
            data = take_bytes(out)
            _reraise_interrupt()
            elapsed = time.monotonic() - t0
            start += count
            size = max(floor, min(chunk, int(count * CHUNK_TARGET_S / max(elapsed, 1e-6))))
            yield data

    def iter_run(
        self,
        env: Env,
        policy: PolicyLike,
        n: int = 10,
        *,
        seed: int = 0,
        max_steps: Optional[int] = None,
        tasks: Optional[Iterable[Dict[str, Any]]] = None,
        chunk: int = 4096,
    ) -> Iterator[Trajectory]:
        """``run``'s trajectories in job order as they come, ``chunk`` at a time, none kept here (for large ``n``)."""
        lazy = Trajectory._lazy
        for data in self._chunks(env, policy, n, seed, max_steps, tasks, chunk):
            lines = data.split(b"\n")
            lines.pop()  # every line ends with a newline, so the last piece is empty
            yield from map(lazy, lines)

    def write(
        self,
        out: Union[str, "os.PathLike[str]", IO[bytes]],
        env: Env,
        policy: PolicyLike,
        n: int = 10,
        *,
        seed: int = 0,
        max_steps: Optional[int] = None,
        tasks: Optional[Iterable[Dict[str, Any]]] = None,
        chunk: int = 4096,
    ) -> int:
        """Run ``n`` episodes and append them as JSONL to ``out`` (a path, or a binary file); returns ``n``."""
        if isinstance(out, (str, os.PathLike)):
            with open(out, "ab") as f:
                return self.write(f, env, policy, n, seed=seed, max_steps=max_steps, tasks=tasks, chunk=chunk)
        for data in self._chunks(env, policy, n, seed, max_steps, tasks, chunk):
            out.write(data)
        return n


_RUNNERS: Dict[int, Runner] = {}
_RUNNERS_LOCK = threading.Lock()


def _runner(threads: int) -> Runner:
    """One runner per concurrency for the process, so repeated runs reuse their threads."""
    with _RUNNERS_LOCK:
        if threads not in _RUNNERS:
            _RUNNERS[threads] = Runner(threads)
        return _RUNNERS[threads]


def run(
    env: Union[Env, str],
    policy: PolicyLike,
    *,
    n: int = 10,
    concurrency: int = 0,
    seed: int = 0,
    max_steps: Optional[int] = None,
    tasks: Optional[Iterable[Dict[str, Any]]] = None,
    on_trajectory: Optional[Callable[[Trajectory], Any]] = None,
    progress: Optional[Callable[[int, int], Any]] = None,
    telemetry: Optional[Iterable[Union[str, Dict[str, Any]]]] = None,
) -> List[Trajectory]:
    """Roll out ``n`` episodes of ``env`` (an Env or URI) on ``concurrency`` library threads (0: one per core)."""
    return _runner(concurrency).run(
        _env(env),
        policy,
        n,
        seed=seed,
        max_steps=max_steps,
        tasks=tasks,
        on_trajectory=on_trajectory,
        progress=progress,
        telemetry=telemetry,
    )
