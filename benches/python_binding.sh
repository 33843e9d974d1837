#!/usr/bin/env bash
# The Python binding (nenyax_native) next to the Python reference (nenyax==0.1.0a1), from one
# invocation of benches/python_binding.py in one interpreter.
#
#   benches/python_binding.sh                 # about 10 minutes on 2 cores (the 100,000-rollout rows)
#   RUNS=9 benches/python_binding.sh callback cffi
#
# Python: $NENYAX_BINDING_PYTHON, else .venv-python-binding/bin/python (scripts/test_python.sh
# makes it: the installed wheel, the reference and reasoning-gym). Raw output goes to
# target/compare-python-binding/.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${NENYAX_BINDING_PYTHON:-$PWD/.venv-python-binding/bin/python}
# The bridge's workers run reasoning-gym with the same interpreter.
export NENYAX_PYTHON=$PY
OUT=target/compare-python-binding
mkdir -p "$OUT"

{
    echo "nproc: $(nproc)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
    echo "python: $("$PY" --version 2>&1) ($PY)"
    echo "packages: $("$PY" -c 'import importlib.metadata as m; print(", ".join(f"{p} {m.version(p)}" for p in ("nenyax-native", "nenyax", "reasoning-gym", "cffi", "pydantic", "orjson")))')"
    echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/machine.txt"
awk '{ if ($1 > 0.5) print "warning: load average " $1 " > 0.5; the figures will be noisy" }' /proc/loadavg

# From outside the tree, so the installed wheel is what is measured.
(cd "$OUT" && "$PY" "$OLDPWD/benches/python_binding.py" "$@") | tee "$OUT/results.txt"
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"
