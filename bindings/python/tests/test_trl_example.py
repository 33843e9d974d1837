"""examples/python/trl_grpo.py: TRL's GRPOTrainer takes real steps on rewards judged by Nenyax.

Skipped when trl is not installed, unless NENYAX_REQUIRE_TRL=1 (CI), where it fails instead.
"""

import importlib.util
import math
import os
import re
from pathlib import Path

import pytest

if os.environ.get("NENYAX_REQUIRE_TRL") != "1":
    pytest.importorskip("trl", reason="trl is not installed (pip install -r bindings/python/requirements-test.txt)")

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "python" / "trl_grpo.py"


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("trl_grpo", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def train_logs(trainer):
    trainer.train()
    logs = [log for log in trainer.state.log_history if "loss" in log]
    assert trainer.state.global_step == trainer.args.max_steps == len(logs)
    for log in logs:
        assert math.isfinite(log["loss"]) and math.isfinite(log["grad_norm"])
    return logs


def test_reward_is_the_environments_judgment(example):
    import nenyax_native as nx

    env = nx.load("builtin:arithmetic?size=4")
    tasks = env.tasks()
    reward = example.NenyaxReward(env)
    right = [f"Let me see. <answer>{t['metadata']['answer']}</answer>" for t in tasks]
    wrong = [[{"role": "assistant", "content": f"<answer>{int(t['metadata']['answer']) + 1}</answer>"}] for t in tasks]
    refs = [example.json.dumps(t) for t in tasks]
    assert reward(prompts=[None] * 4, completions=right, nenyax_task=refs) == [1.0] * 4
    assert reward(prompts=[None] * 4, completions=wrong, nenyax_task=refs) == [0.0] * 4
    assert {t.judgment["judge"] for t in reward.trajectories} == {"builtin:arithmetic"}
    assert [t.task_id for t in reward.trajectories] == [t["id"] for t in tasks]


def test_dataset_prompts_are_what_the_environment_asks(example):
    import nenyax_native as nx

    env = nx.load("builtin:guess?size=3")
    data = example.task_dataset(env, task_in_prompt=True)
    assert len(data) == 3
    row = data[1]
    assert example.json.loads(row["nenyax_task"])["id"] == "1"
    assert row["prompt"][0]["role"] == "user" and "thinking of a whole number" in row["prompt"][0]["content"]
    assert row["prompt"][0]["nenyax_task"] == row["nenyax_task"]


def test_grpo_steps_on_single_turn_rewards_from_the_environment(example, tmp_path):
    uri = "builtin:arithmetic?size=16"
    trainer = example.make_trainer(uri, max_steps=2, num_generations=4, batch_size=4, output_dir=str(tmp_path))
    logs = train_logs(trainer)
    trajs = trainer.nenyax_source.trajectories
    assert len(trajs) == 4 and all(t.ok and t.env_id == uri for t in trajs), [t.error for t in trajs]
    # The logged reward is the mean of the judged scores of the last batch of completions.
    assert logs[-1]["rewards/nenyax/mean"] == pytest.approx(sum(t.score for t in trajs) / len(trajs))
    assert {t.judgment["judge"] for t in trajs} == {"builtin:arithmetic"}


def test_grpo_learns_from_a_varying_nenyax_judgment(example, tmp_path):
    # A judge the random model meets about half the time ("a digit anywhere in the reply"), so
    # the groups' rewards differ and the step must move the weights.
    trainer = example.make_trainer(
        "builtin:arithmetic?size=16",
        judge={"type": "regex", "pattern": "[0-9]"},
        max_steps=2,
        num_generations=8,
        batch_size=8,
        max_completion_length=24,
        output_dir=str(tmp_path),
    )
    before = [p.detach().clone() for p in trainer.model.parameters()]
    logs = train_logs(trainer)
    trajs = trainer.nenyax_source.trajectories
    assert {t.judgment["judge"] for t in trajs} == {"regex:[0-9]"}
    assert any(log["reward_std"] > 0 for log in logs), logs
    assert any(log["grad_norm"] > 0 for log in logs), logs
    assert any(not torch_equal(a, b) for a, b in zip(before, trainer.model.parameters(), strict=True))


def torch_equal(a, b):
    return bool((a == b.detach()).all())


def test_grpo_step_on_multi_turn_episodes_played_by_nenyax(example, tmp_path):
    trainer = example.make_trainer(
        "builtin:guess?size=4&max_guesses=5",
        mode="rollout",
        max_steps=1,
        num_generations=2,
        batch_size=2,
        max_completion_length=8,
        max_turns=2,
        output_dir=str(tmp_path),
    )
    logs = train_logs(trainer)
    rollout = trainer.nenyax_source
    trajs, batch = rollout.trajectories, rollout.batch
    assert len(trajs) == 2 and all(t.ok for t in trajs), [t.error for t in trajs]
    for traj, ids, mask, logps in zip(trajs, batch["completion_ids"], batch["env_mask"], batch["logprobs"], strict=True):
        turns = [m for m in traj.messages if m["role"] == "assistant"]
        # A random model does not guess the secret, so every episode plays both turns, and the
        # environment's feedback between them is in the sequence but masked out of the loss.
        if traj.score == 0.0:
            assert len(turns) == 2
            assert re.search("1+0+1", "".join(map(str, mask)))
        assert len(ids) == len(mask) == len(logps) and sum(mask) > 0
        assert all(lp <= 0.0 for lp in logps)
    # The two members of the group played the same task, as GRPO needs.
    assert trajs[0].task_id == trajs[1].task_id
    assert logs[-1]["rewards/episode_reward/mean"] == pytest.approx(sum(t.score for t in trajs) / 2)
