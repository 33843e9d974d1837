#!/usr/bin/env python3
"""nenyax_native.ray against a local Runner in one process, side by side in one run.

Starts its own Ray cluster on this machine (bindings/python/tests/ray_cluster.py: one raylet per
"node", each with CPUS logical CPUs), then, for the same batch (N rollouts of ``URI`` with the
reference policy, every one checked to score 1.0):

- ``local/decode``: what the driver pays per trajectory to parse a shard into Trajectory objects;
- ``local/library/{1,2}``: the library alone (``nenyax_runner_run``'s JSON, unparsed);
- ``local/runner/{1,2}``: ``nenyax_native.Runner(threads).run`` in this process, one call;
- ``local/runner/{1,2}/sharded``: the same, in shards of SHARD run one after another: the
  single-process baseline the Ray figures are divided by (``vs_local_sharded``), since the
  Python side (parsing the JSON into Trajectory objects) costs less per shard than in one piece;
- ``ray/1-node`` and ``ray/2-nodes``: ``RayRunner(actors=CPUS per node, threads=1).run`` with
  shards of SHARD rollouts (the pool made and warmed once, outside the timing);
- ``ray/overhead``: Ray's own cost per shard, in microseconds: an empty actor call (``ping``,
  ``ray.get`` of one call at a time), an empty shard (``batch`` with n=0: the Runner call with
  its JSON, no episode) and the per-shard cost the 2-node batch paid beyond the local Runner.

Each rate is the best and median of RUNS timed runs after one warm-up; one JSON object per line.
Both "nodes" share this machine's cores, so the 2-node figures measure the distribution
machinery, not added hardware.

    .venv-python-binding/bin/python benches/ray_scaleout.py   # scripts/test_python.sh makes that venv (ray, nenyax-native)
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import nenyax_native as nx
import ray
from nenyax_native._native import call_string, ffi, json_arg, lib
from nenyax_native.ray import RayRunner

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bindings" / "python" / "tests"))
from ray_cluster import LocalCluster

URI = os.environ.get("URI", "builtin:arithmetic")
N = int(os.environ.get("N", "20000"))
SHARD = int(os.environ.get("SHARD", "500"))
RUNS = int(os.environ.get("RUNS", "5"))
CPUS = int(os.environ.get("CPUS", "2"))
CALLS = 300


def report(workload: str, unit: str, values: list, **extra) -> None:
    best = min(values) if unit.startswith("us") else max(values)
    print(json.dumps({"workload": workload, "unit": unit, "best": round(best, 1), "median": round(statistics.median(values), 1), **extra}), flush=True)


def rates(batch) -> list:
    out = []
    for i in range(RUNS + 1):
        t0 = time.perf_counter()
        trajs = batch()
        dt = time.perf_counter() - t0
        assert len(trajs) == N and all(t.score == 1.0 for t in trajs), "a batch lost or failed rollouts"
        if i:  # the first run warms up
            out.append(N / dt)
    return out


def overhead(runner: RayRunner) -> None:
    actor = runner._actors[0].handle
    for name, call in (("ping", lambda: actor.ping.remote()), ("empty-shard", lambda: actor.batch.remote({"n": 0}))):
        ray.get(call())
        samples = []
        for _ in range(CALLS):
            t0 = time.perf_counter()
            ray.get(call())
            samples.append((time.perf_counter() - t0) * 1e6)
        report(f"ray/overhead/{name}", "us per call", samples, calls=CALLS)


def ray_side(cluster: LocalCluster, nodes: str, local_rate: float) -> None:
    with RayRunner(URI, "reference", actors=CPUS * len(cluster.alive()), threads=1) as runner:
        runner.wait_ready(120)
        got = rates(lambda: runner.run(N, shard_size=SHARD))
        shards = -(-N // SHARD)
        # What each shard cost beyond the sharded local run's time for its rollouts (negative when
        # the actors' parallelism outweighs Ray's cost).
        extra_us = (N / statistics.median(got) - N / local_rate) / shards * 1e6
        report(f"ray/{nodes}", "rollouts/s", got, shard=SHARD, actors=len(runner.nodes()), vs_local_sharded=round(statistics.median(got) / local_rate, 2), shard_extra_us=round(extra_us))
        if nodes == "1-node":
            overhead(runner)


def library_rate(runner: nx.Runner, env: nx.Env, policy: nx.Policy) -> list:
    """The library alone: nenyax_runner_run's JSON, not parsed (the ceiling of any Python caller)."""
    out = []
    for i in range(RUNS + 1):
        t0 = time.perf_counter()
        call_string(lib.nenyax_runner_run, runner._handle, env.handle, policy.handle, *json_arg({"n": N}), ffi.NULL, ffi.NULL)
        if i:
            out.append(N / (time.perf_counter() - t0))
    return out


def sharded(runner: nx.Runner, env: nx.Env, policy: nx.Policy) -> list:
    """The batch as RayRunner cuts it, run one shard after another in this process."""
    return [t for start in range(0, N, SHARD) for t in runner.run(env, policy, min(SHARD, N - start), seed=start)]


def decode_cost(runner: nx.Runner, env: nx.Env, policy: nx.Policy) -> list:
    """Microseconds per trajectory to turn a shard's JSON into Trajectory objects (the driver's share)."""
    raw = call_string(lib.nenyax_runner_run, runner._handle, env.handle, policy.handle, *json_arg({"n": SHARD}), ffi.NULL, ffi.NULL)
    out = []
    for _ in range(RUNS * 4):
        t0 = time.perf_counter()
        [nx.Trajectory(d) for d in json.loads(raw)]
        out.append((time.perf_counter() - t0) / SHARD * 1e6)
    return out


def main() -> None:
    env = nx.load(URI)
    policy = env.reference_policy()
    report("local/decode", "us per trajectory", decode_cost(nx.Runner(1), env, policy), shard=SHARD)
    for threads in (1, 2):
        runner = nx.Runner(threads)
        report(f"local/library/{threads}", "rollouts/s", library_rate(runner, env, policy))
        report(f"local/runner/{threads}", "rollouts/s", rates(lambda runner=runner: runner.run(env, policy, N)))
        got = rates(lambda runner=runner: sharded(runner, env, policy))
        report(f"local/runner/{threads}/sharded", "rollouts/s", got, shard=SHARD)
    local = statistics.median(got)
    root = Path(tempfile.mkdtemp(prefix="nxray-"))
    cluster = LocalCluster(root, cpus_per_node=CPUS, object_store_bytes=150_000_000)
    try:
        cluster.start(workers=0)
        ray_side(cluster, "1-node", local)
        cluster.add_node("w1")
        cluster.wait_alive({"head", "w1"})
        ray_side(cluster, "2-nodes", local)
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
