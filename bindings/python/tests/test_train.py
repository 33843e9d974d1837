"""train(): the library's gated loop over its built-in policy, Python Trainers and Python learners."""

import importlib.util
import math
from pathlib import Path

import nenyax_native as nx
import numpy as np
import pytest
from nenyax_native.errors import ConfigError
from nenyax_native.training import CustomLearner, Learner, TraceBatch, Trainer, load_config, train, train_config

REPO = Path(__file__).resolve().parents[3]
GUESS8 = "builtin:guess?high=8&max_guesses=3&size=400"
GUESS16 = "builtin:guess?high=16&max_guesses=4&size=64"
SMALL = dict(rounds=2, group_size=2, batch=3, eval_tasks=4)


def test_a_named_learner_on_the_built_in_policy_learns_guess():
    # The built-in linear softmax with grpo's defaults (8 epochs x 4 minibatches of Adam, lr 0.01).
    options = dict(rounds=20, batch=16, seed=1, eval_tasks=32, eval_repeats=4)
    report = train(nx.load(GUESS8), "grpo", **options)
    assert report.text.startswith(f"train {GUESS8}  learner grpo  20 rounds x 16 groups x 8")
    assert str(report) == report.text and len(report.rounds) == 21
    assert report.final_eval >= report.baseline + 0.15, report.text
    kept = [r for r in report.rounds if r["outcome"] == "kept"]
    assert kept and all(r["update"]["sequences"] > 0 for r in kept)
    # The seed fixes every draw, whatever the thread count: the same run on one thread agrees.
    again = train(nx.load(GUESS8), "grpo", concurrency=1, **options)
    assert [r["eval_score"] for r in again.rounds] == [r["eval_score"] for r in report.rounds]


class UniformGuesser(Trainer):
    """Guesses uniformly within the bounds and reports its exact log-probs; checks what it is handed."""

    def __init__(self, fail_apply_at=0, bad_shape=False):
        self.logprob_calls = self.applies = self.snapshots = self.restores = 0
        self.fail_apply_at, self.bad_shape = fail_apply_at, bad_shape
        self.checked = []

    def act(self, episode, observation):
        lo, hi = observation["data"]["low"], observation["data"]["high"]
        guess = lo + int(np.random.default_rng(episode.sample_seed).integers(hi - lo + 1))
        return guess, {"prompt_token_ids": [100 + lo, 200 + hi], "completion_token_ids": [guess - 1], "completion_logprobs": [-math.log(hi - lo + 1)]}

    def logprobs(self, batch, reference):
        self.logprob_calls += 1
        assert isinstance(batch, TraceBatch) and batch.tokens.shape == (batch.rows, batch.width) == batch.mask.shape
        assert len(batch.row_info) == batch.rows and batch.lengths.shape == (batch.rows,)
        # Views of the library's memory, not copies: they own no data and cannot be written.
        assert not batch.tokens.flags.owndata and not batch.tokens.flags.writeable
        r, t = np.nonzero(batch.mask)
        c = batch.context_start[r, t]
        out = np.full((batch.rows, batch.width), np.nan)
        out[r, t] = -np.log(batch.tokens[r, c + 1] - 200 - (batch.tokens[r, c] - 100) + 1.0)
        np.testing.assert_allclose(out[r, t], batch.sampled_logp[r, t], rtol=0, atol=1e-12)
        self.checked.append(len(r))
        return out[:, :-1] if self.bad_shape else out

    def apply(self, batch, grad_logp):
        self.applies += 1
        assert not grad_logp.flags.writeable and np.all(grad_logp[batch.mask == 0] == 0)
        if self.applies == self.fail_apply_at:
            raise ValueError("simulated optimiser failure")

    def snapshot(self):
        self.snapshots += 1

    def restore(self):
        self.restores += 1


def train_uniform(trainer, **options):
    policy = nx.Policy.from_callable(trainer.act, per_episode=True)
    return train(GUESS16, "grpo", trainer=trainer, policy=policy, **{**SMALL, **options})


def test_a_python_trainer_gets_views_of_the_trace_batch_and_is_gated():
    u = UniformGuesser()
    report = train_uniform(u)
    assert report.failed_rounds() == [] and u.applies > 0 and sum(u.checked) > 0
    assert u.snapshots > 0 and report["gated"]
    assert [r["outcome"] for r in report.rounds][0] == "baseline"


def test_a_trainer_that_raises_fails_its_round_not_the_process():
    u = UniformGuesser(fail_apply_at=1)
    report = train_uniform(u, rounds=3)
    failed = report.failed_rounds()
    assert [r["round"] for r in failed] == [1]
    assert failed[0]["error"].startswith("TrainingError:") and "ValueError: simulated optimiser failure" in failed[0]["error"]
    # The learner was restored to its snapshot and the next rounds ran.
    assert u.restores >= 1 and all(r["outcome"] in ("kept", "reverted") for r in report.rounds[2:])
    assert "failed" in report.text


def test_a_logprobs_result_of_the_wrong_shape_fails_the_round_with_a_message():
    report = train_uniform(UniformGuesser(bad_shape=True), rounds=1)
    (failed,) = report.failed_rounds()
    assert "logprobs returned shape" in failed["error"] and "expected (rows, width)" in failed["error"]


def load_example():
    path = REPO / "bindings" / "python" / "examples" / "torch_guess_trainer.py"
    spec = importlib.util.spec_from_file_location("torch_guess_trainer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_pytorch_model_learns_guess_and_its_control_run_does_not():
    pytest.importorskip("torch")
    example = load_example()
    model, report = example.run()
    # grpo's 2 epochs x 2 minibatches: four Adam steps per kept or reverted round.
    assert model.applies == 4 * 12 and report.failed_rounds() == []
    # The trainer's log-probs of the sampled guesses equal what the sampling callback recorded.
    assert model.first_gap is not None and model.first_gap < 1e-12
    assert report.final_eval >= report.baseline + 0.2, report.text
    control, control_report = example.run(ascend=True)
    assert control_report.final_eval <= control_report.baseline - 0.05, control_report.text


class FirstGuessTable(CustomLearner):
    """A whole learner in Python: the mean score of each guess in each state, played greedily."""

    name = "first-guess-table"

    def __init__(self, fail=False):
        self.total, self.count, self.saved = {}, {}, None
        self.fail, self.updates, self.group_sizes = fail, 0, []

    def act(self, episode, observation):
        lo, hi = observation["data"]["low"], observation["data"]["high"]
        means = [self.total.get((lo, hi, g), 0.0) / max(self.count.get((lo, hi, g), 0), 1) for g in range(lo, hi + 1)]
        rng = np.random.default_rng(episode.sample_seed)
        if episode.phase == "train" and rng.random() < 0.5:
            return int(rng.integers(lo, hi + 1))  # explore half of the time while training
        return lo + int(np.argmax(means))

    def update(self, groups):
        self.updates += 1
        if self.fail:
            raise RuntimeError("no update today")
        self.group_sizes.append([len(g.trajectories) for g in groups])
        for g in groups:
            for traj in g.trajectories:
                obs = traj.initial_observation
                for step in traj.steps:
                    key = (obs["data"]["low"], obs["data"]["high"], step["action"])
                    self.total[key] = self.total.get(key, 0.0) + (traj.score or 0.0)
                    self.count[key] = self.count.get(key, 0) + 1
                    obs = step["observation"]
        return {"states": len({k[:2] for k in self.count}), "groups": len(groups)}

    def snapshot(self):
        self.saved = (dict(self.total), dict(self.count))

    def restore(self):
        self.total, self.count = (dict(x) for x in self.saved)


def test_a_custom_learner_gets_judged_groups_and_reports_metrics():
    learner = FirstGuessTable()
    policy = nx.Policy.from_callable(learner.act, per_episode=True)
    report = train(GUESS16, learner, policy=policy, rounds=6, group_size=4, batch=8, eval_tasks=16, seed=2)
    assert report.failed_rounds() == [] and learner.updates == 6
    assert learner.group_sizes == [[4] * 8] * 6
    metrics = report.rounds[1]["update"]["metrics"]
    assert metrics["groups"] == 8 and metrics["states"] > 0
    assert report["learner"] == {"host": True, "name": "first-guess-table", "snapshots": True}
    assert report.final_eval > report.baseline, report.text


def test_a_custom_learner_that_raises_fails_its_rounds_with_its_message():
    learner = FirstGuessTable(fail=True)
    report = train(GUESS16, Learner.custom(learner, nx.Policy.from_callable(learner.act, per_episode=True)), **SMALL)
    assert len(report.failed_rounds()) == 2
    assert all(r["error"].startswith("TrainingError:") and "RuntimeError: no update today" in r["error"] for r in report.failed_rounds())


def test_run_configs_load_and_train():
    path = REPO / "examples" / "configs" / "cpp-trainer.toml"
    cfg = load_config(path, {"train.rounds": 2})
    assert cfg["env"]["uri"] == GUESS16.replace("size=64", "size=400") and cfg["learner"]["use"] == "grpo" and cfg["train"]["rounds"] == 2
    with pytest.raises(ConfigError, match="roundz"):
        load_config(path, {"train.roundz": 2})
    u = UniformGuesser()
    overrides = {"train.rounds": 1, "train.batch": 2, "train.eval_tasks": 4, "train.eval_repeats": 1, "train.progress": False}
    report = train_config(path, overrides, trainer=u, policy=nx.Policy.from_callable(u.act, per_episode=True))
    assert report["options"]["rounds"] == 1 and len(report.rounds) == 2 and u.applies == 2 * 2


def test_bad_setup_is_an_exception():
    env = nx.load(GUESS16)
    with pytest.raises(ConfigError, match="grpoo"):
        train(env, "grpoo")
    with pytest.raises(ConfigError, match="group_size"):
        train(env, "grpo", group_size=1, rounds=1)
    with pytest.raises(TypeError, match="unknown option.*roundz"):
        train(env, "grpo", roundz=1)
    with pytest.raises(TypeError, match="pass policy="):
        train(env, FirstGuessTable())
    with pytest.raises(TypeError, match="trainer= goes with a named learner"):
        train(env, FirstGuessTable(), trainer=UniformGuesser())
