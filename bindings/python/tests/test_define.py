"""Environments defined from Python: spec dicts, TOML files, task rows with a scorer, state functions."""

import threading

import nenyax_native as nx
import pytest
from nenyax_native import errors

ROWS = [
    {"prompt": "Capital of Kenya?", "answer": "Nairobi"},
    {"prompt": "Capital of Peru?", "answer": "Lima"},
]


def test_define_from_a_spec_dict_with_a_judge():
    env = nx.define({"name": "caps", "tasks": ROWS, "judge": nx.Contains()})
    assert env.id == "defined:caps" and len(env.tasks()) == 2
    assert env.rollout(lambda obs: "Surely Nairobi", task=env.tasks()[0]).score == 1.0
    assert env.rollout(env.reference_policy(), task=env.tasks()[1]).score == 1.0
    same = nx.define("caps", tasks=ROWS, judge={"type": "contains"}, description="capitals")
    assert same.manifest["description"] == "capitals"


def test_define_from_a_toml_file(tmp_path):
    (tmp_path / "tasks.jsonl").write_text("\n".join('{"prompt": "%s", "answer": "%s"}' % (r["prompt"], r["answer"]) for r in ROWS))
    path = tmp_path / "caps.toml"
    path.write_text('name = "caps_file"\ntasks_file = "tasks.jsonl"\n\n[judge]\ntype = "contains"\n')
    env = nx.define(path)
    assert env.id == f"define:{path}" and env.manifest["name"] == "caps_file" and len(env.tasks()) == 2
    assert nx.run(env, env.reference_policy(), n=2)[1].score == 1.0
    with pytest.raises(FileNotFoundError):
        nx.define(tmp_path / "missing.toml")


def test_define_tasks_with_a_python_scorer_and_reference():
    calls = []

    def score(task, reply):
        calls.append((task["answer"], reply))
        return float(task["answer"].lower() in reply.lower())

    env = nx.define("caps_py", tasks=ROWS, score=score, reference=lambda task: f"It is {task['answer']}.")
    trajs = nx.run(env, env.reference_policy(), n=4, concurrency=2)
    assert [t.score for t in trajs] == [1.0] * 4
    assert ("Lima", "It is Lima.") in calls
    assert env.rollout(lambda obs: "no idea", task=env.tasks()[0]).score == 0.0
    # The library rebuilds it from the same callbacks for its reproducibility checks.
    assert env.check(samples=2, threads=2).tier == "audited"


def test_a_scorer_that_fails_fails_only_its_episode():
    def score(task, reply):
        if task["answer"] == "Lima":
            raise KeyError("no grader for Lima")
        return 1.0

    env = nx.define("caps_bad", tasks=ROWS, score=score)
    trajs = nx.run(env, lambda obs: "x", n=4, concurrency=2)
    assert [t.error is None for t in trajs] == [True, False, True, False]
    assert "KeyError" in trajs[1].error and "no grader for Lima" in trajs[1].error
    env = nx.define("caps_nan", tasks=ROWS, score=lambda task, reply: "high")
    assert "score must return a number" in env.rollout(lambda obs: "x").error


def test_define_stateful_from_python_functions():
    def reset(seed):
        return {"count": 0, "target": 3 + seed % 2}

    def observe(state):
        return f"count is {state['count']}; say 'up' to count"

    def step(state, action):
        state = dict(state, count=state["count"] + (action == "up"))
        return state, float(action == "up"), state["count"] >= state["target"]

    env = nx.define("counter", reset=reset, observe=observe, step=step, max_steps=10)
    traj = env.rollout(lambda obs: "up", seed=1)
    assert traj.error is None and len(traj.steps) == 4 and traj.score == 4.0
    assert traj.initial_observation["text"].startswith("count is 0")
    assert len(env.rollout(lambda obs: "down", seed=0).steps) == 10  # max_steps ends it
    with env.session(seed=0) as session:
        assert session.act("up")["reward"] == 1.0 and "count is 1" in session.observation["text"]


def test_stateful_thread_safe_functions_run_on_workers():
    threads = set()

    def step(state, action):
        threads.add(threading.get_ident())
        return state, 1.0, True

    env = nx.define("one", reset=lambda seed: {}, observe=lambda s: "go", step=step, thread_safe=True)
    assert all(t.score == 1.0 for t in nx.run(env, nx.Policy.from_callable(lambda o: "x", thread_safe=True), n=6, concurrency=2))
    assert threading.get_ident() not in threads


def test_a_failing_step_function_fails_the_episode():
    env = nx.define("broken", reset=lambda seed: {}, observe=lambda s: "go", step=lambda s, a: "not a tuple")
    traj = env.rollout(lambda obs: "x")
    assert traj.error is not None and "step must return (state, reward, done)" in traj.error


def test_bad_definitions_are_typed_errors():
    with pytest.raises(errors.DefineError, match="answer"):
        nx.define("caps", tasks=[{"prompt": "Capital of Kenya?"}])
    with pytest.raises(errors.DefineError, match="no tasks"):
        nx.define({"name": "empty", "tasks": []})
    with pytest.raises(errors.DefineError, match="bogus"):
        nx.define({"name": "x", "tasks": ROWS, "bogus": 1})
    with pytest.raises(errors.InvalidArgumentError, match="tasks_json"):
        nx.define("rows", tasks=["not an object"], score=lambda t, r: 1.0)
    with pytest.raises(TypeError, match="needs tasks"):
        nx.define("nothing")
    with pytest.raises(TypeError, match="all three"):
        nx.define("half", reset=lambda seed: {})
    with pytest.raises(TypeError, match="not both"):
        nx.define("both", tasks=ROWS, score=lambda t, r: 1.0, judge=nx.ExactMatch())
