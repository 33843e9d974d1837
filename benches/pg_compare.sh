#!/usr/bin/env bash
# The fused policy-gradient loss + gradient of Nenyax (benches/pg_loss.rs) against the PyTorch-eager
# formula of TRL's GRPOTrainer._compute_loss (forward + backward to logp) and numpy, on the same
# arrays, from one invocation (issue 6).
#
#   benches/pg_compare.sh                             # about 4 minutes on 2 cores, after the build
#   SIZES=1024x2048 RUNS=5 benches/pg_compare.sh      # smaller
#
# Sets up .venv-bench-torch (torch + numpy; the CPU wheel index first, else PyPI) if missing.
# The Rust bench generates the inputs (SplitMix64, fixed seed) and writes them to target/compare-pg/;
# benches/pg_torch.py reads them with np.fromfile, so both sides time the same computation, and
# it checks every loss value and (at the first size) every gradient against Nenyax's to 1e-5.
# Each computation: one warm-up, then RUNS timed runs; median and best are reported. Outputs:
# target/compare-pg/{rust.jsonl,rust-1thread.jsonl,python.jsonl,summary.md}.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=target/compare-pg
SIZES=${SIZES:-1024x2048,4096x2048}
RUNS=${RUNS:-7}
VENV=.venv-bench-torch
PY=$VENV/bin/python
mkdir -p "$OUT"

if ! "$PY" -c 'import torch, numpy' 2>/dev/null; then
    echo "== setting up $VENV (torch, numpy)"
    python3 -m venv "$VENV"
    "$PY" -m pip install -q --disable-pip-version-check --upgrade pip
    # The CPU-only wheels are a fraction of the size; the index may be unreachable from here.
    "$PY" -m pip install -q --disable-pip-version-check --retries 0 --timeout 15 \
        --index-url https://download.pytorch.org/whl/cpu torch numpy 2>/dev/null ||
        "$PY" -m pip install -q --disable-pip-version-check torch numpy
fi

echo "== machine"
{
    echo "nproc: $(nproc)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
    echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
    echo "rustc: $(rustc --version)"
    echo "python: $("$PY" --version 2>&1), $("$PY" -c 'import torch, numpy; print("torch", torch.__version__, "numpy", numpy.__version__)')"
    echo "sizes: $SIZES, runs: $RUNS (after one warm-up)"
    echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/machine.txt"
awk '{ if ($1 > 0.5) print "warning: load average " $1 " > 0.5; the figures will be noisy" }' /proc/loadavg

echo
echo "== Nenyax: cargo bench --bench pg_loss -- --bench (rayon over rows, all cores)"
cargo bench -q --bench pg_loss --no-run
cargo bench -q --bench pg_loss -- --bench --sizes "$SIZES" --runs "$RUNS" --out "$OUT"
echo "== Nenyax, one thread (RAYON_NUM_THREADS=1), config a"
RAYON_NUM_THREADS=1 cargo bench -q --bench pg_loss -- --bench --sizes "$SIZES" --runs "$RUNS" \
    --out "$OUT" --configs a --label 1thread

echo
echo "== PyTorch eager (2 threads) and numpy: benches/pg_torch.py"
"$PY" benches/pg_torch.py --out "$OUT" --sizes "$SIZES" --runs "$RUNS"

echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"
echo
echo "== summary ($OUT/summary.md)"
{
    cat "$OUT/machine.txt"
    echo
    echo "configs: a = PPO-clip 0.2/0.28, token-mean (DAPO); b = a + k3 KL coef 0.04 (ref_logp);"
    echo "c = GRPO as TRL: clip 0.2/0.2, seq-mean-token-mean over all rows"
    echo
    "$PY" benches/pg_torch.py --out "$OUT" --table
} | tee "$OUT/summary.md"
