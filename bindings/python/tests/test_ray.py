"""Scale-out on a real two-node Ray cluster on this machine, with a node killed mid-batch.

Skipped when Ray is not installed; with NENYAX_REQUIRE_RAY=1 (as CI sets) a missing Ray fails.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import nenyax_native as nx
import pytest
from nenyax_native import ray as nxray
from nenyax_native._native import call_json, check, ffi, json_arg, lib
from nenyax_native.errors import ConfigError, UnknownSchemeError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ray_cluster import LocalCluster

try:
    import ray

    ray.remote  # noqa: B018 - a directory named ray on sys.path imports as an empty namespace package
except (ImportError, AttributeError):
    ray = None
    if os.environ.get("NENYAX_REQUIRE_RAY") == "1":
        pytest.fail("NENYAX_REQUIRE_RAY=1 but ray is not installed: pip install 'nenyax-native[ray]'", pytrace=False)

needs_ray = pytest.mark.skipif(ray is None, reason="ray is not installed (pip install 'nenyax-native[ray]'); NENYAX_REQUIRE_RAY=1 makes this a failure")

URI = "builtin:arithmetic"
N = 10_000


def timeless(traj: nx.Trajectory) -> dict:
    """A trajectory without what differs between two runs of the same episode: when and how long."""
    d = traj.to_dict()
    d.pop("started_at")
    d.pop("duration_s")
    for step in d["steps"]:
        step["info"].pop("timings", None)
    return d


def first_difference(got: list, want: list):
    """The first index where two runs differ beyond timing (None when they agree), and why."""
    if len(got) != len(want):
        return f"{len(got)} trajectories, not {len(want)}"
    return next((i for i, (a, b) in enumerate(zip(got, want, strict=True)) if timeless(a) != timeless(b)), None)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if ray is None:
        pytest.skip("ray is not installed")
    c = LocalCluster(tmp_path_factory.mktemp("ray"), cpus_per_node=2, object_store_bytes=100_000_000)
    try:
        c.start(workers=1)
        yield c
    finally:
        c.stop()


LOCAL_RATE: list = []  # rollouts/s of the single-process run, for the no-failure run's report


@pytest.fixture(scope="module")
def local_run():
    env = nx.load(URI)
    t0 = time.monotonic()
    out = nx.Runner(2).run(env, env.reference_policy(), n=N)
    LOCAL_RATE.append(N / (time.monotonic() - t0))
    return out


def test_sample_seeds_are_the_train_loops(tmp_path):
    env = nx.load("builtin:guess")
    out = ffi.new("nenyax_learner_t **")
    config = b'{"use": "grpo"}'
    check(lib.nenyax_learner_new(config, len(config), env.handle, ffi.NULL, ffi.NULL, ffi.NULL, ffi.NULL, out))
    learner = ffi.gc(out[0], lib.nenyax_learner_free)
    path = tmp_path / "trajectories.jsonl"
    call_json(lib.nenyax_train, env.handle, learner, *json_arg({"rounds": 2, "group_size": 3, "batch": 2, "seed": 7, "trajectories": str(path)}))
    episodes = [json.loads(line)["metadata"]["episode"] for line in path.read_text().splitlines()]
    train = [e for e in episodes if e["phase"] == "train"]
    assert len(train) == 2 * 2 * 3
    for e in train:
        assert nxray.sample_seed(7, e["round"], e["group"], e["member"]) == e["sample_seed"], e


def test_bad_policy_specs_are_refused_before_any_actor():
    with pytest.raises(ValueError, match="'oracle' is unknown"):
        nxray.RayRunner(URI, "oracle")
    with pytest.raises(TypeError, match="cannot be a int"):
        nxray.RayRunner(URI, 3)
    env = nx.load(URI)
    with pytest.raises(TypeError, match="cannot go to other nodes"):
        nxray.RayRunner(URI, env.reference_policy())


def solve(observation: dict) -> str:
    """An action policy that works the sum out from the observation, as a model would."""
    return f"<answer>{eval(observation['data']['expression'], {'__builtins__': {}})}</answer>"


@needs_ray
def test_run_survives_a_killed_node(cluster, local_run, capsys):
    alive = cluster.alive()
    with nxray.RayRunner(URI, "reference", actors=4, start_timeout_s=180) as runner:
        assert set(runner.wait_ready(180)) == set(alive.values()), "the actors must span both nodes"
        seen, killed = [], []

        def progress(done: int, total: int) -> None:
            seen.append((done, total))
            # A fifth of the way in: the worker node holds shards that are running or queued.
            if done >= N // 5 and not killed:
                killed.append((done, cluster.kill_node("w1")))

        t0 = time.monotonic()
        out = runner.run(N, shard_size=250, progress=progress)
        wall = time.monotonic() - t0
        assert killed and killed[0][1], "the worker node was not killed"
        assert killed[0][0] < N, "the kill landed after the batch"
        assert seen[-1] == (N, N) and [d for d, _ in seen] == sorted(d for d, _ in seen)
        # Both actors of the node; a replacement Ray placed there before it knew the node was dead also counts.
        assert runner.stats["lost_actors"] >= 2
        assert runner.stats["retried_shards"] >= 1
        cluster.wait_alive({"head"}, timeout_s=60)  # Ray saw the node die, not only this runner

        assert len(out) == N
        assert [(t.task_id, t.seed) for t in out] == [(t.task_id, t.seed) for t in local_run]
        assert sorted(t.seed for t in out) == list(range(N))
        assert all(t.ok and t.score == 1.0 for t in out)
        assert first_difference(out, local_run) is None

        # A fresh node takes the replacements that had no room while only the head was left.
        cluster.add_node("w2")
        alive = cluster.wait_alive({"head", "w2"})
        assert alive["w2"] in set(runner.wait_ready(180))
        t0 = time.monotonic()
        again = runner.run(N, shard_size=250)
        rate = N / (time.monotonic() - t0)
        with capsys.disabled():  # shown in CI's log, not only with -s
            print(
                f"\n{N} rollouts on Ray: {N / wall:.0f}/s with a node killed, {rate:.0f}/s without; "
                f"one process (Runner(2)): {LOCAL_RATE[0]:.0f}/s, Ray / local {rate / LOCAL_RATE[0]:.2f}x"
            )
        assert first_difference(again, local_run) is None


@needs_ray
def test_a_killed_actor_is_replaced_and_its_shards_rerun(cluster, local_run):
    with nxray.RayRunner(URI, actors=2) as runner:
        runner.wait_ready(180)
        victim = runner._actors[0].handle

        def progress(done: int, total: int) -> None:
            if done >= 1000 and runner.stats["lost_actors"] == 0 and any(a.handle is victim for a in runner._actors):
                ray.kill(victim, no_restart=True)  # the worker process only; its node lives on

        out = runner.run(4000, shard_size=100, progress=progress)
        assert runner.stats["lost_actors"] == 1 and runner.stats["retried_shards"] >= 1
        assert first_difference(out, local_run[:4000]) is None
        assert len(runner.wait_ready(180)) == 2, "the replacement did not start"


@needs_ray
def test_a_failed_batch_leaves_the_pool_clean(cluster, local_run):
    with nxray.RayRunner(URI, actors=2) as runner:

        def stop(done: int, total: int) -> None:
            raise KeyError("stopped by the caller")

        with pytest.raises(KeyError, match="stopped by the caller"):
            runner.run(2000, shard_size=100, progress=stop)
        # The library's own refusal, raised from the actor as the typed error it is.
        with pytest.raises(ConfigError, match="max_steps must be at least 1"):
            runner.run(10, max_steps=0)
        # The shards of both batches that were still running must not leak into this one.
        out = runner.run(2000, shard_size=100)
        assert first_difference(out, local_run[:2000]) is None


@needs_ray
def test_a_python_callable_policy_goes_to_the_actors(cluster, local_run):
    # Ray pickles functions of importable modules by name; the workers cannot import this test
    # module, so its functions travel by value, as a user's notebook functions do.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    out = nxray.run(URI, solve, 600, actors=2, shard_size=50)
    assert [t.steps[0]["action"] for t in out] == [t.steps[0]["action"] for t in local_run[:600]]
    assert all(t.score == 1.0 for t in out)


@needs_ray
def test_rollout_groups_carry_the_train_contexts(cluster):
    # nenyax_train's round 1 with seed 7 and batch 2 plays tasks 3 and 28 of builtin:guess
    # (environment seeds 7 + index); the same groups on Ray get the same episode contexts.
    env = nx.load("builtin:guess")
    tasks = [t for t in env.tasks() if t["id"] in ("3", "28")]
    tasks.sort(key=lambda t: t["id"] != "3")
    groups = nxray.rollout_groups("builtin:guess", "reference", tasks, 3, 7, actors=2, seeds=[10, 35])
    assert [(g.index, g.task["id"], g.seed) for g in groups] == [(0, "3", 10), (1, "28", 35)]
    for g in groups:
        assert [t.metadata["episode"]["member"] for t in g.trajectories] == [0, 1, 2]
        for m, t in enumerate(g.trajectories):
            e = t.metadata["episode"]
            assert (e["phase"], e["round"], e["group"], e["task_id"], e["seed"]) == ("train", 1, g.index, g.task["id"], g.seed)
            assert e["sample_seed"] == nxray.sample_seed(7, 1, g.index, m)
            assert t.ok and t.seed == g.seed
    assert json.loads(json.dumps(groups[0].to_dict()))["trajectories"][0]["task"]["id"] == "3"


@needs_ray
def test_check_many_uris_in_order(cluster):
    uris = ["builtin:arithmetic?size=5", "builtin:guess", "builtin:arithmetic?size=7"]
    reports = nxray.check(uris, {"samples": 2, "threads": 1})
    assert [r.env_id for r in reports] == uris
    assert all(r.checks and r.reached("evaluable") for r in reports)
    with pytest.raises(UnknownSchemeError, match="check of 'nosuch:thing'"):
        nxray.check(["builtin:guess", "nosuch:thing"])


@needs_ray
def test_bad_uri_and_endpoint_raise_typed_errors_from_the_actors(cluster):
    with nxray.RayRunner("nosuch:thing", actors=1) as runner, pytest.raises(UnknownSchemeError, match="nosuch"):
        runner.run(10)
    with pytest.raises(nx.NenyaxError) as info:
        nxray.run(URI, {"provider": "no-such-provider", "model": "m"}, 4, actors=1)
    assert "no-such-provider" in str(info.value)
