"""Trajectories go to and from the Python reference implementation (``nenyax``) unchanged."""

import copy

import nenyax_native as nx
import pytest

nenyax = pytest.importorskip("nenyax", reason="the Python reference implementation (pip install nenyax==0.1.0a1)")


def test_a_binding_trajectory_validates_in_the_reference_and_round_trips():
    env = nx.load("builtin:guess")

    def bisect(episode, obs):
        return (obs["data"]["low"] + obs["data"]["high"]) // 2, {"completion_token_ids": [episode.step], "completion_logprobs": [-0.5]}

    made = []
    for traj in (
        env.rollout(nx.Policy.from_callable(bisect, per_episode=True), seed=3),
        nx.load("builtin:arithmetic?size=3").rollout(nx.FunctionModel(lambda m: "<answer>1</answer>")),
        env.rollout(lambda obs: 1 / 0),  # a failed episode keeps its error across too
    ):
        made.append(traj)
        ref = traj.to_reference()
        assert isinstance(ref, nenyax.Trajectory)
        assert ref.env_id == traj.env_id and ref.score == traj.score and ref.error == traj.error
        assert len(ref.steps) == len(traj.steps) and len(ref.model_calls) == len(traj.model_calls)
        back = nx.Trajectory.from_reference(ref)
        # The reference's ModelCall has no `started_at` (when the call was sent); all else comes back.
        # A copy: to_dict shares the trajectory's own lists, and popping from them would change it.
        mine = copy.deepcopy(traj.to_dict())
        for call in mine["model_calls"]:
            call.pop("started_at", None)
        assert back.to_dict() == mine
    assert any("started_at" in c for t in made for c in t.to_dict()["model_calls"])
    assert ref.error.startswith("PolicyError") and "ZeroDivisionError" in ref.error


def test_a_reference_trajectory_loads_into_the_binding():
    env = nenyax.define(
        "capitals",
        tasks=[{"prompt": "Capital of Kenya? Use <answer></answer>.", "answer": "Nairobi"}],
        score=lambda task, reply: float(task["answer"] in reply),
    )
    made = list(nenyax.run(env, nenyax.chat_policy(nenyax.FunctionModel(lambda messages: "<answer>Nairobi</answer>")), n=1))
    assert made and made[0].score == 1.0
    traj = nx.Trajectory.from_reference(made[0])
    assert traj.score == 1.0 and traj.ok and traj.task_id == made[0].task.id
    assert traj.to_dict() == made[0].model_dump(mode="json")
    assert nx.Trajectory.from_reference(traj.to_reference()) == traj
    with pytest.raises(TypeError, match="nenyax.Trajectory"):
        nx.Trajectory.from_reference({"env_id": "x"})
