#!/usr/bin/env bash
# The tiny-transformer demonstration (bindings/cpp/examples/tiny_lm.cpp): a causal language model
# trained from scratch in libtorch learns builtin:digits through Nenyax's runner, advantages and
# loss kernels. Sets up torch, builds libnenyax and the example, runs it, and writes the learning
# curve. Not part of CI (torch is a multi-GB download).
#
#   scripts/tiny_lm.sh                        # CPU, the documented run (about 10 minutes on 2 cores)
#   scripts/tiny_lm.sh --rounds 20            # any tiny_lm option is passed on (tiny_lm --help)
#   DOCS=1 scripts/tiny_lm.sh                 # also copy the curve to docs/learning/tiny-lm.svg
#   CUDA=1 TORCH_PYTHON=python3 scripts/tiny_lm.sh   # on a GPU machine whose python3 has torch
#
# Environment:
#   TORCH_PYTHON  an interpreter with torch to build against (default: .venv-torch/bin/python,
#                 created from PyPI's `torch` wheel when missing)
#   NENYAX_LIB_DIR  a directory with a prebuilt libnenyax.so (e.g. target/gpu-kit); default:
#                 `cargo build --release -p nenyax-ffi` and target/release
#   OUT           results (default target/tiny-lm, or target/tiny-lm-cuda with CUDA=1)
#   CUDA=1        the model on the GPU and the loss through the CUDA entry point
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD

if [ -n "${TORCH_PYTHON:-}" ]; then
    py=$TORCH_PYTHON
    "$py" -c 'import torch' || { echo "TORCH_PYTHON=$py has no torch" >&2; exit 2; }
else
    venv=.venv-torch
    py=$venv/bin/python
    if ! "$py" -c 'import torch' 2>/dev/null; then
        echo "== setting up $venv (torch from PyPI: a few GB, several minutes)"
        python3 -m venv "$venv"
        "$py" -m pip install -q --disable-pip-version-check --upgrade pip
        "$py" -m pip install -q --disable-pip-version-check torch
    fi
    # The wheel's CUDA runtime headers include crt/, which NVIDIA ships as its own wheel; only
    # the --cuda path needs it (c10's CUDA stream API). Matched to the installed runtime.
    cudart=$("$py" -c 'import importlib.metadata as m; print(m.version("nvidia-cuda-runtime"))' 2>/dev/null || true)
    if [ -n "$cudart" ] && ! "$py" -c 'import importlib.metadata as m; m.version("nvidia-cuda-crt")' 2>/dev/null; then
        "$py" -m pip install -q --disable-pip-version-check "nvidia-cuda-crt==$cudart" ||
            echo "note: no nvidia-cuda-crt==$cudart; tiny_lm is built without --cuda"
    fi
fi

# CMake runs the interpreter from its build directory: give it an absolute path.
case $py in */*) py=$(cd "$(dirname "$py")" && pwd)/$(basename "$py") ;; *) py=$(command -v "$py") ;; esac

if [ -n "${NENYAX_LIB_DIR:-}" ]; then
    lib_dir=$(cd "$NENYAX_LIB_DIR" && pwd)
else
    echo "== cargo build --release -p nenyax-ffi"
    cargo build -q --release -p nenyax-ffi
    lib_dir=$root/target/release
fi

build=target/tiny-lm-build
echo "== cmake: tiny_lm against $("$py" -c 'import torch; print("torch", torch.__version__)')"
cmake -S bindings/cpp -B "$build" -DCMAKE_BUILD_TYPE=Release -DNENYAX_WITH_TORCH=ON \
    -DNENYAX_TORCH_PYTHON="$py" -DNENYAX_LIB_DIR="$lib_dir" >/dev/null
cmake --build "$build" --target tiny_lm --parallel "$(nproc 2>/dev/null || echo 2)"

args=()
if [ "${CUDA:-0}" = 1 ]; then
    args+=(--cuda)
    out=${OUT:-target/tiny-lm-cuda}
else
    out=${OUT:-target/tiny-lm}
fi
mkdir -p "$out"
{
    echo "date: $(date -u +%FT%TZ)"
    echo "nproc: $(nproc)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
    echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "command: $build/tiny_lm ${args[*]} --out $out $*"
} | tee "$out/machine.txt"
echo "== tiny_lm"
"$build/tiny_lm" "${args[@]}" --out "$out" "$@" 2>&1 | tee "$out/log.txt"
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/machine.txt"
if [ "${DOCS:-0}" = 1 ]; then
    mkdir -p docs/learning && cp "$out/curve.svg" docs/learning/tiny-lm.svg
    echo "copied the curve to docs/learning/tiny-lm.svg"
fi
echo "== results in $out (summary.json, curve.csv, curve.svg, log.txt)"
