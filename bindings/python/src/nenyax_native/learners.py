"""The learners' maths over numpy arrays and PyTorch tensors, without copying them.

Arrays and tensors are handed to the C ABI by pointer: the library reads the caller's memory
and writes its results straight into arrays allocated in the caller's type (numpy in, numpy
out; torch in, torch out on the same device and in the same dtype). Nothing is ever copied
behind the caller's back, so an array the library cannot read as it is (a float array that is
not float32/float64 or not the dtype of ``logp``, a mask that is not uint8/bool, a
non-C-contiguous view) is refused with a ``TypeError`` that says which conversion to make.
Plain lists and tuples are the exception: they are converted (to the kind and dtype of
``logp``, or float64/int64), which suits the small per-sequence inputs.

CUDA tensors run the fused GPU loss on their own memory, queued on PyTorch's current stream;
host arrays can ask for the GPU with ``device="cuda"`` (copied in and back by the library).
Where there is no usable GPU both raise :class:`~nenyax_native.errors.CudaUnavailableError`.
"""

from __future__ import annotations

import functools
import json
import math
import sys
from typing import Any, Dict, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from ._native import call_json, check, ffi, json_arg, lib
from .errors import ConfigError

Config = Union[None, str, Dict[str, Any]]

# The bits of the flags that end the CUDA loss's stats: a NaN on a valid token of that input.
_BAD_BITS = (
    (lib.NENYAX_PG_BAD_LOGP, "logp"),
    (lib.NENYAX_PG_BAD_OLD_LOGP, "old_logp"),
    (lib.NENYAX_PG_BAD_REF_LOGP, "ref_logp"),
    (lib.NENYAX_PG_BAD_ENTROPY, "entropy"),
    (lib.NENYAX_PG_BAD_ADVANTAGES, "advantages"),
)


class PGStats(NamedTuple):
    """What a policy loss returns besides its gradients (nenyax_pg_stats_t)."""

    loss: float
    loss_pg: float
    kl: float
    entropy: float
    clip_fraction: float
    approx_kl: float
    mean_ratio: float
    tokens: float
    rows: float


def _torch() -> Any:
    """torch if the caller has imported it (this module never imports it for numpy users)."""
    return sys.modules.get("torch")


def _is_tensor(x: Any) -> bool:
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


# Names of dtypes seen so far: str(dtype) costs microseconds, a dict lookup nanoseconds.
_DTYPE_NAMES: Dict[Any, str] = {}


def _dtype_name(x: Any) -> str:
    name = _DTYPE_NAMES.get(x.dtype)
    if name is None:
        name = _DTYPE_NAMES[x.dtype] = str(x.dtype).replace("torch.", "")
    return name


class _Kind:
    """The array type of a call's inputs, from which its outputs are allocated."""

    def __init__(self, like: Any) -> None:
        self.torch = _is_tensor(like)
        self.cuda = self.torch and like.device.type == "cuda"
        self.device = like.device if self.torch else None

    def empty(self, shape: Tuple[int, ...], dtype: str) -> Any:
        if self.torch:
            torch = _torch()
            return torch.empty(shape, dtype=getattr(torch, dtype), device=self.device)
        return np.empty(shape, dtype=dtype)

    def convert(self, values: Sequence[Any], dtype: str) -> Any:
        """A list or tuple as an array of this kind (the one documented copy)."""
        if self.torch:
            torch = _torch()
            return torch.tensor(values, dtype=getattr(torch, dtype), device=self.device)
        return np.asarray(values, dtype=dtype)


def _coerce(x: Any, name: str, kind: _Kind, dtype: str) -> Any:
    if isinstance(x, (list, tuple)):
        return kind.convert(x, dtype)
    if isinstance(x, np.ndarray) or _is_tensor(x):
        return x
    hint = " (a learner name or knobs go in config=)" if isinstance(x, (str, dict)) else ""
    raise TypeError(f"{name} must be a numpy array, a torch tensor or a list, not {type(x).__name__}{hint}")


_CTYPES = {name: ffi.typeof(name) for name in ("void *", "double *", "int64_t *", "uint8_t *")}
_BUFFER_TYPES = {name: ffi.typeof(name.replace(" *", "[]").replace("void", "char")) for name in _CTYPES}


def _ptr(x: Any, name: str, dtypes: Tuple[str, ...], kind: _Kind, *, ctype: str = "void *", writable: bool = False) -> Any:
    """The address of ``x``'s memory, after checking that the library can use it as it is."""
    if _is_tensor(x) != kind.torch or (kind.torch and x.device != kind.device):
        where = f"a torch tensor on {kind.device}" if kind.torch else "a numpy array"
        raise TypeError(f"{name} must be {where} like the other inputs, not {type(x).__name__}")
    if _dtype_name(x) not in dtypes:
        fix = f".astype(np.{dtypes[0]})" if not kind.torch else f".to(torch.{dtypes[0]})"
        raise TypeError(f"{name} is {_dtype_name(x)}, expected {' or '.join(dtypes)}: pass {name}{fix} (inputs are never copied)")
    if kind.torch:
        if not x.is_contiguous():
            raise TypeError(f"{name} is not contiguous: pass {name}.contiguous() (inputs are never copied)")
        return ffi.cast(_CTYPES[ctype], x.data_ptr())
    if not x.flags.c_contiguous:
        raise TypeError(f"{name} is not C-contiguous: pass np.ascontiguousarray({name}) (inputs are never copied)")
    if writable and not x.flags.writeable:
        raise TypeError(f"{name} is read-only; the library writes its results into it")
    # from_buffer takes the address without building __array_interface__ (10x cheaper).
    return ffi.from_buffer(_BUFFER_TYPES[ctype], x)


def _shape(x: Any) -> Tuple[int, ...]:
    return tuple(x.shape)


def _same_shape(arrays: Dict[str, Any], want: Tuple[int, ...], against: str) -> None:
    for name, x in arrays.items():
        if x is not None and _shape(x) != want:
            raise ValueError(f"{name} has shape {_shape(x)} but {against} has {want}: they must have the same shape")


def _host(kind: _Kind, what: str) -> None:
    if kind.cuda:
        raise TypeError(f"{what} reads host memory: pass CPU arrays (e.g. rewards.cpu())")


def _config_json(config: Config, knobs: Dict[str, Any]) -> bytes:
    """The loss config: a learner name, a dict of knobs, or the default learner, with overrides."""
    if config is None:
        cfg: Dict[str, Any] = {"learner": "grpo"}
    elif isinstance(config, str):
        cfg = {"learner": config}
    elif isinstance(config, dict):
        cfg = dict(config)
    else:
        raise TypeError(f"config must be a learner name, a dict or None, not {type(config).__name__}")
    cfg.update(knobs)
    return json.dumps(cfg).encode("utf-8")


def learner_json(config: Config = None, **knobs: Any) -> Dict[str, Any]:
    """Every knob of a named learner (``"dapo"`` or ``{"learner": "dapo", ...}``) with overrides applied."""
    data = _config_json(config, knobs)
    return call_json(lib.nenyax_learner_json, data, len(data))


def cuda_device() -> Dict[str, Any]:
    """The GPU the CUDA paths use ({"ordinal", "name", "compute_capability"}); CudaUnavailableError says why none."""
    return call_json(lib.nenyax_cuda_device)


def _groups(rewards: Any, group_ids: Any, what: str) -> Tuple[_Kind, Any, Any, Any, Any]:
    kind = _Kind(rewards)
    _host(kind, what)
    rewards = _coerce(rewards, "rewards", kind, "float64")
    group_ids = _coerce(group_ids, "group_ids", kind, "int64")
    if len(_shape(rewards)) != 1:
        raise ValueError(f"rewards must be one-dimensional (one per sequence), not of shape {_shape(rewards)}")
    _same_shape({"group_ids": group_ids}, _shape(rewards), "rewards")
    return (
        kind,
        rewards,
        group_ids,
        _ptr(rewards, "rewards", ("float64",), kind, ctype="double *"),
        _ptr(group_ids, "group_ids", ("int64",), kind, ctype="int64_t *"),
    )


def _out(out: Optional[Any], name: str, kind: _Kind, shape: Tuple[int, ...], dtype: str, ctype: str) -> Tuple[Any, Any]:
    """A caller's output array (checked) or a new one, with its address."""
    arr = kind.empty(shape, dtype) if out is None else out
    _same_shape({name: arr}, shape, "the result")
    return arr, _ptr(arr, name, (dtype,), kind, ctype=ctype, writable=True)


def advantages(
    rewards: Any,
    group_ids: Any,
    estimator: str = "grpo",
    *,
    eps: Optional[float] = None,
    singleton: Optional[str] = None,
    std_scope: Optional[str] = None,
    out: Optional[Any] = None,
) -> Any:
    """One advantage per sequence (float64) from rewards and the group id of each (docs/learners.md)."""
    kind, rewards, group_ids, rp, gp = _groups(rewards, group_ids, "advantages")
    options = {"estimator": estimator, "eps": eps, "singleton": singleton, "std_scope": std_scope}
    optp, optn = json_arg({k: v for k, v in options.items() if v is not None})
    result, outp = _out(out, "out", kind, _shape(rewards), "float64", "double *")
    check(lib.nenyax_advantages(rp, gp, _shape(rewards)[0], optp, optn, outp))
    return result


def dapo_keep(rewards: Any, group_ids: Any) -> Any:
    """DAPO's dynamic-sampling filter: a bool per sequence, False where its group's rewards are all equal."""
    kind, rewards, group_ids, rp, gp = _groups(rewards, group_ids, "dapo_keep")
    keep, kp = _out(None, "keep", kind, _shape(rewards), "uint8", "uint8_t *")
    check(lib.nenyax_dapo_keep(rp, gp, _shape(rewards)[0], kp))
    # One byte holding 0 or 1 is a bool in both numpy and torch: a view, not a copy.
    return keep.view(_torch().bool) if kind.torch else keep.view(bool)


def _mask_ptr(mask: Any, kind: _Kind) -> Any:
    return _ptr(mask, "mask", ("uint8", "bool"), kind, ctype="uint8_t *")


def _rows_width(x: Any, name: str) -> Tuple[int, int]:
    if len(_shape(x)) != 2:
        raise ValueError(f"{name} must be two-dimensional (rows x width), not of shape {_shape(x)}")
    rows, width = _shape(x)
    return rows, width


def reinforce_pp(rewards: Any, mask: Any, *, gamma: float = 1.0, group_ids: Optional[Any] = None) -> Tuple[Any, Any]:
    """REINFORCE++ token advantages and discounted returns (rows x width, float64); group_ids selects the baseline variant."""
    kind = _Kind(mask)
    _host(kind, "reinforce_pp")
    mask = _coerce(mask, "mask", kind, "uint8")
    rows, width = _rows_width(mask, "mask")
    rewards = _coerce(rewards, "rewards", kind, "float64")
    _same_shape({"rewards": rewards}, (rows,), "one reward per row of mask")
    gp = ffi.NULL
    if group_ids is not None:
        group_ids = _coerce(group_ids, "group_ids", kind, "int64")
        _same_shape({"group_ids": group_ids}, (rows,), "one group id per row of mask")
        gp = _ptr(group_ids, "group_ids", ("int64",), kind, ctype="int64_t *")
    adv, ap = _out(None, "advantages", kind, (rows, width), "float64", "double *")
    ret, retp = _out(None, "returns", kind, (rows, width), "float64", "double *")
    rp = _ptr(rewards, "rewards", ("float64",), kind, ctype="double *")
    check(lib.nenyax_reinforce_pp(rp, gp, _mask_ptr(mask, kind), rows, width, gamma, ap, retp))
    return adv, ret


def dpo_loss(rewards: Any, group_ids: Any, logp: Any, ref_logp: Any, mask: Any, *, beta: float = 0.1) -> Tuple[float, Any, int]:
    """DPO (sigmoid) on each group's best-vs-worst pair: (mean loss, dL/dlogp rows x width in float64, pairs)."""
    kind = _Kind(logp)
    _host(kind, "dpo_loss")
    logp, ref_logp = _coerce(logp, "logp", kind, "float64"), _coerce(ref_logp, "ref_logp", kind, "float64")
    mask = _coerce(mask, "mask", kind, "uint8")
    rows, width = _rows_width(logp, "logp")
    _same_shape({"ref_logp": ref_logp, "mask": mask}, (rows, width), "logp")
    rewards = _coerce(rewards, "rewards", kind, "float64")
    group_ids = _coerce(group_ids, "group_ids", kind, "int64")
    _same_shape({"rewards": rewards, "group_ids": group_ids}, (rows,), "one value per row of logp")
    grad, gp = _out(None, "grad_logp", kind, (rows, width), "float64", "double *")
    loss, pairs = ffi.new("double *"), ffi.new("size_t *")
    check(
        lib.nenyax_dpo_loss(
            _ptr(rewards, "rewards", ("float64",), kind, ctype="double *"),
            _ptr(group_ids, "group_ids", ("int64",), kind, ctype="int64_t *"),
            _ptr(logp, "logp", ("float64",), kind, ctype="double *"),
            _ptr(ref_logp, "ref_logp", ("float64",), kind, ctype="double *"),
            _mask_ptr(mask, kind),
            rows,
            width,
            beta,
            loss,
            gp,
            pairs,
        )
    )
    return float(loss[0]), grad, int(pairs[0])


_BATCH, _STATS = ffi.typeof("nenyax_pg_batch_t *"), ffi.typeof("nenyax_pg_stats_t *")


class _PGCall:
    """One nenyax_pg_loss_batch call: the checked inputs, the outputs and the batch struct."""

    def __init__(
        self,
        logp: Any,
        old_logp: Any,
        advantages: Any,
        mask: Any,
        ref_logp: Any,
        entropy: Any,
        config: bytes,
        device: Optional[str],
        grad_out: Optional[Any],
        grad_entropy_out: Optional[Any],
    ) -> None:
        if isinstance(logp, (list, tuple)):
            logp = np.asarray(logp, dtype="float64")
        kind = _Kind(logp)
        logp = _coerce(logp, "logp", kind, "float64")
        dtype = _dtype_name(logp)
        if dtype not in ("float32", "float64"):
            _ptr(logp, "logp", ("float32", "float64"), kind)  # raises the TypeError naming the fix
        rows, width = _rows_width(logp, "logp")
        old_logp, advantages = _coerce(old_logp, "old_logp", kind, dtype), _coerce(advantages, "advantages", kind, dtype)
        mask = _coerce(mask, "mask", kind, "uint8")
        optional = {"ref_logp": ref_logp, "entropy": entropy}
        optional = {k: None if v is None else _coerce(v, k, kind, dtype) for k, v in optional.items()}
        _same_shape({"old_logp": old_logp, "mask": mask, **optional}, (rows, width), "logp")
        if _shape(advantages) not in ((rows,), (rows, width)):
            raise ValueError(
                f"advantages has shape {_shape(advantages)} but logp has {(rows, width)}: give one per row {(rows,)} "
                f"or one per token {(rows, width)}"
            )
        if device not in (None, "cpu", "cuda"):
            raise ValueError(f'device must be None, "cpu" or "cuda", not {device!r}')
        if kind.cuda and device == "cpu":
            raise ValueError('device="cpu" with CUDA tensors: the library computes device memory on the GPU')
        self.kind, self.dtype, self.config = kind, dtype, config
        self.grad, gp = _out(grad_out, "grad_out", kind, (rows, width), dtype, "void *")
        self.grad_entropy, gep = None, ffi.NULL
        if optional["entropy"] is not None:
            self.grad_entropy, gep = _out(grad_entropy_out, "grad_entropy_out", kind, (rows, width), dtype, "void *")
        b = ffi.new(_BATCH)
        b.version = lib.NENYAX_PG_BATCH_VERSION
        b.dtype = lib.NENYAX_DTYPE_F32 if dtype == "float32" else lib.NENYAX_DTYPE_F64
        b.memory = lib.NENYAX_MEMORY_CUDA if kind.cuda else lib.NENYAX_MEMORY_HOST
        b.device = lib.NENYAX_DEVICE_CUDA if kind.cuda or device == "cuda" else lib.NENYAX_DEVICE_CPU
        b.logp = _ptr(logp, "logp", (dtype,), kind)
        b.old_logp = _ptr(old_logp, "old_logp", (dtype,), kind)
        for name, x in optional.items():
            setattr(b, name, ffi.NULL if x is None else _ptr(x, name, (dtype,), kind))
        b.mask = _mask_ptr(mask, kind)
        b.advantages = _ptr(advantages, "advantages", (dtype,), kind)
        b.advantages_len = math.prod(_shape(advantages))
        b.rows, b.width = rows, width
        b.grad_logp, b.grad_entropy = gp, gep
        self.stats_device = None
        if kind.cuda:
            torch = _torch()
            _check_ordinal(kind.device)
            self.stats_device = torch.empty(lib.NENYAX_PG_STATS_LEN, dtype=torch.float64, device=kind.device)
            b.stats_device = ffi.cast("double *", self.stats_device.data_ptr())
            # The library runs in the device's primary context, which is PyTorch's context too, so
            # it can queue on PyTorch's stream and read its allocations.
            b.stream = ffi.cast("void *", torch.cuda.current_stream(kind.device).cuda_stream)
        # The arrays must outlive the call: the struct holds only their addresses.
        self._keep = (logp, old_logp, advantages, mask, optional)
        self.batch = b

    def run(self) -> Optional[PGStats]:
        """Run the loss; host memory returns the stats, CUDA memory leaves them in stats_device."""
        stats = ffi.new(_STATS)
        if self.kind.cuda:
            with _torch().cuda.device(self.kind.device):
                check(lib.nenyax_pg_loss_batch(self.batch, self.config, len(self.config), ffi.NULL))
            return None
        check(lib.nenyax_pg_loss_batch(self.batch, self.config, len(self.config), stats))
        return PGStats(*(float(getattr(stats, f)) for f in PGStats._fields))


@functools.lru_cache(maxsize=None)
def _library_ordinal() -> int:
    return int(cuda_device()["ordinal"])


def _check_ordinal(device: Any) -> None:
    """CUDA tensors must be on the GPU the library uses: it runs in that device's primary context."""
    index = device.index if device.index is not None else _torch().cuda.current_device()
    if index != _library_ordinal():
        raise ValueError(
            f"the tensors are on cuda:{index} but libnenyax uses cuda:{_library_ordinal()}: "
            f"set NENYAX_CUDA_DEVICE={index} before the first GPU call"
        )


def _device_stats(stats_device: Any) -> PGStats:
    """The stats of a CUDA loss (reading them synchronises), refused as the library refuses them on the host."""
    values = stats_device.tolist()
    # The checks and wording of the library's stats_from_device (core/src/kernels/api.rs).
    if values[7] == 0:
        raise ConfigError("ConfigError: `mask`: has no valid tokens; nothing to compute a loss over")
    for bit, name in _BAD_BITS:
        if int(values[-1]) & bit:
            raise ConfigError(f"ConfigError: `{name}`: holds a NaN on a valid token")
    return PGStats(*values[: len(PGStats._fields)])


def pg_loss(
    logp: Any,
    old_logp: Any,
    advantages: Any,
    mask: Any,
    ref_logp: Optional[Any] = None,
    entropy: Optional[Any] = None,
    config: Config = None,
    *,
    device: Optional[str] = None,
    grad_out: Optional[Any] = None,
    grad_entropy_out: Optional[Any] = None,
    **knobs: Any,
) -> Tuple[Any, ...]:
    """A policy-gradient loss over rows x width tokens: (PGStats, dL/dlogp[, dL/dentropy when entropy is given]).

    ``logp``, ``old_logp``, ``ref_logp`` and ``entropy`` are float32 or float64 (all one dtype),
    ``mask`` uint8 or bool, ``advantages`` one per row or one per token. ``config`` is a learner
    name (``"dapo"``), a dict of knobs (docs/c-api.md) or None for ``grpo``; keyword ``knobs``
    override it. The gradients are allocated like ``logp`` (or written into ``grad_out`` /
    ``grad_entropy_out``). CUDA tensors run on the GPU on PyTorch's current stream; reading
    their stats synchronises it (:func:`policy_loss` does not).
    """
    call = _PGCall(logp, old_logp, advantages, mask, ref_logp, entropy, _config_json(config, knobs), device, grad_out, grad_entropy_out)
    stats = call.run()
    if stats is None:
        stats = _device_stats(call.stats_device)
    if call.grad_entropy is None:
        return stats, call.grad
    return stats, call.grad, call.grad_entropy


@functools.lru_cache(maxsize=None)
def _policy_loss_class() -> Any:
    """PolicyLoss, made on first use so that importing this module never imports torch."""
    import torch

    class PolicyLoss(torch.autograd.Function):
        """The library's loss as an autograd function: its gradient flows into logp (and entropy)."""

        @staticmethod
        def forward(ctx: Any, logp: Any, entropy: Any, old_logp: Any, advantages: Any, mask: Any, ref_logp: Any, config: bytes) -> Any:
            call = _PGCall(logp, old_logp, advantages, mask, ref_logp, entropy, config, None, None, None)
            stats = call.run()
            ctx.save_for_backward(call.grad, call.grad_entropy)
            ctx.has_entropy = call.grad_entropy is not None
            if stats is None:
                # The loss stays on the device: no synchronisation in the training step.
                return call.stats_device[0].to(logp.dtype)
            return torch.tensor(stats.loss, dtype=logp.dtype)

        @staticmethod
        def backward(ctx: Any, grad_loss: Any) -> Any:
            grad, grad_entropy = ctx.saved_tensors
            # loss.backward() seeds 1: the library's gradient is then the answer, without another
            # pass over the batch (only checked on the CPU, where reading it does not synchronise).
            if not (grad_loss.device.type == "cpu" and float(grad_loss) == 1.0):
                grad = grad_loss * grad
                grad_entropy = grad_loss * grad_entropy if ctx.has_entropy else None
            return grad, grad_entropy if ctx.has_entropy else None, None, None, None, None, None

    return PolicyLoss


def policy_loss(
    logp: Any,
    old_logp: Any,
    advantages: Any,
    mask: Any,
    config: Config = None,
    *,
    ref_logp: Optional[Any] = None,
    entropy: Optional[Any] = None,
    **knobs: Any,
) -> Any:
    """The loss as a 0-d torch tensor whose ``backward()`` sends the library's dL/dlogp (and dL/dentropy) into the graph."""
    if not _is_tensor(logp):
        raise TypeError(f"policy_loss takes torch tensors (logp is {type(logp).__name__}); use pg_loss for numpy arrays")
    return _policy_loss_class().apply(logp, entropy, old_logp, advantages, mask, ref_logp, _config_json(config, knobs))


def __getattr__(name: str) -> Any:
    if name == "PolicyLoss":
        return _policy_loss_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
