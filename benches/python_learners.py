#!/usr/bin/env python3
"""The policy loss + dL/dlogp from Python: nenyax_native (the C ABI, arrays passed by pointer)
against the same loss written in PyTorch eager, side by side in one run.

    python benches/python_learners.py [--sizes 8x512,64x2048,256x4096] [--runs 21]

Needs nenyax_native, numpy and torch (``pip install ./bindings/python torch``). The loss is DAPO's
(token-level PPO-clip 0.2/0.28, token-mean; pg-math.md 2.1 and 3), one advantage per row.
Computations, each on the same inputs:

- ``nx numpy f64`` / ``nx numpy f32``: ``learners.pg_loss`` on numpy arrays, the gradient
  written into a caller's array (``grad_out``), and ``nx numpy f32 alloc`` allocating it;
- ``nx torch f32``: ``learners.pg_loss`` on CPU tensors;
- ``nx policy_loss f32``: ``learners.policy_loss`` forward + ``backward()`` to a leaf ``logp``,
  which is how a PyTorch trainer uses it;
- ``torch eager f32`` / ``f64``: the loss as TRL's ``_compute_loss`` writes it (exp, clamp, -min,
  masked mean), forward + ``backward()`` to ``logp``.

Each is run once to warm up, then timed ``--runs`` times; the table gives the median and the
ratio of PyTorch eager f32's median to it. The loss values and gradients are checked against
PyTorch eager before timing (the run stops if they differ by more than 1e-5 relative).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np
import torch
from nenyax_native import learners

CONFIG = {"loss": "ppo_clip", "clip_low": 0.2, "clip_high": 0.28, "dual_clip_c": None, "agg": "token-mean"}


def inputs(rows: int, width: int, seed: int = 0):
    """As benches/pg_loss.rs draws them: prefix masks of length in [T/4, T], old and logp close."""
    rng = np.random.default_rng(seed)
    logp = (-np.abs(rng.standard_normal((rows, width))) * 1.5 - 0.01).astype(np.float32)
    old = (logp + rng.normal(0, 0.05, (rows, width))).astype(np.float32)
    lengths = rng.integers(width // 4, width + 1, rows)
    mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.uint8)
    adv = rng.standard_normal(rows).astype(np.float32)
    return logp, old, mask, adv


def eager_loss(logp, old, mask, adv):
    """TRL's _compute_loss, loss_type="dapo", beta 0 (the normaliser computed outside the loss, as TRL does)."""
    coef_1 = torch.exp(logp - old)
    coef_2 = torch.clamp(coef_1, 1 - CONFIG["clip_low"], 1 + CONFIG["clip_high"])
    per_token = -torch.min(coef_1 * adv.unsqueeze(1), coef_2 * adv.unsqueeze(1))
    return (per_token * mask).sum() / mask.sum().clamp(min=1.0)


def eager_step(logp, old, mask, adv):
    leaf = logp.detach().requires_grad_()
    loss = eager_loss(leaf, old, mask, adv)
    loss.backward()
    return loss.detach(), leaf.grad


def policy_loss_step(logp, old, mask, adv):
    leaf = logp.detach().requires_grad_()
    loss = learners.policy_loss(leaf, old, adv, mask, CONFIG)
    loss.backward()
    return loss.detach(), leaf.grad


def timed(runs: int, f):
    f()
    ms = []
    for _ in range(runs):
        t0 = time.perf_counter()
        f()
        ms.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ms), min(ms)


def bench(size: str, runs: int):
    rows, width = (int(x) for x in size.split("x"))
    logp, old, mask, adv = inputs(rows, width)
    t = {k: torch.from_numpy(v) for k, v in dict(logp=logp, old=old, mask=mask, adv=adv).items()}
    t64 = {k: v.double() if v.is_floating_point() else v for k, v in t.items()}
    maskf, maskf64 = t["mask"].float(), t["mask"].double()  # TRL multiplies by a float/int mask
    np64 = [x.astype(np.float64) for x in (logp, old)] + [mask, adv.astype(np.float64)]
    g32, g64 = np.empty_like(logp), np.empty_like(np64[0])

    # Same computation: ours against PyTorch eager, before anything is timed.
    ref_loss, ref_grad = eager_step(t64["logp"], t64["old"], maskf64, t64["adv"])
    checks = {
        "nx numpy f64": learners.pg_loss(np64[0], np64[1], np64[3], mask, config=CONFIG)[:2],
        "nx numpy f32": learners.pg_loss(logp, old, adv, mask, config=CONFIG)[:2],
        "nx torch f32": learners.pg_loss(t["logp"], t["old"], t["adv"], t["mask"], config=CONFIG)[:2],
        "nx policy_loss f32": policy_loss_step(t["logp"], t["old"], t["mask"], t["adv"]),
    }
    scale = float(ref_grad.abs().max())
    worst = 0.0
    for name, (stats, grad) in checks.items():
        loss = stats if isinstance(stats, torch.Tensor) else stats.loss
        grad = torch.as_tensor(np.asarray(grad, dtype=np.float64) if isinstance(grad, np.ndarray) else grad.double())
        dl = abs(float(loss) - float(ref_loss)) / abs(float(ref_loss))
        dg = float((grad - ref_grad).abs().max()) / scale
        worst = max(worst, dl, dg)
        if dl > 1e-5 or dg > 1e-5:
            raise SystemExit(f"{size} {name}: loss off by {dl:.2e}, gradient by {dg:.2e} of the largest")

    cases = {
        "nx numpy f64": lambda: learners.pg_loss(np64[0], np64[1], np64[3], mask, config=CONFIG, grad_out=g64),
        "nx numpy f32": lambda: learners.pg_loss(logp, old, adv, mask, config=CONFIG, grad_out=g32),
        "nx numpy f32 alloc": lambda: learners.pg_loss(logp, old, adv, mask, config=CONFIG),
        "nx torch f32": lambda: learners.pg_loss(t["logp"], t["old"], t["adv"], t["mask"], config=CONFIG),
        "nx policy_loss f32": lambda: policy_loss_step(t["logp"], t["old"], t["mask"], t["adv"]),
        "torch eager f32": lambda: eager_step(t["logp"], t["old"], maskf, t["adv"]),
        "torch eager f64": lambda: eager_step(t64["logp"], t64["old"], maskf64, t64["adv"]),
    }
    results = {name: timed(runs, f) for name, f in cases.items()}
    return {"size": size, "tokens": rows * width, "valid": int(mask.sum()), "max_rel_diff": worst, "ms": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8x512,64x2048,256x4096")
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch intra-op threads")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__} ({torch.get_num_threads()} threads), numpy {np.__version__}, runs {args.runs}")
    out = [bench(size, args.runs) for size in args.sizes.split(",")]
    names = list(out[0]["ms"])
    print("\n| computation | " + " | ".join(r["size"] for r in out) + " |")
    print("|---|" + "---:|" * len(out))
    for name in names:
        cells = []
        for r in out:
            med = r["ms"][name][0]
            ratio = r["ms"]["torch eager f32"][0] / med
            cells.append(f"{med:.3f} ms ({ratio:.1f}x)")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("\nmedian ms (PyTorch eager f32's median over this one); largest difference from eager f64:", ", ".join(f"{r['size']} {r['max_rel_diff']:.1e}" for r in out))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
