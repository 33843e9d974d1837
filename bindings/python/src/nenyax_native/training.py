"""``train``: the library's gated training loop, over its built-in policy, a Python model or a Python learner.

Three kinds of learner (docs/c-api.md, "Training"):

- a named weight learner (``"grpo"``, ``"reinforce"``, ``{"use": "dapo", "epochs": 2}``, ...) on the
  built-in softmax policy: ``train(env, "reinforce")``;
- the same learners over a :class:`Trainer`, a Python model that owns its weights: the library
  rolls out with ``policy`` (a per-episode policy recording what it sampled), asks the trainer
  for log-probabilities, computes the loss and hands ``dLoss/dlogp`` to :meth:`Trainer.apply`;
- a :class:`CustomLearner`, a whole learner in Python, fed each round's judged groups.

Trainer and learner methods run on the thread that called :func:`train`, never concurrently.
One that raises fails its round (the report's round has ``outcome == "failed"`` and an error
starting ``TrainingError:``) and training goes on; it never crashes the process.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, NamedTuple, Optional, Union

import numpy as np

from ._native import call_json, check, ffi, json_arg, lib, reply_set, utf8
from .env import Env, load
from .policy import PolicyLike, as_policy, free_user_data, guarded, new_user_data, text_arg
from .trajectory import Trajectory


def _view(ptr: Any, count: int, dtype: Any, shape: tuple) -> np.ndarray:
    """A read-only numpy array over library memory (no copy; valid only during the callback)."""
    if count == 0 or ptr == ffi.NULL:
        return np.zeros(shape, dtype=dtype)
    arr = np.frombuffer(ffi.buffer(ptr, count * np.dtype(dtype).itemsize), dtype=dtype).reshape(shape)
    arr.flags.writeable = False
    return arr


class TraceBatch:
    """The sequences a trainer scores and learns from (nenyax_trace_batch_t), rows x width, row-major.

    The arrays are numpy views of the library's memory, valid only during the callback that
    received the batch: use :meth:`copy` to keep one.
    """

    def __init__(self, rows: int, width: int, arrays: Dict[str, np.ndarray], row_info: List[Dict[str, Any]]) -> None:
        self.rows, self.width = rows, width
        self.tokens: np.ndarray = arrays["tokens"]  # token ids, 0 in padding
        self.mask: np.ndarray = arrays["mask"]  # uint8: 1 where the policy sampled the token
        self.sampled_logp: np.ndarray = arrays["sampled_logp"]  # the sampler's log-prob, NaN where unknown
        self.context_start: np.ndarray = arrays["context_start"]  # where each position's context begins
        self.lengths: np.ndarray = arrays["lengths"]  # each row's length before padding
        self.row_info = row_info  # [{"trajectory", "group", "member", "reward", "segments": [...]}]

    @classmethod
    def from_c(cls, b: Any) -> "TraceBatch":
        """Views over a nenyax_trace_batch_t that the library passed to a callback."""
        rows, width = int(b.rows), int(b.width)
        n, shape = rows * width, (rows, width)
        arrays = {
            "tokens": _view(b.tokens, n, np.int64, shape),
            "mask": _view(b.mask, n, np.uint8, shape),
            "sampled_logp": _view(b.sampled_logp, n, np.float64, shape),
            "context_start": _view(b.context_start, n, np.int64, shape),
            "lengths": _view(b.lengths, rows, np.int64, (rows,)),
        }
        return cls(rows, width, arrays, json.loads(text_arg(b.rows_json, b.rows_json_len)))

    def copy(self) -> "TraceBatch":
        """A copy that outlives the callback."""
        names = ("tokens", "mask", "sampled_logp", "context_start", "lengths")
        return TraceBatch(self.rows, self.width, {k: getattr(self, k).copy() for k in names}, json.loads(json.dumps(self.row_info)))

    def __repr__(self) -> str:
        return f"TraceBatch(rows={self.rows}, width={self.width}, tokens={int(self.mask.sum())})"


def _overrides(obj: Any, base: type, name: str) -> bool:
    return getattr(type(obj), name) is not getattr(base, name)


class Trainer:
    """A Python model trained by a named weight learner: subclass it and implement logprobs and apply.

    Implement ``snapshot`` and ``restore`` too so that the gate can revert an update that
    lowered the held-out score (without them every update is kept, reported as ``ungated``).
    """

    def logprobs(self, batch: TraceBatch, reference: bool) -> Any:
        """log p(token | tokens[context_start:t]) at every masked position (rows x width array; others are not read).

        With ``reference``, under the frozen reference weights (KL terms, DPO); raise if there are none.
        """
        raise NotImplementedError("a Trainer must implement logprobs(batch, reference)")

    def apply(self, batch: TraceBatch, grad_logp: np.ndarray) -> None:
        """Backpropagate ``grad_logp`` (dLoss/dlogp, rows x width, 0 off the mask) and take one optimiser step."""
        raise NotImplementedError("a Trainer must implement apply(batch, grad_logp)")

    def snapshot(self) -> None:
        """Save the weights and optimiser state in one slot (optional)."""
        raise NotImplementedError

    def restore(self) -> None:
        """Go back to the last snapshot (optional, with snapshot)."""
        raise NotImplementedError


class Group(NamedTuple):
    """One round's rollouts of one task and seed, as a CustomLearner receives them."""

    index: int
    task: Optional[Dict[str, Any]]
    seed: Optional[int]
    trajectories: List[Trajectory]


class CustomLearner:
    """A whole learner in Python: it rolls out with its policy and learns from each round's judged groups."""

    name: str = ""

    def policy(self) -> Optional[PolicyLike]:
        """The policy it rolls out with, when train() is given none (the reference's ``policy()``)."""
        return None

    def update(self, groups: List[Group]) -> Optional[Dict[str, float]]:
        """Learn from one round's groups; return named figures for the report (or None)."""
        raise NotImplementedError("a CustomLearner must implement update(groups)")

    def snapshot(self) -> None:
        """Save the learner's state in one slot (optional)."""
        raise NotImplementedError

    def restore(self) -> None:
        """Go back to the last snapshot (optional, with snapshot)."""
        raise NotImplementedError


def _host_array(values: Any) -> np.ndarray:
    """A trainer's result as float64 numpy (a torch tensor is detached and brought to the CPU)."""
    if hasattr(values, "detach"):
        values = values.detach().to("cpu").double().numpy()
    return np.asarray(values, dtype=np.float64)


@ffi.callback("int32_t(void *, const nenyax_trace_batch_t *, bool, double *, nenyax_reply_t *)", error=1)
def _trainer_logprobs(user_data: Any, b: Any, reference: bool, out: Any, error: Any) -> int:
    def body() -> None:
        trainer: Trainer = ffi.from_handle(user_data)
        batch = TraceBatch.from_c(b)
        result = _host_array(trainer.logprobs(batch, bool(reference)))
        if result.shape != (batch.rows, batch.width):
            raise ValueError(f"logprobs returned shape {result.shape}; expected (rows, width) = {(batch.rows, batch.width)}")
        target = np.frombuffer(ffi.buffer(out, result.size * 8), dtype=np.float64).reshape(result.shape)
        np.copyto(target, result)

    return guarded(body, error)


@ffi.callback("int32_t(void *, const nenyax_trace_batch_t *, const double *, nenyax_reply_t *)", error=1)
def _trainer_apply(user_data: Any, b: Any, grad: Any, error: Any) -> int:
    def body() -> None:
        batch = TraceBatch.from_c(b)
        ffi.from_handle(user_data).apply(batch, _view(grad, batch.rows * batch.width, np.float64, (batch.rows, batch.width)))

    return guarded(body, error)


@ffi.callback("int32_t(void *, nenyax_reply_t *)", error=1)
def _snapshot(user_data: Any, error: Any) -> int:
    return guarded(lambda: ffi.from_handle(user_data).snapshot(), error)


@ffi.callback("int32_t(void *, nenyax_reply_t *)", error=1)
def _restore(user_data: Any, error: Any) -> int:
    return guarded(lambda: ffi.from_handle(user_data).restore(), error)


@ffi.callback("int32_t(void *, const char *, size_t, nenyax_reply_t *)", error=1)
def _learner_update(user_data: Any, groups_json: Any, size: int, report: Any) -> int:
    def body() -> None:
        learner: CustomLearner = ffi.from_handle(user_data)
        groups = [
            Group(g["index"], g.get("task"), g.get("seed"), [Trajectory(t) for t in g["trajectories"]])
            for g in json.loads(text_arg(groups_json, size))
        ]
        metrics = learner.update(groups)
        if metrics is not None:
            reply_set(report, json.dumps({"metrics": {k: float(v) for k, v in metrics.items()}}))

    return guarded(body, report)


class Learner:
    """What train improves: a named learner (on the built-in policy or a Trainer) or a CustomLearner."""

    def __init__(self, handle: Any, keepalive: Any = None) -> None:
        self._handle = ffi.gc(handle, lib.nenyax_learner_free)
        # The policy the learner rolls out with, and the Python objects its callbacks reach.
        self._keepalive = keepalive

    @property
    def handle(self) -> Any:
        """The nenyax_learner_t pointer."""
        return self._handle

    @classmethod
    def named(
        cls,
        config: Union[str, Dict[str, Any]],
        env: Optional[Env] = None,
        *,
        trainer: Optional[Trainer] = None,
        policy: Optional[PolicyLike] = None,
    ) -> "Learner":
        """A named learner (``"grpo"`` or ``{"use": "grpo", ...knobs}``): over ``trainer`` sampling with ``policy``, else the built-in policy sized from ``env``."""
        data = utf8(config) if isinstance(config, str) else json.dumps(config).encode("utf-8")
        pol = None if policy is None else as_policy(policy)
        vtable, user_data = ffi.NULL, ffi.NULL
        if trainer is not None:
            if not isinstance(trainer, Trainer):
                raise TypeError(f"trainer must be a nenyax_native.Trainer, not {type(trainer).__name__}")
            vtable = ffi.new("nenyax_trainer_vtable_t *")
            vtable.version = lib.NENYAX_TRAINER_VTABLE_VERSION
            vtable.logprobs, vtable.apply = _trainer_logprobs, _trainer_apply
            if _overrides(trainer, Trainer, "snapshot"):
                vtable.snapshot, vtable.restore = _snapshot, _restore
            # The library owns it from here on (free_user_data), also when the call fails.
            user_data = new_user_data(trainer)
        out = ffi.new("nenyax_learner_t **")
        check(
            lib.nenyax_learner_new(
                data,
                len(data),
                ffi.NULL if env is None else env.handle,
                ffi.NULL if pol is None else pol.handle,
                vtable,
                user_data,
                free_user_data,
                out,
            )
        )
        return cls(out[0], keepalive=(pol, trainer))

    @classmethod
    def custom(cls, learner: CustomLearner, policy: PolicyLike, name: Optional[str] = None) -> "Learner":
        """A CustomLearner rolling out with ``policy``, named ``name`` (default: its ``name`` or class name) in reports."""
        if not isinstance(learner, CustomLearner):
            raise TypeError(f"learner must be a nenyax_native.CustomLearner, not {type(learner).__name__}")
        pol = as_policy(policy)
        vtable = ffi.new("nenyax_learner_vtable_t *")
        vtable.version = lib.NENYAX_LEARNER_VTABLE_VERSION
        vtable.update = _learner_update
        if _overrides(learner, CustomLearner, "snapshot"):
            vtable.snapshot, vtable.restore = _snapshot, _restore
        data = utf8(name or learner.name or type(learner).__name__)
        out = ffi.new("nenyax_learner_t **")
        check(lib.nenyax_learner_custom(data, len(data), vtable, new_user_data(learner), free_user_data, pol.handle, out))
        return cls(out[0], keepalive=(pol, learner))


class TrainReport(dict):
    """The train report (docs/c-api.md, "Train report"): a dict, printed as its text."""

    @property
    def text(self) -> str:
        """The report for people."""
        return self.get("text", "")

    @property
    def baseline(self) -> float:
        """Held-out score before training."""
        return self["baseline"]

    @property
    def final_eval(self) -> float:
        """Held-out score of the policy training ended with."""
        return self["final_eval"]

    @property
    def rounds(self) -> List[Dict[str, Any]]:
        """One dict per round (round 0 is the baseline evaluation)."""
        return self["rounds"]

    def failed_rounds(self) -> List[Dict[str, Any]]:
        """The rounds that failed, each with its ``error``."""
        return [r for r in self.rounds if r.get("outcome") == "failed"]

    def render(self) -> str:
        """The report for people (as the Python reference's ``render()``)."""
        return self.text

    def __str__(self) -> str:
        return self.text


_OPTIONS = (
    "rounds",
    "group_size",
    "batch",
    "eval_tasks",
    "eval_repeats",
    "tasks",
    "seed",
    "concurrency",
    "max_steps",
    "gate",
    "gate_tolerance",
    "gate_sigma",
    "trajectories",
    "progress",
)


def train(
    env: Union[Env, str],
    learner: Union[str, Dict[str, Any], Learner, CustomLearner],
    *,
    trainer: Optional[Trainer] = None,
    policy: Optional[PolicyLike] = None,
    options: Optional[Dict[str, Any]] = None,
    **kwargs: Any,
) -> TrainReport:
    """Improve ``learner`` on ``env`` (a URI or an Env) with the gated loop and return the report.

    ``learner``: a name or config (over ``trainer`` sampling with ``policy``, or the built-in
    policy), a :class:`Learner`, or a :class:`CustomLearner` (rolling out with ``policy``).
    Options as keywords or in ``options``: rounds, group_size, batch, eval_tasks, eval_repeats,
    tasks, seed, concurrency, max_steps, gate, gate_tolerance, gate_sigma, trajectories, progress.
    A failed round is in the report, not an exception; bad options are ConfigError.
    """
    env = load(env) if isinstance(env, str) else env
    unknown = sorted(set(kwargs) - set(_OPTIONS))
    if unknown:
        raise TypeError(f"train() got unknown option(s) {', '.join(unknown)}; known: {', '.join(_OPTIONS)}")
    opts = dict(options or {})
    opts.update({k: v for k, v in kwargs.items() if v is not None})
    if trainer is not None and isinstance(learner, (Learner, CustomLearner)):
        raise TypeError("trainer= goes with a named learner (e.g. train(env, 'grpo', trainer=..., policy=...)), not a Learner or CustomLearner")
    if isinstance(learner, CustomLearner):
        policy = policy if policy is not None else learner.policy()
        if policy is None:
            raise TypeError("a CustomLearner rolls out with a policy: pass policy= or implement its policy()")
        learner = Learner.custom(learner, policy)
    elif not isinstance(learner, Learner):
        learner = Learner.named(learner, env, trainer=trainer, policy=policy)
    ptr, size = json_arg(opts or None)
    return TrainReport(call_json(lib.nenyax_train, env.handle, learner.handle, ptr, size))


def load_config(path: str, overrides: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """A run config file (TOML, as ``nenyax train --config`` reads it) checked and normalised: {"env", "model", "learner", "train", "output"}.

    ``overrides`` sets keys by dotted path first, e.g. ``{"train.rounds": 3}``.
    """
    data = utf8(str(path))
    ptr, size = json_arg(overrides)
    return call_json(lib.nenyax_config_load, data, len(data), ptr, size)


def train_config(
    path: str,
    overrides: Optional[Dict[str, Any]] = None,
    *,
    trainer: Optional[Trainer] = None,
    policy: Optional[PolicyLike] = None,
) -> TrainReport:
    """Train as a run config file says: its env URI, its learner and its train options."""
    cfg = load_config(path, overrides)
    env = load(cfg["env"]["uri"])
    return train(env, cfg["learner"], trainer=trainer, policy=policy, options=cfg["train"])


__all__ = [
    "CustomLearner",
    "Group",
    "Learner",
    "TraceBatch",
    "TrainReport",
    "Trainer",
    "load_config",
    "train",
    "train_config",
]
