"""Lazily parsed trajectories, and the batch paths: JSONL chunks, iter_run, write, the sink."""

import io
import json
import pickle

import nenyax_native as nx
import pytest
from nenyax_native.trajectory import Trajectory

URI = "builtin:arithmetic?size=7"


@pytest.fixture(scope="module")
def env():
    return nx.load(URI)


def test_lazy_trajectory_keeps_the_library_json_until_a_field_is_read(env):
    t = env.rollout(env.reference_policy(), seed=3)
    raw = t._raw
    assert raw is not None and t.to_json_bytes() is raw and t.to_json() == raw.decode()
    assert t == Trajectory.from_json(raw)  # same bytes or same fields
    assert t.score == 1.0 and t.seed == 3 and t._raw is None  # parsed on first access
    assert t.to_dict() == json.loads(raw) and json.loads(t.to_json()) == json.loads(raw)


def test_a_field_changed_in_place_is_in_to_json(env):
    t = env.rollout(env.reference_policy(), seed=1)
    t.metadata["note"] = "kept"
    t.error = "set by hand"
    back = json.loads(t.to_json())
    assert back["metadata"]["note"] == "kept" and back["error"] == "set by hand" and t.score is None


def test_unknown_attribute_and_pickle(env):
    t = env.rollout(env.reference_policy(), seed=2)
    with pytest.raises(AttributeError, match="no_such"):
        t.no_such  # noqa: B018
    assert t._raw is not None  # an unknown name does not parse
    assert pickle.loads(pickle.dumps(t)) == t
    t.score  # noqa: B018
    assert pickle.loads(pickle.dumps(t)).to_dict() == t.to_dict()


@pytest.mark.parametrize("threads", [1, 2])
def test_chunked_runs_are_the_one_call_batch(env, threads):
    """JSONL in chunks of 3 gives the jobs (task cycled, seed + i) of one sink-streamed batch of the library."""
    runner = nx.Runner(threads)
    policy = env.reference_policy()
    tasks = env.tasks()[:4]
    streamed = []
    whole = runner.run(env, policy, 11, seed=5, tasks=tasks, on_trajectory=streamed.append)  # the sink path
    chunked = list(runner.iter_run(env, policy, 11, seed=5, tasks=tasks, chunk=3))
    assert [(t.task_id, t.seed, t.score) for t in chunked] == [(t.task_id, t.seed, t.score) for t in whole]
    assert [t.seed for t in chunked] == list(range(5, 16)) and [t.task_id for t in chunked[:5]] == [t["id"] for t in tasks] + [tasks[0]["id"]]
    assert streamed == whole
    # No tasks given: the environment's own, as the library plans them (7 tasks, cycled), in chunks too.
    planned = runner.run(env, policy, 9, on_trajectory=lambda t: None)
    assert [t.task_id for t in runner.iter_run(env, policy, 9, chunk=2)] == [t.task_id for t in planned]
    assert [t.task_id for t in runner.run(env, policy, 9, tasks=[])] == [t.task_id for t in planned]


def test_write_appends_jsonl(env, tmp_path):
    runner = nx.Runner(2)
    path = tmp_path / "t.jsonl"
    assert runner.write(path, env, env.reference_policy(), 5, chunk=2) == 5
    assert runner.write(str(path), env, env.reference_policy(), 2, seed=5) == 2
    lines = path.read_bytes().splitlines()
    assert [json.loads(line)["seed"] for line in lines] == list(range(7))
    buf = io.BytesIO()
    runner.write(buf, env, env.reference_policy(), 3)
    assert [Trajectory.from_json(line).score for line in buf.getvalue().splitlines()] == [1.0] * 3


def test_bad_batch_arguments_are_named(env):
    runner = nx.Runner(1)
    with pytest.raises(ValueError, match="n must be"):
        runner.run(env, env.reference_policy(), -1)
    with pytest.raises(ValueError, match="chunk"):
        list(runner.iter_run(env, env.reference_policy(), 3, chunk=0))
    assert runner.run(env, env.reference_policy(), 0) == []


def test_a_failed_rollout_is_kept_in_a_batch(env):
    def broken(observation):
        raise RuntimeError("policy bug")

    trajs = nx.Runner(1).run(env, broken, 3)
    assert len(trajs) == 3 and all("policy bug" in (t.error or "") and t.score is None for t in trajs)


def test_unknown_fields_are_kept_even_with_fields_missing():
    t = Trajectory.from_json('{"env_id": "x", "future_field": [1]}')
    assert t.to_dict()["future_field"] == [1] and t.steps == [] and t.metadata == {}


def test_nan_is_refused_not_sent_as_null(env):
    # orjson (the [fast] extra) writes NaN as null; the binding must refuse it as json does.
    from nenyax_native._native import dumps
    from nenyax_native.errors import InvalidArgumentError

    assert json.loads(dumps({"a": None, "b": [1.5]})) == {"a": None, "b": [1.5]}
    with pytest.raises(InvalidArgumentError, match="NaN"):
        dumps({"a": float("nan")})
    with pytest.raises(InvalidArgumentError, match="NaN"):
        env.rollout(env.reference_policy(), task={"id": "x", "data": {"v": float("inf")}})
    # From a policy callback the refusal fails that episode only, with the reason on record.
    t = env.rollout(lambda observation: float("nan"), seed=1)
    assert t.error is not None and "NaN" in t.error
