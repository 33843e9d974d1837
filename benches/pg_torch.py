#!/usr/bin/env python3
"""The baselines of benches/pg_loss.rs: the policy-gradient loss + gradient as PyTorch eager (the
formula of TRL's ``GRPOTrainer._compute_loss``, forward and ``backward()`` to ``logp``) and as
numpy (forward only; forward + the analytic gradient written out by hand), on the very arrays the
Rust bench wrote to ``OUT/data-BxT.*``.

Configurations (names as in the Rust bench):

- ``a``: token-level PPO-clip 0.2/0.28, token-mean (TRL ``loss_type="dapo"``);
- ``b``: ``a`` + ``beta * k3`` with ``beta = 0.04``;
- ``c``: PPO-clip 0.2/0.2, ``loss_type="grpo"`` (seq-mean-token-mean over all B rows).

As in TRL, the mask is an int32 tensor and the dapo normaliser (``num_items_in_batch``) is
computed outside the loss; the grpo row lengths are computed inside, as TRL does. torch runs with
2 intra-op threads. Each computation is run once to warm up, then timed ``--runs`` times; one
JSON object per line (also in ``OUT/python.jsonl``) with the median and best. The loss values
are checked against ``OUT/rust.jsonl`` and, at the first size, the gradients against
``OUT/grad-CFG-BxT.f32`` (the Rust f32 result).

``--table`` instead joins ``OUT/rust*.jsonl`` and ``OUT/python.jsonl`` into the markdown table
that ``benches/pg_compare.sh`` prints.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

CONFIGS = {
    "a": {"low": 0.2, "high": 0.28, "beta": 0.0, "agg": "dapo"},
    "b": {"low": 0.2, "high": 0.28, "beta": 0.04, "agg": "dapo"},
    "c": {"low": 0.2, "high": 0.2, "beta": 0.0, "agg": "grpo"},
}
DESCRIBE = {
    "a": "PPO-clip 0.2/0.28, token-mean (DAPO)",
    "b": "a + k3 KL, coef 0.04",
    "c": "GRPO (TRL): clip 0.2, seq-mean-token-mean",
}


def load(out: str, size: str):
    b, t = (int(x) for x in size.split("x"))
    p = lambda name: os.path.join(out, f"data-{size}.{name}")  # noqa: E731
    logp = np.fromfile(p("logp.f32"), dtype="<f4").reshape(b, t)
    old = np.fromfile(p("old.f32"), dtype="<f4").reshape(b, t)
    ref = np.fromfile(p("ref.f32"), dtype="<f4").reshape(b, t)
    mask = np.fromfile(p("mask.u8"), dtype=np.uint8).reshape(b, t)
    adv = np.fromfile(p("adv.f32"), dtype="<f4")
    assert adv.shape == (b,), adv.shape
    return logp, old, ref, mask, adv


def timed(runs: int, f):
    last = f()
    ms = []
    for _ in range(runs):
        t0 = time.perf_counter()
        last = f()
        ms.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ms), min(ms), last


# ---------------------------------------------------------------------------------------------
# PyTorch eager, as TRL's _compute_loss (token-level importance sampling, no delta, no vLLM IS
# correction, no entropy), with `old_per_token_logps` given.


def torch_loss(torch, logp, old, ref, mask, adv, num_items, c):
    log_ratio = logp - old
    coef_1 = torch.exp(log_ratio)
    coef_2 = torch.clamp(coef_1, 1 - c["low"], 1 + c["high"])
    per_token_loss1 = coef_1 * adv.unsqueeze(1)
    per_token_loss2 = coef_2 * adv.unsqueeze(1)
    per_token_loss = -torch.min(per_token_loss1, per_token_loss2)
    if c["beta"] != 0.0:
        per_token_kl = torch.exp(ref - logp) - (ref - logp) - 1
        per_token_loss = per_token_loss + c["beta"] * per_token_kl
    if c["agg"] == "grpo":
        return ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    return (per_token_loss * mask).sum() / num_items


# ---------------------------------------------------------------------------------------------
# numpy: the same forward; and forward + dL/dlogp written out (pg-math.md §2.1, §2.4, §3).


def np_weights(maskf, c):
    if c["agg"] == "grpo":
        b = maskf.shape[0]
        return maskf / (np.maximum(maskf.sum(-1), 1.0) * b)[:, None]
    return maskf * np.float32(1.0 / maskf.sum())


def np_forward(logp, old, ref, maskf, adv, c):
    ratio = np.exp(logp - old)
    a = adv[:, None]
    ptl = -np.minimum(ratio * a, np.clip(ratio, 1 - c["low"], 1 + c["high"]) * a)
    if c["beta"] != 0.0:
        x = ref - logp
        ptl += np.float32(c["beta"]) * (np.exp(x) - x - 1)
    if c["agg"] == "grpo":
        return ((ptl * maskf).sum(-1) / np.maximum(maskf.sum(-1), 1.0)).mean()
    return (ptl * maskf).sum() / maskf.sum()


def np_forward_grad(logp, old, ref, maskf, adv, c):
    w = np_weights(maskf, c)
    ratio = np.exp(logp - old)
    a = adv[:, None]
    ptl = -np.minimum(ratio * a, np.clip(ratio, 1 - c["low"], 1 + c["high"]) * a)
    active = ((a > 0) & (ratio <= 1 + c["high"])) | ((a < 0) & (ratio >= 1 - c["low"]))
    grad = np.where(active, -a * ratio, np.float32(0)) * w
    if c["beta"] != 0.0:
        x = ref - logp
        ex = np.exp(x)
        ptl += np.float32(c["beta"]) * (ex - x - 1)
        grad += np.float32(c["beta"]) * w * (1 - ex)
    return (ptl * w).sum(), grad


def run(args) -> None:
    import torch

    torch.set_num_threads(2)
    rust = {}
    with open(os.path.join(args.out, "rust.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r["api"] == "pg_loss_into":
                rust[(r["size"], r["config"], r["dtype"])] = r
    log = open(os.path.join(args.out, "python.jsonl"), "w")
    versions = {"torch": torch.__version__, "numpy": np.__version__, "torch_threads": torch.get_num_threads()}

    def emit(side, api, size, cfg, runs, median, best, loss, extra=None):
        b, t = (int(x) for x in size.split("x"))
        r = rust[(size, cfg, "f32")]
        line = {
            "side": side, "api": api, "dtype": "f32", "config": cfg, "size": size, "runs": runs,
            "median_ms": median, "best_ms": best,
            "ns_per_token": median * 1e6 / (b * t), "best_ns_per_token": best * 1e6 / (b * t),
            "loss": float(loss), "rel_diff_loss_vs_rust_f32": abs(float(loss) - r["loss"]) / abs(r["loss"]),
            "rel_diff_loss_vs_rust_f64": abs(float(loss) - rust[(size, cfg, "f64")]["loss"]) / abs(r["loss"]),
            **versions, **(extra or {}),
        }
        print(json.dumps(line), flush=True)
        log.write(json.dumps(line) + "\n")

    for si, size in enumerate(args.sizes.split(",")):
        logp, old, ref, mask, adv = load(args.out, size)
        maskf = mask.astype(np.float32)
        lp_t, old_t, ref_t, adv_t = (torch.from_numpy(x) for x in (logp, old, ref, adv))
        mask_t = torch.from_numpy(mask.astype(np.int32))  # TRL's completion_mask is .int()
        num_items = mask_t.sum()  # TRL: num_items_in_batch, computed outside the loss
        for cfg in args.configs.split(","):
            c = CONFIGS[cfg]
            leaf = lp_t.clone().requires_grad_(True)

            def fwd_bwd():
                leaf.grad = None
                loss = torch_loss(torch, leaf, old_t, ref_t, mask_t, adv_t, num_items, c)
                loss.backward()
                return loss.detach()

            median, best, loss = timed(args.runs, fwd_bwd)
            extra = {}
            gpath = os.path.join(args.out, f"grad-{cfg}-{size}.f32")
            rust_grad = np.fromfile(gpath, dtype="<f4").reshape(mask.shape) if si == 0 else None
            if rust_grad is not None:
                g = leaf.grad.numpy()
                extra["grad_max_abs_diff_vs_rust_f32_rel"] = float(np.abs(g - rust_grad).max() / np.abs(rust_grad).max())
            emit("torch", "fwd + backward", size, cfg, args.runs, median, best, loss.item(), extra)
            if cfg == "a":
                with torch.no_grad():
                    median, best, loss = timed(
                        args.runs, lambda: torch_loss(torch, lp_t, old_t, ref_t, mask_t, adv_t, num_items, c)
                    )
                emit("torch", "fwd only (no_grad)", size, cfg, args.runs, median, best, loss.item())
            median, best, loss = timed(args.runs, lambda: np_forward(logp, old, ref, maskf, adv, c))
            emit("numpy", "fwd only", size, cfg, args.runs, median, best, loss)
            median, best, (loss, g) = timed(args.runs, lambda: np_forward_grad(logp, old, ref, maskf, adv, c))
            extra = {}
            if rust_grad is not None:
                extra["grad_max_abs_diff_vs_rust_f32_rel"] = float(np.abs(g - rust_grad).max() / np.abs(rust_grad).max())
            emit("numpy", "fwd + manual grad", size, cfg, args.runs, median, best, loss, extra)
            leaf = None  # free this configuration's tensor before the next one
    log.close()


# ---------------------------------------------------------------------------------------------


def table(args) -> None:
    rows = []
    for name in sorted(os.listdir(args.out)):
        if (name.startswith("rust") or name == "python.jsonl") and name.endswith(".jsonl"):
            with open(os.path.join(args.out, name)) as f:
                rows += [json.loads(line) for line in f]

    def base(r):
        return next(
            x for x in rows
            if x["side"] == "nenyax" and x["api"] == "pg_loss_into" and x["dtype"] == "f32"
            and not x.get("label") and x["size"] == r["size"] and x["config"] == r["config"]
        )

    def what(r):
        if r["side"] == "nenyax":
            s = f"Nenyax `{r['api']}::<{r['dtype']}>`"
            if r["api"] == "pg_loss":
                s += " (allocating)"
            return s + f", {r['threads']} thread{'s' if r['threads'] > 1 else ''}"
        return {"torch": "PyTorch eager (TRL formula) ", "numpy": "numpy "}[r["side"]] + r["api"]

    def order(r):
        side = {"nenyax": 0, "torch": 1, "numpy": 2}[r["side"]]
        b, t = (int(x) for x in r["size"].split("x"))
        api = ["pg_loss_into", "pg_loss", "fwd + backward", "fwd only (no_grad)", "fwd only", "fwd + manual grad"]
        return (b * t, r["config"], side, r.get("label", ""), api.index(r["api"]), r["dtype"])

    print("| size | config | computation | median ms | best ms | ns / padded token (median) | "
          "time / Nenyax f32 (median, best) | loss rel. diff vs Nenyax f32 |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for r in sorted(rows, key=order):
        b0 = base(r)
        ratio = f"{r['median_ms'] / b0['median_ms']:.1f}x, {r['best_ms'] / b0['best_ms']:.1f}x"
        diff = abs(r["loss"] - b0["loss"]) / abs(b0["loss"])
        print(f"| {r['size']} | {r['config']} | {what(r)} | {r['median_ms']:.1f} | {r['best_ms']:.1f} | "
              f"{r['ns_per_token']:.1f} | {ratio} | {diff:.1e} |")
    print()
    for r in rows:
        if "grad_max_abs_diff_vs_rust_f32_rel" in r:
            print(f"gradient check {r['size']} {r['config']} {r['side']} {r['api']}: "
                  f"max |g - g_nenyax_f32| / max |g_nenyax_f32| = {r['grad_max_abs_diff_vs_rust_f32_rel']:.1e}")
    bad = [r for r in rows if r["side"] != "nenyax" and abs(r["loss"] - base(r)["loss"]) / abs(base(r)["loss"]) > 1e-5]
    bad += [r for r in rows if r.get("grad_max_abs_diff_vs_rust_f32_rel", 0) > 1e-5]
    if bad:
        print("MISMATCH: these do not agree with Nenyax to 1e-5:", *(what(r) + " " + r["config"] for r in bad), sep="\n  ")
        sys.exit(1)
    print("all losses and gradients agree with Nenyax f32 to 1e-5 (relative)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="target/compare-pg")
    ap.add_argument("--sizes", default="1024x2048,4096x2048")
    ap.add_argument("--configs", default="a,b,c")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--table", action="store_true")
    args = ap.parse_args()
    table(args) if args.table else run(args)


if __name__ == "__main__":
    main()
