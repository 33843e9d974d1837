"""A PyTorch policy learns builtin:guess through Nenyax's grpo learner.

Nenyax rolls out, judges, traces what the policy sampled and computes the loss and its
dLoss/dlogp; the PyTorch model samples (a per-episode callback recording its prompt tokens,
its guess and the guess's log-prob), scores its samples again (``logprobs``) and takes an Adam
step on the gradient the learner hands back (``apply``). Nenyax never sees the weights.

    python bindings/python/examples/torch_guess_trainer.py [--ascend] [--seed N]

The game: a number from 1 to N (8 here) in a few guesses, told "higher" or "lower". The model's
logits for guess k in state (low, high) are ``A[low][k] + B[high][k]``, two embedding tables,
which can express bisection. ``--ascend`` flips the update's sign: a control run whose held-out
score falls, so the gradient, not the gate or luck, is what drives the learning.
"""

from __future__ import annotations

import argparse
import copy
from typing import Any, Dict, Tuple

import nenyax_native as nx
import numpy as np
import torch
from nenyax_native.training import TraceBatch, Trainer, TrainReport, train

URI = "builtin:guess?high=8&max_guesses=3&size=400"
LEARNER = {"use": "grpo", "epochs": 2, "minibatches": 2}
# 12 rounds of 16 groups x 8, judged on 32 held-out tasks x 4 (a mean with a standard error of
# about 0.04); an update is reverted only when held-out falls clearly (noise plus 0.03).
OPTIONS = dict(rounds=12, group_size=8, batch=16, eval_tasks=32, eval_repeats=4, seed=1, concurrency=2, gate_tolerance=0.03)


class GuessPolicy(torch.nn.Module):
    """Logits of the guesses 1..n in state (low, high): one table row for low plus one for high.

    Tokens: guess k+1 is token k (0..n-1), "low=L" is n+L-1 and "high=H" is 2n+H-1.
    """

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n
        self.table = torch.nn.Embedding(3 * n, n, dtype=torch.float64)
        torch.nn.init.zeros_(self.table.weight)  # a uniform policy to start from

    def forward(self, low_tokens: torch.Tensor, high_tokens: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.table(low_tokens) + self.table(high_tokens), dim=-1)


class TorchGuessTrainer(Trainer):
    """The model, its Adam optimiser, the sampling callback and the Trainer methods."""

    def __init__(self, n: int = 8, lr: float = 0.2, ascend: bool = False) -> None:
        self.n, self.ascend = n, ascend
        self.model = GuessPolicy(n)
        self.reference = copy.deepcopy(self.model).requires_grad_(False)  # frozen: the KL term's reference
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=lr)
        self.saved: Any = None
        self.applies = 0
        # How far the trainer's first log-probs are from what the sampler recorded (should be ~0).
        self.first_gap: float | None = None

    def act(self, episode: nx.Episode, observation: Dict[str, Any]) -> Tuple[int, Dict[str, Any]]:
        """Sample a guess with the episode's seed (the same draw on any thread) and record it."""
        low, high = observation["data"]["low"], observation["data"]["high"]
        if not 1 <= low <= high <= self.n:
            raise ValueError(f"bounds {low}..{high} are outside 1..{self.n}")
        prompt = [self.n + low - 1, 2 * self.n + high - 1]
        with torch.no_grad():
            logp = self.model(torch.tensor(prompt[0]), torch.tensor(prompt[1])).numpy()
        u = np.random.default_rng(episode.sample_seed).random()
        k = min(int(np.searchsorted(np.cumsum(np.exp(logp)), u, side="right")), self.n - 1)
        record = {"prompt_token_ids": prompt, "completion_token_ids": [k], "completion_logprobs": [float(logp[k])]}
        return k + 1, record

    def _positions(self, batch: TraceBatch) -> Tuple[np.ndarray, ...]:
        """The sampled positions and, for each, its two prompt tokens and the guess token."""
        r, t = np.nonzero(batch.mask)
        c = batch.context_start[r, t]
        if np.any(c + 2 != t):
            raise ValueError("a sampled position is not right after its two prompt tokens")
        return r, t, batch.tokens[r, c], batch.tokens[r, c + 1], batch.tokens[r, t]

    def _logp(self, model: torch.nn.Module, batch: TraceBatch) -> Tuple[np.ndarray, np.ndarray, torch.Tensor]:
        r, t, low, high, k = self._positions(batch)
        logp = model(torch.from_numpy(low), torch.from_numpy(high)).gather(-1, torch.from_numpy(k)[:, None])[:, 0]
        return r, t, logp

    def logprobs(self, batch: TraceBatch, reference: bool) -> np.ndarray:
        with torch.no_grad():
            r, t, logp = self._logp(self.reference if reference else self.model, batch)
        out = np.full((batch.rows, batch.width), np.nan)
        out[r, t] = logp.numpy()
        if self.first_gap is None and not reference:
            self.first_gap = float(np.max(np.abs(out[r, t] - batch.sampled_logp[r, t])))
        return out

    def apply(self, batch: TraceBatch, grad_logp: np.ndarray) -> None:
        # sum(grad * logp) has the gradient dLoss/dlogp . dlogp/dtheta: autograd does the rest.
        r, t, logp = self._logp(self.model, batch)
        surrogate = (torch.from_numpy(grad_logp[r, t]) * logp).sum()
        self.optimizer.zero_grad()
        (-surrogate if self.ascend else surrogate).backward()
        self.optimizer.step()
        self.applies += 1

    def snapshot(self) -> None:
        self.saved = copy.deepcopy((self.model.state_dict(), self.optimizer.state_dict()))

    def restore(self) -> None:
        model, optimizer = copy.deepcopy(self.saved)
        self.model.load_state_dict(model)
        self.optimizer.load_state_dict(optimizer)

    def first_guess(self) -> int:
        """The most likely opening guess (bisection: 4 or 5)."""
        with torch.no_grad():
            return int(self.model(torch.tensor(self.n), torch.tensor(3 * self.n - 1)).argmax()) + 1


def run(ascend: bool = False, seed: int = 1) -> Tuple[TorchGuessTrainer, TrainReport]:
    """Train a fresh model (the control run ascends the loss, ungated) and return it with the report."""
    model = TorchGuessTrainer(ascend=ascend)
    policy = nx.Policy.from_callable(model.act, per_episode=True)
    options = dict(OPTIONS, seed=seed, gate=not ascend)
    return model, train(nx.load(URI), LEARNER, trainer=model, policy=policy, **options)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ascend", action="store_true", help="the control run: climb the loss instead")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    model, report = run(args.ascend, args.seed)
    print(report)
    print(f"held-out {report.baseline:.3f} -> {report.final_eval:.3f}; first guess {model.first_guess()}; {model.applies} Adam steps")


if __name__ == "__main__":
    main()
