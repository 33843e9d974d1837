"""Scale-out on Ray: the same batches as :class:`nenyax_native.Runner`, over the actors of a Ray cluster.

Each actor loads the environment once (by URI) and owns a library :class:`~nenyax_native.Runner`
over its node's cores. A batch is the job list a local run would play (the environment's tasks
cycled, seeds from ``seed``), cut into shards that carry their own tasks and first seed, so the
cluster returns the very trajectories a local ``Runner.run`` returns, in job order, each once. At
most ``max_in_flight`` shards are outstanding. An actor that dies (its worker, its raylet or its
node) has its unfinished shards re-run on the others and is replaced wherever Ray can place a new
one; results are kept by shard index, so a shard that ran twice still counts once.

Ray is imported on first use: ``pip install 'nenyax-native[ray]'``.
"""

from __future__ import annotations

import json
import math
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Deque, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from ._native import call_json, call_string, ffi, json_arg, lib, utf8
from ._native import check as check_error
from .env import Env, Runner, load
from .errors import NenyaxError
from .policy import Endpoint, FunctionModel, Policy, as_policy
from .report import Report
from .trajectory import Trajectory

#: A policy every node can rebuild: "reference" / "null" (the environment's own), an endpoint's
#: options (a dict, as ``nenyax_policy_endpoint`` takes them) or an :class:`Endpoint`, a
#: :class:`FunctionModel`, or a callable (an action policy); Ray cloudpickles the last two to the
#: actors, so their code must be importable there or registered with
#: ``cloudpickle.register_pickle_by_value``.
PolicySpec = Union[str, Dict[str, Any], Endpoint, FunctionModel, Callable[..., Any]]
Progress = Callable[[int, int], None]

# Seed mixing of the library's EpisodeContext::new (core/src/policy.rs), so that the sampling
# seeds of rollout_groups' episodes are the ones nenyax_train gives the same round, group and member.
_MASK = (1 << 64) - 1
_PHASE_TRAIN = 1


def _splitmix64(x: int) -> int:
    z = (x + 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def sample_seed(run_seed: int, round: int, group: int, member: int, phase: int = _PHASE_TRAIN) -> int:
    """The sampling seed ``nenyax_train`` gives an episode (EpisodeContext::new in the library)."""
    h = _splitmix64(run_seed & _MASK)
    for x in (phase, round, group, member):
        h = _splitmix64(h ^ x)
    return h


def _get(ray: Any, ref: Any, what: Optional[str] = None) -> Any:
    """``ray.get``, with a NenyaxError the work raised (bad URI, spec, options) raised as itself, after ``what``."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        cause = exc.cause
        if isinstance(cause, NenyaxError):
            raise (type(cause)(f"{what}: {cause.message}") if what else cause) from None
        raise


def _ray() -> Any:
    try:
        import ray

        ray.remote  # noqa: B018 - a directory named ray on sys.path imports as an empty namespace package
    except (ImportError, AttributeError) as exc:
        raise ImportError("nenyax_native.ray needs Ray: pip install 'nenyax-native[ray]' (or pip install ray)") from exc
    return ray


SPEC_HELP = "use 'reference', 'null', an endpoint dict, an Endpoint, a FunctionModel or a callable"


def make_policy(env: Env, spec: PolicySpec) -> Policy:
    """The policy handle a spec names, built against ``env`` (on the node that runs it)."""
    if isinstance(spec, str):
        if spec == "reference":
            return env.reference_policy()
        if spec == "null":
            return env.null_policy()
        raise ValueError(f"policy spec {spec!r} is unknown: {SPEC_HELP}")
    if isinstance(spec, dict):
        # The library reads the options itself, so an unknown key is named by its ConfigError.
        out = ffi.new("nenyax_policy_t **")
        check_error(lib.nenyax_policy_endpoint(*json_arg(spec), out))
        return Policy(out[0], kind="chat")
    return as_policy(spec)


def _check_spec(spec: PolicySpec) -> None:
    """Refuse a bad spec on the driver, before any actor is started for it."""
    if isinstance(spec, Policy):
        raise TypeError(f"a Policy is a handle in this process and cannot go to other nodes; {SPEC_HELP}")
    if isinstance(spec, str) and spec not in ("reference", "null"):
        raise ValueError(f"policy spec {spec!r} is unknown: {SPEC_HELP}")
    if not isinstance(spec, (str, dict, Endpoint, FunctionModel)) and not callable(spec):
        raise TypeError(f"a policy spec cannot be a {type(spec).__name__}: {SPEC_HELP}")


class _Worker:
    """The body of one actor: the environment and the policy, loaded once, and a library Runner."""

    def __init__(self, uri: str, spec: PolicySpec, threads: int) -> None:
        # A bad URI or spec is kept and raised by node(): raised here, Ray would report a dead
        # actor (to be replaced) instead of the typed error the caller has to see.
        self.failure: Optional[BaseException] = None
        try:
            self.env = load(uri)
            self.policy = make_policy(self.env, spec)
            self.runner = Runner(threads)
        except Exception as exc:
            self.failure = exc

    def node(self) -> str:
        """The id of the Ray node this actor lives on; raises what its loading raised."""
        if self.failure is not None:
            raise self.failure
        return _ray().get_runtime_context().get_node_id()

    def tasks(self, limit: int) -> List[Dict[str, Any]]:
        """The environment's first ``limit`` tasks, as a local run plans them."""
        return self.env.tasks(limit)

    def batch(self, options: Dict[str, Any]) -> bytes:
        """One shard of a run: the library's JSON array of trajectories (parsed on the driver)."""
        ptr, size = json_arg(options)
        # The raw JSON goes back as bytes: parsing it here only to pickle it again would double the work.
        return call_string(lib.nenyax_runner_run, self.runner._handle, self.env.handle, self.policy.handle, ptr, size, ffi.NULL, ffi.NULL)

    def episodes(self, jobs: List[Dict[str, Any]]) -> bytes:
        """One shard of single rollouts with their own options (train contexts), on the runner's threads."""
        def one(options: Dict[str, Any]) -> bytes:
            ptr, size = json_arg(options)
            return call_string(lib.nenyax_env_rollout, self.env.handle, self.policy.handle, ptr, size)

        # cffi releases the GIL in every C call, so these threads roll out in parallel.
        with ThreadPoolExecutor(max(1, self.runner.threads)) as pool:
            return b"[" + b",".join(pool.map(one, jobs)) + b"]"

    def ping(self, payload: Any = None) -> Any:
        """An empty round trip (echoes ``payload``): Ray's own cost per call, see benches/ray_scaleout.py."""
        return payload


@dataclass
class Group:
    """One task's rollouts in a training round: what a learner's update reads (the learner contract's groups)."""

    index: int
    task: Optional[Dict[str, Any]]
    seed: Optional[int]
    trajectories: List[Trajectory]

    def to_dict(self) -> Dict[str, Any]:
        """The JSON shape of ``nenyax_learner_vtable_t.update``'s groups."""
        return {"index": self.index, "task": self.task, "seed": self.seed, "trajectories": [t.to_dict() for t in self.trajectories]}


class _Actor:
    """A live or starting actor and the shards it holds."""

    def __init__(self, handle: Any, ready: Any) -> None:
        self.handle = handle
        self.ready = ready  # the ObjectRef of node(); None once the actor answered
        self.node: Optional[str] = None
        self.shards: Dict[Any, int] = {}


class RayRunner:
    """A pool of Ray actors for one environment URI and one policy spec; reuse it across batches."""

    def __init__(
        self,
        uri: str,
        policy: PolicySpec = "reference",
        *,
        actors: Optional[int] = None,
        threads: int = 1,
        actor_options: Optional[Dict[str, Any]] = None,
        replacements: int = 16,
        max_attempts: int = 4,
        start_timeout_s: float = 300.0,
    ) -> None:
        _check_spec(policy)
        ray = self._ray = _ray()
        if not ray.is_initialized():
            ray.init()
        self.uri, self.policy, self.threads = uri, policy, threads
        # One logical CPU per library thread, so Ray's accounting matches the cores an actor uses;
        # SPREAD puts the actors on every node rather than filling the first.
        self.actor_options = {"num_cpus": threads, "scheduling_strategy": "SPREAD", "max_restarts": 0, **(actor_options or {})}
        cpus = ray.cluster_resources().get("CPU", 1.0)
        self.size = actors if actors is not None else max(1, int(cpus // max(self.actor_options["num_cpus"], 1e-9)))
        if self.size < 1:
            raise ValueError(f"actors is {self.size}; it must be at least 1")
        self.replacements_left = replacements
        self.max_attempts = max_attempts
        self.start_timeout_s = start_timeout_s
        self._cls = ray.remote(_Worker).options(**self.actor_options)
        self._actors: List[_Actor] = []
        #: Counts since the pool started: actors lost (and replaced while the budget lasts), shards re-run.
        self.stats = {"lost_actors": 0, "retried_shards": 0}
        self._top_up()

    # -- the pool ---------------------------------------------------------------------------

    def _start(self) -> None:
        handle = self._cls.remote(self.uri, self.policy, self.threads)
        self._actors.append(_Actor(handle, handle.node.remote()))

    def _top_up(self) -> None:
        while len(self._actors) < self.size:
            self._start()

    def _retire(self, actor: _Actor) -> List[int]:
        """Drop a dead actor, start a replacement if the budget allows; its shards to re-run."""
        self._actors.remove(actor)
        self._ray.kill(actor.handle, no_restart=True)
        if self.replacements_left > 0:
            self.replacements_left -= 1
            self._start()
        lost = sorted(actor.shards.values())
        # Emptied, so that results of its calls still in hand from the same ray.wait are dropped.
        actor.shards.clear()
        return lost

    def nodes(self) -> List[str]:
        """The node ids of the actors that have answered so far."""
        return [a.node for a in self._actors if a.node is not None]

    def wait_ready(self, timeout_s: Optional[float] = None) -> List[str]:
        """Block until every actor answered (or ``timeout_s`` passed); their node ids."""
        refs = [a.ready for a in self._actors if a.ready is not None]
        if refs:
            self._ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        for actor in list(self._actors):
            if actor.ready is not None and self._ray.wait([actor.ready], timeout=0)[0]:
                self._answered(actor)
        return self.nodes()

    def _get(self, ref: Any) -> Any:
        return _get(self._ray, ref)

    def _answered(self, actor: _Actor) -> bool:
        """Take a starting actor's answer: True if it is ready, False (and retired) if it died."""
        try:
            actor.node = self._get(actor.ready)
        except self._retryable():
            self.stats["lost_actors"] += 1
            self._retire(actor)
            return False
        actor.ready = None
        return True

    def _retryable(self) -> Tuple[type, ...]:
        e = self._ray.exceptions
        # Failures of the machinery, not of the work: the shard is sound and runs again elsewhere.
        return (e.RayActorError, e.ObjectLostError, e.WorkerCrashedError, e.NodeDiedError, e.LocalRayletDiedError, e.OutOfMemoryError)

    def close(self) -> None:
        """Kill the actors (their environments and runners go with them)."""
        for actor in self._actors:
            self._ray.kill(actor.handle, no_restart=True)
        self._actors = []

    def __enter__(self) -> "RayRunner":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- the scheduler ----------------------------------------------------------------------

    def _drive(self, method: str, payloads: Sequence[Any], counts: Sequence[int], max_in_flight: int, progress: Optional[Progress]) -> List[Trajectory]:
        """Run every payload on some actor's ``method``; their trajectories in payload order, each shard once."""
        ray = self._ray
        retryable = self._retryable()
        self._top_up()
        pending: Deque[int] = deque(range(len(payloads)))
        results: Dict[int, List[Trajectory]] = {}
        attempts = [0] * len(payloads)
        done_jobs, total_jobs = 0, sum(counts)
        stalled_since = time.monotonic()
        try:
            while len(results) < len(payloads):
                in_flight = sum(len(a.shards) for a in self._actors)
                ready = [a for a in self._actors if a.ready is None]
                while pending and in_flight < max_in_flight and ready:
                    actor = min(ready, key=lambda a: len(a.shards))
                    index = pending.popleft()
                    attempts[index] += 1
                    actor.shards[getattr(actor.handle, method).remote(payloads[index])] = index
                    in_flight += 1
                waiting = {ref: a for a in self._actors for ref in a.shards}
                starting = {a.ready: a for a in self._actors if a.ready is not None}
                if not waiting and not starting:
                    raise RuntimeError(
                        f"no Ray actor is left for {self.uri} and the replacement budget is spent; "
                        f"{len(payloads) - len(results)} shards did not run (raise replacements, or check the cluster)"
                    )
                if not waiting and time.monotonic() - stalled_since > self.start_timeout_s:
                    raise TimeoutError(
                        f"no Ray actor for {self.uri} started within {self.start_timeout_s:.0f} s: the cluster has no room for "
                        f"actor_options={self.actor_options} (add nodes, or lower num_cpus)"
                    )
                done, _ = ray.wait(list(waiting) + list(starting), num_returns=1, timeout=5.0)
                for ref in done:
                    if ref in starting:
                        if self._answered(starting[ref]):
                            stalled_since = time.monotonic()
                        continue
                    actor = waiting[ref]
                    if ref not in actor.shards:  # its actor was retired while this batch of refs was handled
                        continue
                    index = actor.shards.pop(ref)
                    try:
                        value = self._get(ref)
                    except retryable as exc:
                        self.stats["lost_actors"] += 1
                        lost = [index] + self._retire(actor)
                        self.stats["retried_shards"] += len(lost)
                        for i in lost:
                            if attempts[i] >= self.max_attempts:
                                raise RuntimeError(f"shard {i} of {self.uri} failed {attempts[i]} times; last: {exc}") from exc
                        pending.extendleft(reversed([i for i in lost if i not in results]))
                        continue
                    stalled_since = time.monotonic()
                    if index in results:
                        continue
                    # Parsed as each shard lands, while the actors work on the next ones.
                    results[index] = [Trajectory(d) for d in json.loads(value)]
                    done_jobs += counts[index]
                    if progress is not None:
                        progress(done_jobs, total_jobs)
        finally:
            # A batch that raised leaves calls running; forgetting them here keeps their results
            # out of the next batch, which would otherwise take them for its own shards.
            for actor in self._actors:
                actor.shards.clear()
        return [t for i in range(len(payloads)) for t in results[i]]

    # -- the work ---------------------------------------------------------------------------

    def _plan_tasks(self, n: int) -> List[Dict[str, Any]]:
        """The environment's tasks a local plan cycles (asked of an actor: the driver need not load the env)."""
        self.wait_ready(self.start_timeout_s)
        live = [a for a in self._actors if a.ready is None]
        if not live:
            raise TimeoutError(f"no Ray actor for {self.uri} started within {self.start_timeout_s:.0f} s")
        return self._get(live[0].handle.tasks.remote(n))

    def _default_max_in_flight(self) -> int:
        # Two per actor: one running, one queued behind it, so no actor idles between shards.
        return 2 * len(self._actors)

    def _shard_size(self, n: int) -> int:
        return max(1, min(1000, math.ceil(n / (4 * len(self._actors)))))

    def run(
        self,
        n: int = 10,
        *,
        seed: int = 0,
        max_steps: Optional[int] = None,
        tasks: Optional[Iterable[Dict[str, Any]]] = None,
        shard_size: Optional[int] = None,
        max_in_flight: Optional[int] = None,
        progress: Optional[Progress] = None,
    ) -> List[Trajectory]:
        """``n`` episodes across the cluster: the same trajectories, in the same order, as ``Runner.run``."""
        if n < 0:
            raise ValueError(f"n is {n}; it must be at least 0")
        plan = list(tasks) if tasks is not None else []
        if not plan and n > 0:
            plan = self._plan_tasks(n)
        size = shard_size or self._shard_size(n)
        if size < 1:
            raise ValueError(f"shard_size is {size}; it must be at least 1")
        payloads, counts = [], []
        for start in range(0, n, size):
            count = min(size, n - start)
            options: Dict[str, Any] = {"n": count, "seed": seed + start}
            if plan:
                # Job i plays plan[i % len(plan)]; the shard's list starts where its first job is,
                # and the library cycles it from there just as the whole batch would.
                at = start % len(plan)
                options["tasks"] = (plan[at:] + plan[:at])[:count]
            if max_steps is not None:
                options["max_steps"] = max_steps
            payloads.append(options)
            counts.append(count)
        return self._drive("batch", payloads, counts, max_in_flight or self._default_max_in_flight(), progress)

    def rollout_groups(
        self,
        tasks: Sequence[Dict[str, Any]],
        group_size: int,
        *,
        seed: int = 0,
        round: int = 1,
        seeds: Optional[Sequence[int]] = None,
        max_steps: Optional[int] = None,
        shard_size: Optional[int] = None,
        max_in_flight: Optional[int] = None,
        progress: Optional[Progress] = None,
    ) -> List[Group]:
        """The rollout phase of a training round: ``group_size`` episodes of each task, as the learner's groups.

        Group ``g`` plays ``tasks[g]`` with environment seed ``seeds[g]`` (default ``seed + g``); its
        members carry the train context (round, group, member and the sampling seed
        ``nenyax_train`` would give them), so a per-episode policy samples each member differently
        and reproducibly.
        """
        if group_size < 1:
            raise ValueError(f"group_size is {group_size}; it must be at least 1")
        slots = list(seeds) if seeds is not None else [seed + g for g in range(len(tasks))]
        if len(slots) != len(tasks):
            raise ValueError(f"seeds has {len(slots)} entries for {len(tasks)} tasks; give one per task")
        jobs = []
        for g, task in enumerate(tasks):
            for m in range(group_size):
                context = {"phase": "train", "round": round, "group": g, "member": m, "sample_seed": sample_seed(seed, round, g, m)}
                job: Dict[str, Any] = {"task": task, "seed": slots[g], "context": context}
                if max_steps is not None:
                    job["max_steps"] = max_steps
                jobs.append(job)
        size = shard_size or self._shard_size(len(jobs))
        chunks = [jobs[i : i + size] for i in range(0, len(jobs), size)]
        flat = iter(self._drive("episodes", chunks, [len(c) for c in chunks], max_in_flight or self._default_max_in_flight(), progress))
        return [Group(g, task, slots[g], [next(flat) for _ in range(group_size)]) for g, task in enumerate(tasks)]


def run(
    uri: str,
    policy: PolicySpec = "reference",
    n: int = 10,
    *,
    seed: int = 0,
    max_steps: Optional[int] = None,
    tasks: Optional[Iterable[Dict[str, Any]]] = None,
    shard_size: Optional[int] = None,
    actors: Optional[int] = None,
    threads: int = 1,
    max_in_flight: Optional[int] = None,
    progress: Optional[Progress] = None,
    actor_options: Optional[Dict[str, Any]] = None,
) -> List[Trajectory]:
    """One batch on the cluster with a pool made for it (see :class:`RayRunner` to reuse a pool)."""
    with RayRunner(uri, policy, actors=actors, threads=threads, actor_options=actor_options) as runner:
        return runner.run(n, seed=seed, max_steps=max_steps, tasks=tasks, shard_size=shard_size, max_in_flight=max_in_flight, progress=progress)


def rollout_groups(
    uri: str,
    policy: PolicySpec,
    tasks: Sequence[Dict[str, Any]],
    group_size: int,
    seed: int = 0,
    *,
    round: int = 1,
    seeds: Optional[Sequence[int]] = None,
    max_steps: Optional[int] = None,
    actors: Optional[int] = None,
    threads: int = 1,
    actor_options: Optional[Dict[str, Any]] = None,
    progress: Optional[Progress] = None,
) -> List[Group]:
    """One training round's rollouts on the cluster, grouped per task (see :meth:`RayRunner.rollout_groups`)."""
    with RayRunner(uri, policy, actors=actors, threads=threads, actor_options=actor_options) as runner:
        return runner.rollout_groups(tasks, group_size, seed=seed, round=round, seeds=seeds, max_steps=max_steps, progress=progress)


def _check_one(uri: str, options: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    data = utf8(uri)
    ptr, size = json_arg(options)
    return call_json(lib.nenyax_check_uri, data, len(data), ptr, size)


def check(
    uris: Sequence[str],
    options: Optional[Dict[str, Any]] = None,
    *,
    num_cpus: float = 1,
    max_retries: int = 3,
    progress: Optional[Progress] = None,
) -> List[Report]:
    """Conformance reports of many URIs in parallel across the cluster, in the order given.

    Each URI is one Ray task (re-run by Ray up to ``max_retries`` times if its worker or node
    dies); a URI that fails to load raises its typed error here, naming the URI.
    """
    ray = _ray()
    if not ray.is_initialized():
        ray.init()
    task = ray.remote(_check_one).options(num_cpus=num_cpus, max_retries=max_retries)
    refs = [task.remote(uri, options) for uri in uris]
    index = {ref: i for i, ref in enumerate(refs)}
    reports: List[Any] = [None] * len(refs)
    remaining = list(refs)
    while remaining:
        done, remaining = ray.wait(remaining, num_returns=1)
        i = index[done[0]]
        reports[i] = Report(_get(ray, done[0], f"check of {uris[i]!r}"))
        if progress is not None:
            progress(len(refs) - len(remaining), len(refs))
    return reports
