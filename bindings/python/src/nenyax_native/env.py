"""Environments, native policies and runners over the C ABI handles."""

from __future__ import annotations

import json
from typing import Any, Dict, Iterable, List, Optional

from ._native import call_json, call_string, check, ffi, json_arg, lib, utf8
from .policy import Policy, PolicyLike, as_policy
from .trajectory import Trajectory


class Env:
    """A loaded environment of any format; safe to share between threads."""

    def __init__(self, handle: Any, keepalive: Any = None) -> None:
        self._handle = ffi.gc(handle, lib.nenyax_env_free)
        self._keepalive = keepalive
        self._manifest: Optional[Dict[str, Any]] = None

    @property
    def handle(self) -> Any:
        return self._handle

    @property
    def manifest(self) -> Dict[str, Any]:
        """The environment's manifest (docs/protocol.md), as a dict."""
        if self._manifest is None:
            self._manifest = call_json(lib.nenyax_env_manifest, self._handle)
        return self._manifest

    @property
    def id(self) -> str:
        return self.manifest.get("id", "")

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
        """One episode on this thread (any ``as_policy`` input). A failed episode is returned with its ``error``."""
        policy = as_policy(policy)
        options: Dict[str, Any] = {}
        if context is not None:
            options["context"] = context
        if task is not None:
            options["task"] = task
        if seed is not None:
            options["seed"] = seed
        if max_steps is not None:
            options["max_steps"] = max_steps
        ptr, size = json_arg(options or None)
        return Trajectory.from_json(call_string(lib.nenyax_env_rollout, self._handle, policy.handle, ptr, size))

    def __repr__(self) -> str:
        return f"Env({self.id!r})"


def load(uri: str) -> Env:
    """Load an environment by URI, e.g. ``builtin:arithmetic?size=100``."""
    data = utf8(uri)
    out = ffi.new("nenyax_env_t **")
    check(lib.nenyax_env_load(data, len(data), out))
    return Env(out[0])


class Runner:
    """A pool of ``threads`` library worker threads (0: one per core) for batches of rollouts."""

    def __init__(self, threads: int = 0) -> None:
        out = ffi.new("nenyax_runner_t **")
        check(lib.nenyax_runner_new(threads, out))
        self._handle = ffi.gc(out[0], lib.nenyax_runner_free)

    @property
    def threads(self) -> int:
        return int(lib.nenyax_runner_threads(self._handle))

    def run(
        self,
        env: Env,
        policy: Policy,
        n: int = 10,
        *,
        seed: int = 0,
        max_steps: Optional[int] = None,
        tasks: Optional[Iterable[Dict[str, Any]]] = None,
    ) -> List[Trajectory]:
        """``n`` episodes in parallel, returned in job order."""
        options: Dict[str, Any] = {"n": n, "seed": seed}
        if max_steps is not None:
            options["max_steps"] = max_steps
        if tasks is not None:
            options["tasks"] = list(tasks)
        ptr, size = json_arg(options)
        raw = call_string(lib.nenyax_runner_run, self._handle, env.handle, policy.handle, ptr, size, ffi.NULL, ffi.NULL)
        return [Trajectory(d) for d in json.loads(raw)]
