"""The learners' maths through the C ABI against the golden vectors of pg-math.md, on numpy and torch."""

import json
from pathlib import Path

import numpy as np
import pytest
from nenyax_native import learners
from nenyax_native.errors import ConfigError, CudaUnavailableError

GOLDEN = json.loads((Path(__file__).resolve().parents[3] / "tests" / "data" / "pg-golden.json").read_text())
TOL = {
    "float64": GOLDEN["tolerance"]["float64_kernels"],
    "float32": GOLDEN["tolerance"]["float32_kernels"],
}
PG_CASES = [c for c in GOLDEN["cases"] if c["kind"] == "pg_loss"]
ADV_CASES = [c for c in GOLDEN["cases"] if c["kind"] == "advantage"]
SHARED = GOLDEN["shared_inputs"]["tok6x7"]

# The golden keys of each estimator, as options of nenyax_advantages.
ESTIMATORS = {
    "grpo_verl_eps1e-6": dict(estimator="grpo_verl"),
    "grpo_trl_eps1e-4": dict(estimator="grpo_trl"),
    "grpo_trl_scale_batch_eps1e-4": dict(estimator="grpo", eps=1e-4, std_scope="batch", singleton="zero"),
    "dr_grpo_no_std_verl": dict(estimator="dr_grpo"),
    "rloo_verl": dict(estimator="rloo", singleton="reward"),
    "rloo_vectorized_verl_and_trl": dict(estimator="rloo", singleton="zero"),
    "reinforce_batch_mean": dict(estimator="reinforce"),
}


def close(got, want, dtype="float64"):
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64), **TOL[dtype])


def inputs_of(case):
    return SHARED if case.get("inputs_ref") else case["inputs"]


def numpy_arrays(case, dtype):
    inp = inputs_of(case)
    arrays = {k: np.asarray(inp[k], dtype=dtype) for k in ("logp", "old_logp", "ref_logp", "entropy", "advantages") if k in inp}
    arrays["mask"] = np.asarray(inp["mask"], dtype=np.uint8)
    return arrays


def torch_arrays(case, dtype):
    torch = pytest.importorskip("torch")
    out = {k: torch.from_numpy(v) for k, v in numpy_arrays(case, dtype).items()}
    out["mask"] = out["mask"].bool()  # a bool mask is read in place too
    return out


def to_numpy(x):
    return x.detach().cpu().numpy() if hasattr(x, "detach") else x


def check_case(case, arrays, dtype):
    want = case["expected"]
    has_entropy = want.get("entropy_agg") is not None
    out = learners.pg_loss(
        arrays["logp"],
        arrays["old_logp"],
        arrays["advantages"],
        arrays["mask"],
        ref_logp=arrays.get("ref_logp") if case["params"].get("kl") else None,
        entropy=arrays.get("entropy") if has_entropy else None,
        config=case["params"],
    )
    stats, grad = out[0], out[1]
    assert str(grad.dtype).endswith(dtype) and tuple(grad.shape) == tuple(arrays["logp"].shape)
    close(stats.loss, want["loss"], dtype)
    close(stats.loss_pg, want["loss_pg"], dtype)
    close(to_numpy(grad), want["grad_logp"], dtype)
    if want.get("loss_kl_unscaled") is not None:
        close(stats.kl, want["loss_kl_unscaled"], dtype)
    if has_entropy:
        close(stats.entropy, want["entropy_agg"], dtype)
        close(to_numpy(out[2]), want["grad_entropy"], dtype)
    # Padding holds garbage in the inputs and must get exactly 0.
    assert np.all(to_numpy(grad)[np.asarray(inputs_of(case)["mask"]) == 0] == 0)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", PG_CASES, ids=[c["name"] for c in PG_CASES])
def test_pg_loss_matches_golden_numpy(case, dtype):
    check_case(case, numpy_arrays(case, dtype), dtype)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", PG_CASES, ids=[c["name"] for c in PG_CASES])
def test_pg_loss_matches_golden_torch(case, dtype):
    check_case(case, torch_arrays(case, dtype), dtype)


def test_every_golden_loss_case_is_covered():
    assert len(PG_CASES) == 35 and len(ADV_CASES) == 2


@pytest.mark.parametrize("case", ADV_CASES, ids=[c["name"] for c in ADV_CASES])
def test_advantages_and_dapo_keep_match_golden(case):
    rewards, ids = case["inputs"]["rewards"], case["inputs"]["group_ids"]
    for key, options in ESTIMATORS.items():
        close(learners.advantages(rewards, ids, **options), case["expected"][key])
        close(learners.advantages(np.asarray(rewards), np.asarray(ids, dtype=np.int64), **options), case["expected"][key])
    keep = learners.dapo_keep(np.asarray(rewards), np.asarray(ids, dtype=np.int64))
    assert keep.dtype == np.bool_ and keep.tolist() == case["expected"]["dapo_keep_group"]


def test_advantages_on_torch_return_torch():
    torch = pytest.importorskip("torch")
    case = ADV_CASES[0]
    rewards = torch.tensor(case["inputs"]["rewards"], dtype=torch.float64)
    ids = torch.tensor(case["inputs"]["group_ids"])
    adv = learners.advantages(rewards, ids, "grpo_verl")
    assert isinstance(adv, torch.Tensor) and adv.dtype == torch.float64
    close(adv.numpy(), case["expected"]["grpo_verl_eps1e-6"])
    keep = learners.dapo_keep(rewards, ids)
    assert keep.dtype == torch.bool and keep.tolist() == case["expected"]["dapo_keep_group"]


def test_reinforce_pp_matches_golden():
    case = next(c for c in GOLDEN["cases"] if c["kind"] == "advantage_token")
    inp, want = case["inputs"], case["expected"]
    mask = np.asarray(inp["mask"], dtype=np.uint8)
    for gamma, tag in ((1.0, "1"), (0.9, "0.9")):
        adv, ret = learners.reinforce_pp(inp["rewards"], mask, gamma=gamma)
        close(adv, want[f"reinforce_pp_gamma{tag}"])
        close(ret, want[f"returns_gamma{tag}"])
    adv, _ = learners.reinforce_pp(inp["rewards"], mask, group_ids=inp["group_ids"])
    close(adv, want["reinforce_pp_baseline"])


def test_dpo_matches_golden():
    case = next(c for c in GOLDEN["cases"] if c["kind"] == "dpo")
    inp, want = case["inputs"], case["expected"]
    # The case's note: these rewards and groups give its pairs (rows 0 vs 1 and 5 vs 3).
    loss, grad, pairs = learners.dpo_loss(
        [1.0, 0.0, 0.5, 0.0, 0.0, 1.0],
        [0, 0, 0, 1, 1, 1],
        np.asarray(inp["logp"]),
        np.asarray(inp["ref_logp"]),
        np.asarray(inp["mask"], dtype=np.uint8),
        beta=case["params"]["beta"],
    )
    close(loss, want["loss"])
    close(grad, want["grad_logp"])
    assert pairs == len(want["per_pair_loss"])


def shared(dtype=np.float64):
    a = {k: np.asarray(SHARED[k], dtype=dtype) for k in ("logp", "old_logp", "ref_logp", "entropy", "advantages")}
    a["mask"] = np.asarray(SHARED["mask"], dtype=np.uint8)
    return a


def test_results_are_written_into_the_callers_arrays():
    a = shared()
    grad = np.full(a["logp"].shape, np.nan)
    grad_h = np.full(a["logp"].shape, np.nan)
    stats, g, gh = learners.pg_loss(
        a["logp"], a["old_logp"], a["advantages"], a["mask"], entropy=a["entropy"], config="dapo", entropy_coef=0.01, grad_out=grad, grad_entropy_out=grad_h
    )
    assert g is grad and gh is grad_h and np.shares_memory(g, grad)
    # Every position was written, padding with exactly 0.
    assert not np.isnan(grad).any() and not np.isnan(grad_h).any()
    assert np.all(grad[a["mask"] == 0] == 0) and np.any(grad != 0)
    adv = np.empty(4)
    assert learners.advantages([1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1], out=adv) is adv


def test_torch_results_are_written_into_the_callers_tensors():
    torch = pytest.importorskip("torch")
    a = {k: torch.from_numpy(v) for k, v in shared(np.float32).items()}
    grad = torch.full(a["logp"].shape, float("nan"))
    _, g = learners.pg_loss(a["logp"], a["old_logp"], a["advantages"], a["mask"], config="dapo", grad_out=grad)
    assert g is grad and g.data_ptr() == grad.data_ptr() and not torch.isnan(grad).any()


def test_inputs_are_never_copied_so_unusable_ones_are_refused():
    a = shared()
    with pytest.raises(TypeError, match=r"old_logp is float32, expected float64: pass old_logp.astype\(np.float64\)"):
        learners.pg_loss(a["logp"], a["old_logp"].astype(np.float32), a["advantages"], a["mask"], config="dapo")
    with pytest.raises(TypeError, match=r"logp is not C-contiguous: pass np.ascontiguousarray\(logp\)"):
        learners.pg_loss(np.asfortranarray(a["logp"]), a["old_logp"], a["advantages"], a["mask"], config="dapo")
    with pytest.raises(TypeError, match="mask is int64, expected uint8 or bool"):
        learners.pg_loss(a["logp"], a["old_logp"], a["advantages"], a["mask"].astype(np.int64), config="dapo")
    with pytest.raises(TypeError, match="logp is float16, expected float32 or float64"):
        learners.pg_loss(a["logp"].astype(np.float16), a["old_logp"], a["advantages"], a["mask"], config="dapo")
    with pytest.raises(TypeError, match="grad_out is read-only"):
        out = np.zeros_like(a["logp"])
        out.flags.writeable = False
        learners.pg_loss(a["logp"], a["old_logp"], a["advantages"], a["mask"], config="dapo", grad_out=out)
    with pytest.raises(TypeError, match="learner name or knobs go in config="):
        learners.pg_loss(a["logp"], a["old_logp"], a["advantages"], a["mask"], "dapo")
    # A bool mask is one byte of 0 or 1: read in place, with the uint8 mask's result.
    s8, g8 = learners.pg_loss(a["logp"], a["old_logp"], a["advantages"], a["mask"], config="dapo")
    sb, gb = learners.pg_loss(a["logp"], a["old_logp"], a["advantages"], a["mask"].astype(bool), config="dapo")
    assert s8 == sb and np.array_equal(g8, gb)


def test_torch_inputs_are_refused_like_numpy_ones():
    torch = pytest.importorskip("torch")
    a = {k: torch.from_numpy(v) for k, v in shared().items()}
    with pytest.raises(TypeError, match=r"logp is not contiguous: pass logp.contiguous\(\)"):
        learners.pg_loss(a["logp"].t().contiguous().t(), a["old_logp"], a["advantages"], a["mask"], config="dapo")
    with pytest.raises(TypeError, match=r"advantages is float32, expected float64: pass advantages.to\(torch.float64\)"):
        learners.pg_loss(a["logp"], a["old_logp"], a["advantages"].float(), a["mask"], config="dapo")
    with pytest.raises(TypeError, match="old_logp must be a torch tensor on cpu"):
        learners.pg_loss(a["logp"], a["old_logp"].numpy(), a["advantages"], a["mask"], config="dapo")


def test_shape_mismatches_name_the_arrays():
    a = shared()
    with pytest.raises(ValueError, match=r"old_logp has shape \(6, 6\) but logp has \(6, 7\)"):
        learners.pg_loss(a["logp"], a["old_logp"][:, :6].copy(), a["advantages"], a["mask"], config="dapo")
    with pytest.raises(ValueError, match=r"advantages has shape \(5,\) but logp has \(6, 7\): give one per row \(6,\) or one per token"):
        learners.pg_loss(a["logp"], a["old_logp"], a["advantages"][:5].copy(), a["mask"], config="dapo")
    with pytest.raises(ValueError, match=r"logp must be two-dimensional"):
        learners.pg_loss(a["logp"].ravel(), a["old_logp"].ravel(), a["advantages"], a["mask"].ravel(), config="dapo")
    with pytest.raises(ValueError, match=r"group_ids has shape \(3,\) but rewards has \(4,\)"):
        learners.advantages([1.0, 0.0, 1.0, 0.0], [0, 0, 1])


def test_bad_configs_are_config_errors_with_the_librarys_message():
    a = shared()
    with pytest.raises(ConfigError, match='unknown learner "nosuch"; known: grpo'):
        learners.pg_loss(a["logp"], a["old_logp"], a["advantages"], a["mask"], config="nosuch")
    with pytest.raises(ConfigError, match="ref_logp"):
        learners.pg_loss(a["logp"], a["old_logp"], a["advantages"], a["mask"], config="grpo")  # grpo has a KL term
    with pytest.raises(ConfigError, match="clip_hgih"):
        learners.learner_json("dapo", clip_hgih=0.3)
    with pytest.raises(ConfigError, match="no valid tokens"):
        learners.pg_loss(a["logp"], a["old_logp"], a["advantages"], np.zeros_like(a["mask"]), config="dapo")


def test_learner_json_applies_overrides():
    cfg = learners.learner_json({"learner": "dapo", "clip_high": 0.3})
    assert cfg["learner"] == "dapo" and cfg["clip_high"] == 0.3 and cfg["clip_low"] == 0.2


def gpu_available():
    try:
        learners.cuda_device()
        return True
    except CudaUnavailableError:
        return False


@pytest.mark.skipif(gpu_available(), reason="a GPU is usable here")
def test_the_gpu_paths_say_cuda_is_unavailable():
    with pytest.raises(CudaUnavailableError, match="CUDA unavailable"):
        learners.cuda_device()
    a = shared(np.float32)
    with pytest.raises(CudaUnavailableError):
        learners.pg_loss(a["logp"], a["old_logp"], a["advantages"], a["mask"], config="dapo", device="cuda")


def test_policy_loss_backward_gives_the_librarys_gradient():
    pytest.importorskip("torch")
    case = next(c for c in PG_CASES if c["name"] == "ppo_clip_dual+kl_k3+entropy/token-mean")
    a = torch_arrays(case, "float64")
    logp = a["logp"].clone().requires_grad_()
    entropy = a["entropy"].clone().requires_grad_()
    loss = learners.policy_loss(logp, a["old_logp"], a["advantages"], a["mask"], case["params"], ref_logp=a["ref_logp"], entropy=entropy)
    (2 * loss).backward()
    close(loss.item(), case["expected"]["loss"])
    close(logp.grad.numpy(), 2 * np.asarray(case["expected"]["grad_logp"]))
    close(entropy.grad.numpy(), 2 * np.asarray(case["expected"]["grad_entropy"]))


def test_policy_loss_passes_gradcheck():
    torch = pytest.importorskip("torch")
    case = next(c for c in PG_CASES if c["name"] == "ppo_clip+kl_k3/token-mean")
    a = torch_arrays(case, "float64")
    logp = a["logp"].clone().requires_grad_()
    fn = lambda x: learners.policy_loss(x, a["old_logp"], a["advantages"], a["mask"], case["params"], ref_logp=a["ref_logp"])  # noqa: E731
    # Finite differences of the library's loss agree with the gradient it returns.
    assert torch.autograd.gradcheck(fn, (logp,), eps=1e-6, atol=1e-7)


def test_policy_loss_trains_through_a_softmax_like_pytorch_eager():
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(0)
    rows, width, vocab = 4, 5, 7
    logits = torch.randn(rows, width, vocab, generator=gen, dtype=torch.float64, requires_grad=True)
    tokens = torch.randint(vocab, (rows, width), generator=gen)
    mask = torch.rand(rows, width, generator=gen) < 0.8
    mask[:, 0] = True
    old = torch.log_softmax(logits.detach() + 0.1 * torch.randn(rows, width, vocab, generator=gen, dtype=torch.float64), -1)
    old = old.gather(-1, tokens[..., None])[..., 0]
    adv = torch.randn(rows, generator=gen, dtype=torch.float64)
    logp = torch.log_softmax(logits, -1).gather(-1, tokens[..., None])[..., 0]
    loss = learners.policy_loss(logp, old, adv, mask, "dapo")
    (ours,) = torch.autograd.grad(loss, logits)
    # DAPO's loss in PyTorch eager (pg-math.md 2.1, token-mean): the same value and gradient.
    logp = torch.log_softmax(logits, -1).gather(-1, tokens[..., None])[..., 0]
    ratio = torch.exp(torch.clamp(logp - old, -20, 20))
    per_token = torch.maximum(-adv[:, None] * ratio, -adv[:, None] * torch.clamp(ratio, 0.8, 1.28))
    eager = (per_token * mask).sum() / mask.sum()
    (theirs,) = torch.autograd.grad(eager, logits)
    close(loss.item(), eager.item())
    close(ours.numpy(), theirs.numpy())


def test_policy_loss_refuses_numpy():
    a = shared()
    with pytest.raises(TypeError, match="use pg_loss for numpy arrays"):
        learners.policy_loss(a["logp"], a["old_logp"], a["advantages"], a["mask"], "dapo")


cuda = pytest.mark.skipif(not gpu_available(), reason="no usable GPU (the CUDA-unavailable path is tested instead)")


@cuda
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", PG_CASES, ids=[c["name"] for c in PG_CASES])
def test_pg_loss_matches_golden_on_cuda_tensors(case, dtype):
    pytest.importorskip("torch")
    arrays = {k: v.to(f"cuda:{learners.cuda_device()['ordinal']}") for k, v in torch_arrays(case, dtype).items()}
    check_case(case, arrays, dtype)


@cuda
def test_policy_loss_on_cuda_keeps_the_loss_on_the_device():
    pytest.importorskip("torch")
    case = next(c for c in PG_CASES if c["name"] == "preset/DAPO")
    device = f"cuda:{learners.cuda_device()['ordinal']}"
    a = {k: v.to(device) for k, v in torch_arrays(case, "float32").items()}
    logp = a["logp"].clone().requires_grad_()
    loss = learners.policy_loss(logp, a["old_logp"], a["advantages"], a["mask"], case["params"])
    assert loss.device == logp.device
    loss.backward()
    close(logp.grad.cpu().numpy(), case["expected"]["grad_logp"], "float32")


@cuda
def test_nan_inputs_and_empty_masks_on_cuda_are_refused_like_on_the_host():
    torch = pytest.importorskip("torch")
    device = f"cuda:{learners.cuda_device()['ordinal']}"
    a = {k: torch.from_numpy(v).to(device) for k, v in shared(np.float32).items()}
    logp = a["logp"].clone()
    logp[1, 1] = float("nan")
    with pytest.raises(ConfigError, match="`logp`: holds a NaN on a valid token"):
        learners.pg_loss(logp, a["old_logp"], a["advantages"], a["mask"], config="dapo")
    with pytest.raises(ConfigError, match="no valid tokens"):
        learners.pg_loss(a["logp"], a["old_logp"], a["advantages"], torch.zeros_like(a["mask"]), config="dapo")
