#!/usr/bin/env bash
# The GPU check of the learners' CUDA kernels, in one run on a machine with an NVIDIA GPU:
#   1. the golden cases of pg-golden.json through the fused kernels, f64 and f32 (Rust test
#      binary), and through the C header (C test);
#   2. benches/pg_cuda.py: the fused kernel against the PyTorch-eager formula on the same tensors
#      at 64M tokens, and the achieved memory bandwidth as a fraction of the device's measured
#      copy bandwidth;
#   3. the tiny-transformer example (scripts/tiny_lm.sh, CUDA=1): built here against python3's
#      torch, it trains with the model on the GPU and the loss through the CUDA entry point on
#      torch's stream; its log goes to $OUT/tiny_lm.txt and its summary to $OUT/tiny_lm.json.
# Results go to $OUT (default target/gpu-check). With cargo available it builds first
# (scripts/gpu_kit.sh); without, it uses a kit built elsewhere: scripts/gpu_check.sh <kit dir>.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
kit="${1:-target/gpu-kit}"
OUT="${OUT:-target/gpu-check}"
mkdir -p "$OUT"
if [ ! -e "$kit/libnenyax.so" ]; then
    command -v cargo >/dev/null || { echo "no kit at $kit and no cargo to build one" >&2; exit 2; }
    scripts/gpu_kit.sh
fi
status=0
{
    echo "date: $(date -u +%FT%TZ)"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.memory --format=csv,noheader || true
} | tee "$OUT/device.txt"
echo "== golden cases on the device (Rust)" | tee "$OUT/golden.txt"
"$kit/pg_golden" --nocapture --test-threads 1 2>&1 | tee -a "$OUT/golden.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
grep -q "GPU part skipped" "$OUT/golden.txt" && { echo "the GPU was not used" | tee -a "$OUT/golden.txt"; status=1; }
echo "== golden cases on the device (C header)" | tee -a "$OUT/golden.txt"
LD_LIBRARY_PATH="$kit" "$kit/test_pg_golden" 2>&1 | grep -v '^  ok ' | tee -a "$OUT/golden.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
echo "== fused kernel against PyTorch eager" | tee "$OUT/bench.txt"
python3 benches/pg_cuda.py --lib "$kit/libnenyax.so" --json "$OUT/bench.json" 2>&1 | tee -a "$OUT/bench.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
echo "== tiny_lm --cuda (the transformer example, loss on the GPU)" | tee "$OUT/tiny_lm.txt"
if python3 -c 'import torch' 2>/dev/null && command -v cmake >/dev/null; then
    # Its own files go beside $OUT, which keeps one summary: few files come back from a lent
    # GPU machine.
    tiny_out=target/gpu-check-tiny-lm
    OUT="$tiny_out" CUDA=1 TORCH_PYTHON=python3 NENYAX_LIB_DIR="$kit" scripts/tiny_lm.sh 2>&1 |
        tee -a "$OUT/tiny_lm.txt"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    cp "$tiny_out/summary.json" "$OUT/tiny_lm.json" 2>/dev/null || status=1
else
    echo "not run: needs python3 with torch, and cmake" | tee -a "$OUT/tiny_lm.txt"
    status=1
fi
echo "gpu_check: status $status; results in $OUT"
exit $status
