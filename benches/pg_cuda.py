#!/usr/bin/env python3
"""The fused CUDA loss of libnenyax against the PyTorch-eager formula, on the same GPU tensors.

Run by scripts/gpu_check.sh on a GPU machine (needs torch with CUDA):
    python3 benches/pg_cuda.py --lib target/gpu-kit/libnenyax.so [--rows 32768 --width 2048]

Both sides get the same torch tensors: libnenyax through its C ABI with the tensors' device
pointers and torch's current stream (the way a trainer calls it), PyTorch as TRL's
`_compute_loss` does it (forward and backward to logp). Times are CUDA-event medians after a
warm-up. Bandwidth: the bytes the fused path must move (logp, old, mask twice, advantages,
gradient, and ref with KL) over its time, against the device's own copy bandwidth measured here
(a 1 GiB device-to-device copy, read + write counted).
"""

import argparse
import ctypes
import json
import statistics

import torch

P = ctypes.c_void_p
SZ = ctypes.c_size_t

CONFIGS = {
    # token-level PPO-clip (DAPO clip-higher), token-mean: TRL's default loss
    "dapo": ({"learner": "dapo"}, False),
    # the same + k3 KL against a reference policy, coefficient 0.04
    "dapo+k3": ({"learner": "dapo", "kl": {"estimator": "k3", "coef": 0.04, "clamp": False}}, True),
}


def load(path):
    lib = ctypes.CDLL(path)
    f = lib.nenyax_pg_loss_cuda_f32
    f.argtypes = [P, P, P, P, P, P, SZ, SZ, SZ, ctypes.c_char_p, SZ, P, P, P, P]
    f.restype = P
    lib.nenyax_error_message.argtypes = [P, P]
    lib.nenyax_error_message.restype = ctypes.c_char_p
    lib.nenyax_error_free.argtypes = [P]
    return lib


def nenyax_call(lib, cfg, t, grad, stats, use_ref):
    c = json.dumps(cfg).encode()
    stream = torch.cuda.current_stream().cuda_stream
    err = lib.nenyax_pg_loss_cuda_f32(
        t["logp"].data_ptr(), t["old"].data_ptr(), t["ref"].data_ptr() if use_ref else None, None,
        t["mask_u8"].data_ptr(), t["adv"].data_ptr(), 0, t["rows"], t["width"], c, len(c),
        grad.data_ptr(), None, stats.data_ptr(), stream)
    if err:
        msg = lib.nenyax_error_message(err, None).decode()
        lib.nenyax_error_free(err)
        raise RuntimeError(msg)


def torch_loss(t, use_ref, coef=0.04, low=0.2, high=0.28):
    """TRL GRPOTrainer._compute_loss with loss_type='dapo' (token-mean over the batch)."""
    logp = t["logp"].detach().requires_grad_(True)
    mask = t["mask_f"]
    ratio = torch.exp(logp - t["old"])
    adv = t["adv"].unsqueeze(1)
    per_token = -torch.min(ratio * adv, torch.clamp(ratio, 1 - low, 1 + high) * adv)
    if use_ref:
        x = t["ref"] - logp
        per_token = per_token + coef * (torch.exp(x) - x - 1)
    loss = (per_token * mask).sum() / mask.sum().clamp(min=1.0)
    loss.backward()
    return loss, logp.grad


def timed(fn, reps):
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return statistics.median(times), min(times)


def copy_bandwidth(reps):
    n = (1 << 30) // 4
    src = torch.empty(n, device="cuda", dtype=torch.float32).uniform_()
    dst = torch.empty_like(src)
    med, best = timed(lambda: dst.copy_(src), reps)
    return 2 * src.numel() * 4 / med, 2 * src.numel() * 4 / best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--rows", type=int, default=32768)
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json")
    a = ap.parse_args()
    lib = load(a.lib)
    torch.manual_seed(0)
    dev = "cuda"
    b, w = a.rows, a.width
    lens = torch.randint(w // 4, w + 1, (b,), device=dev)
    mask = torch.arange(w, device=dev)[None, :] < lens[:, None]
    logp = -3.0 * torch.rand(b, w, device=dev)
    t = {
        "rows": b, "width": w, "logp": logp,
        "old": logp + 0.05 * torch.randn(b, w, device=dev),
        "ref": logp + 0.1 * torch.randn(b, w, device=dev),
        "adv": torch.randn(b, device=dev),
        "mask_u8": mask.to(torch.uint8).contiguous(), "mask_f": mask.to(torch.float32),
    }
    grad = torch.empty(b, w, device=dev)
    stats = torch.zeros(10, device=dev, dtype=torch.float64)
    name = torch.cuda.get_device_name()
    copy_med, copy_best = copy_bandwidth(a.reps)
    print(f"{name}: device copy bandwidth {copy_med / 1e12:.2f} TB/s median, {copy_best / 1e12:.2f} best")
    print(f"{b} x {w} = {b * w / 1e6:.1f}M tokens ({int(mask.sum())} valid), f32")
    results = {"device": name, "rows": b, "width": w, "copy_bytes_per_s": copy_med, "configs": {}}
    for key, (cfg, use_ref) in CONFIGS.items():
        # Same numbers first: the two sides must compute the same loss and gradient.
        nenyax_call(lib, cfg, t, grad, stats, use_ref)
        torch.cuda.synchronize()
        loss_t, grad_t = torch_loss(t, use_ref)
        s = stats.cpu().tolist()
        assert int(s[9]) == 0, f"bad-input flags {s[9]}"
        rel = abs(s[0] - loss_t.item()) / max(abs(loss_t.item()), 1e-30)
        gdiff = (grad - grad_t).abs().max().item()
        gscale = grad_t.abs().max().item()
        assert rel < 1e-4 and gdiff <= 1e-4 * gscale + 1e-12, (key, rel, gdiff, gscale)
        for _ in range(3):
            nenyax_call(lib, cfg, t, grad, stats, use_ref)
            torch_loss(t, use_ref)
        nx_med, nx_best = timed(lambda: nenyax_call(lib, cfg, t, grad, stats, use_ref), a.reps)
        pt_med, pt_best = timed(lambda: torch_loss(t, use_ref), a.reps)
        per_tok = 4 + 4 + 1 + 1 + 4 + (4 if use_ref else 0)  # logp, old, mask x2, grad, ref
        moved = b * w * per_tok + b * 4
        bw = moved / nx_med
        r = {
            "nenyax_s": nx_med, "nenyax_best_s": nx_best, "torch_s": pt_med, "torch_best_s": pt_best,
            "speedup": pt_med / nx_med, "bytes_moved": moved, "bytes_per_s": bw,
            "fraction_of_copy": bw / copy_med, "loss_rel_diff": rel, "grad_max_abs_diff": gdiff,
        }
        results["configs"][key] = r
        print(f"{key:8s} nenyax {nx_med * 1e3:8.3f} ms (best {nx_best * 1e3:.3f})  torch eager "
              f"{pt_med * 1e3:8.3f} ms (best {pt_best * 1e3:.3f})  speed-up x{pt_med / nx_med:.1f}  "
              f"{bw / 1e12:.2f} TB/s = {100 * bw / copy_med:.0f}% of copy  "
              f"(loss rel diff {rel:.1e}, grad max diff {gdiff:.1e})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
