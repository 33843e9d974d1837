#!/usr/bin/env bash
# Verifiers rollouts/s through the Rust library against the Python reference (nenyax==0.1.0a1,
# which starts its recording proxy once per rollout), on the test environment of
# tests/verifiers_envs, with the reference answer as the model (a lookup, so the figures are the
# plumbing's cost, not a model's).
#
#   benches/verifiers_compare.sh     # about 4 minutes on 2 cores; needs scripts/setup_verifiers.sh
#
# Rust: the marginal rate of `nenyax run`, 200 / (time of -n N+200 minus time of -n N), so that
# interpreter start-up and the import of verifiers in each worker are not counted; the same for
# the reference (its warm-up rollout, then a timed nenyax.run). Outputs go to
# target/compare-verifiers/.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=target/compare-verifiers
mkdir -p "$OUT"
cargo build -q --release --bin nenyax
ENVS="$PWD/tests/verifiers_envs"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/summary.txt"

secs() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null 2>&1; t1=$(date +%s.%N); echo "$t1 - $t0" | bc -l; }

rust_rate() { # version env base extra concurrency
    local py="$PWD/.venv-verifiers-$1/bin/python" uri="verifiers:$2?path=$ENVS&python=$PWD/.venv-verifiers-$1/bin/python&workers=$5"
    local a b
    a=$(secs target/release/nenyax run "$uri" --policy oracle -n "$3" --concurrency "$5" --out /dev/null)
    b=$(secs target/release/nenyax run "$uri" --policy oracle -n $(($3 + $4)) --concurrency "$5" --out /dev/null)
    echo "$4 / ($b - $a)" | bc -l
}

for spec in "0.3.1 nx-arith-v0 20 200" "0.4.0 nx_arith 4 12"; do
    set -- $spec
    version=$1 env=$2 base=$3 extra=$4
    # The reference needs to be in the same venv as verifiers.
    py="$PWD/.venv-verifiers-$version/bin/python"
    "$py" -c 'import nenyax' 2>/dev/null || "$py" -m pip install -q --disable-pip-version-check nenyax==0.1.0a1
    for c in 1 2; do
        r=$(rust_rate "$version" "$env" "$base" "$extra" "$c")
        if p=$(PYTHONPATH="$ENVS" PATH="$(dirname "$py"):$PATH" "$py" benches/python_verifiers.py "$env" "$extra" "$c" 2>"$OUT/reference-$version-$c.err" | tail -n1) && [ -n "$p" ]; then
            pr=$(echo "$p" | "$py" -c 'import json,sys; print(json.load(sys.stdin)["rollouts_per_s"])')
            printf '| verifiers %s %s | %d | %.2f | %.2f | %.1fx |\n' "$version" "$env" "$c" "$r" "$pr" "$(echo "$r / $pr" | bc -l)" | tee -a "$OUT/summary.txt"
        else
            # The reference cannot run this environment: say how it failed.
            why=$(tail -n1 "$OUT/reference-$version-$c.err")
            printf '| verifiers %s %s | %d | %.2f | fails: %s | n/a |\n' "$version" "$env" "$c" "$r" "$why" | tee -a "$OUT/summary.txt"
        fi
    done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/summary.txt"
