"""Sessions, conformance reports, judges, batches and errors against the real library."""

import json
import sys

import nenyax_native as nx
import pytest
from nenyax_native import errors

ARITH = "builtin:arithmetic?size=6"


def test_session_plays_guess_to_the_end():
    env = nx.load("builtin:guess")
    with env.session(seed=3) as session:
        obs = session.observation
        assert obs["data"]["guesses_left"] == 10 and not session.done
        while not session.done:
            step = session.act((obs["data"]["low"] + obs["data"]["high"]) // 2)
            obs = step["observation"]
        assert step["terminated"] and step["reward"] == 1.0
        assert session.judgment["score"] == 1.0
    with pytest.raises(ValueError, match="closed"):
        session.act(50)


def test_session_on_a_task_and_a_bad_action():
    env = nx.load(ARITH)
    task = env.tasks(2)[1]
    with env.session(task=task) as session:
        assert session.observation["info"]["task_id"] == "1"
        with pytest.raises(TypeError):
            session.act(object())
        session.act(f"<answer>{task['metadata']['answer']}</answer>")
        assert session.done and session.judgment["score"] == 1.0


def test_check_a_handle_and_a_uri():
    report = nx.load("builtin:guess").check(samples=2, threads=2)
    assert report.tier == "audited" and report.reached("trainable") and not report.failed()
    assert {c["name"] for c in report.checks} >= {"manifest", "rollout_completes", "reproducible", "verifier_discriminates"}
    assert report.to_dict()["env_id"] == "builtin:guess"
    # echo has no oracle: the audit is skipped and the skip blocks the tier.
    echo = nx.check("builtin:echo", samples=2, threads=1)
    assert echo.tier == "trainable" and not echo.reached("audited")
    assert any(c["name"] == "verifier_discriminates" and c["status"] == "skip" for c in echo.failed())
    assert "AUDITED" in str(report) and "verifier_discriminates" in str(echo)
    with pytest.raises(ValueError, match="unknown tier"):
        report.reached("gold")


def test_run_streams_in_job_order_with_progress():
    env = nx.load(ARITH)
    streamed, ticks = [], []
    trajs = nx.run(env, env.reference_policy(), n=15, concurrency=2, seed=5, on_trajectory=streamed.append, progress=lambda d, t: ticks.append((d, t)))
    assert [t.task_id for t in trajs] == [str(i % 6) for i in range(15)]
    assert streamed == trajs and ticks == [(i, 15) for i in range(1, 16)]
    assert all(t.score == 1.0 for t in trajs)
    # A URI works too, and tasks pick the jobs.
    picked = nx.run(ARITH, lambda obs: "no", n=2, tasks=env.tasks(3)[2:])
    assert [t.task_id for t in picked] == ["2", "2"] and all(t.score == 0.0 for t in picked)


def test_an_exception_in_on_trajectory_stops_the_batch_and_is_raised():
    env = nx.load(ARITH)
    seen = []

    def stop_at_third(traj):
        seen.append(traj)
        if len(seen) == 3:
            raise RuntimeError("enough")

    with pytest.raises(RuntimeError, match="enough"):
        nx.run(env, env.reference_policy(), n=200, concurrency=2, on_trajectory=stop_at_third)
    assert len(seen) == 3
    # The runner is fine afterwards.
    assert len(nx.run(env, env.reference_policy(), n=4, concurrency=2)) == 4


def test_judges_mirror_the_library_specs():
    env = nx.load(ARITH)
    task = env.tasks(1)[0]  # 46 + 12 = 58

    def score(judge, reply):
        return env.with_judge(judge).rollout(lambda obs: reply, task=task).score

    assert score(nx.ExactMatch(), "<answer>58</answer>") == 1.0
    assert score(nx.ExactMatch(), "58") == 0.0
    assert score(nx.ExactMatch(extract="whole"), "58") == 1.0
    assert score(nx.Contains(), "it is 58, I think") == 1.0
    assert score(nx.Numeric(extract="last_number"), "about 58.0000001") == 1.0
    assert score(nx.Numeric(extract="last_number", tolerance=0.5), "57.6") == 1.0
    assert score(nx.Numeric(extract="last_number"), "57") == 0.0
    assert score(nx.RegexJudge(r"^<answer>\d+</answer>$"), "<answer>1</answer>") == 1.0
    weighted = nx.judges.weighted({nx.EnvJudge(): 1.0, nx.RegexJudge("<answer>"): 1.0})
    assert score(weighted, "<answer>1</answer>") == pytest.approx(0.5)
    assert score({"type": "contains"}, "58!") == 1.0  # a plain spec dict works too
    assert nx.Weighted([(nx.ExactMatch(), 2)]).to_spec() == {"type": "weighted", "parts": [{"weight": 2, "judge": {"type": "exact", "field": "answer"}}]}
    assert nx.with_judge(ARITH, nx.Contains()).id.endswith("+judge")


def test_llm_rubric_asks_a_real_grader_over_http():
    graded = []

    def grader(messages):
        graded.append(messages)
        text = json.dumps(messages)
        return json.dumps({"score": 1.0 if "Nairobi" in text else 0.0, "reason": "checked the capital"})

    env = nx.define("caps", tasks=[{"prompt": "Capital of Kenya?", "answer": "Nairobi"}])
    with nx.Recording(nx.FunctionModel(grader, thread_safe=True)) as server:
        judged = env.with_judge(nx.LlmRubric(nx.Endpoint(base_url=server.base_url, model="grader"), "Is the capital right?"))
        assert judged.rollout(lambda obs: "It is Nairobi.").score == 1.0
        assert judged.rollout(lambda obs: "It is Mombasa.").score == 0.0
    assert len(graded) == 2 and "Is the capital right?" in json.dumps(graded[0])


def test_bad_judges_are_typed_errors():
    env = nx.load(ARITH)
    with pytest.raises(errors.ConfigError, match="unknown judge type `nope`"):
        env.with_judge({"type": "nope"})
    with pytest.raises(errors.ConfigError, match="pattern"):
        env.with_judge({"type": "regex"})
    with pytest.raises(errors.ConfigError, match="invalid|regex|pattern"):
        env.with_judge(nx.RegexJudge("(unclosed"))
    # No Python-function judge over the C ABI: a clear error that says what to use instead.
    with pytest.raises(TypeError, match=r"define\(\.\.\., score=fn\)"):
        env.with_judge(lambda traj: 1.0)


@pytest.mark.parametrize(
    "uri, cls, needle",
    [
        ("not a uri", errors.InvalidUriError, "no scheme"),
        ("nosuch:thing", errors.UnknownSchemeError, "nosuch"),
        ("builtin:nosuch", errors.UnknownTargetError, "available: arithmetic"),
        ("builtin:arithmetic?bogus=1", errors.UnknownParameterError, "bogus"),
        ("builtin:arithmetic?size=zero", errors.InvalidParameterError, "size"),
    ],
)
def test_load_errors_carry_status_and_message(uri, cls, needle):
    with pytest.raises(cls) as info:
        nx.load(uri)
    assert isinstance(info.value, nx.NenyaxError) and info.value.status == cls.status
    assert needle in info.value.message and info.value.status_name in repr(info.value)


def test_other_errors():
    with pytest.raises(errors.UnsupportedError, match="reference policy"):
        nx.load("builtin:echo").reference_policy()
    with pytest.raises(TypeError, match="URI string"):
        nx.load(42)
    with pytest.raises(errors.InvalidArgumentError, match="expected i64"):
        nx.load(ARITH).session(seed="x")


def test_policy_mismatch_fails_the_episode_with_its_name(monkeypatch):
    # A real non-text environment: Gymnasium's CartPole through the library's Python bridge.
    pytest.importorskip("gymnasium")
    monkeypatch.setenv("NENYAX_PYTHON", sys.executable)
    env = nx.load("gymnasium:CartPole-v1")
    assert env.manifest["capabilities"]["text"] is False
    traj = env.rollout(nx.FunctionModel(lambda messages: "left"))
    assert traj.error.startswith("PolicyMismatch") and "pass an action policy" in traj.error
    assert env.rollout(lambda obs: 0, seed=1).error is None
