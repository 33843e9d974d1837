#!/usr/bin/env bash
# The Go driver (examples/plugins/driver-go) as an executable and as an in-process library,
# next to the Python bridge's reasoning_gym on a task of the same shape: one text step per
# episode, graded exactly, run by `nenyax run --policy oracle` (rollouts/s, best and median of 5
# runs of 2000 episodes). Without the Python venv the reasoning_gym rows are left out.
#
#   benches/external_driver_compare.sh          # release build, then about a minute
#
# Python: $NENYAX_PYTHON, else .venv/bin/python (scripts/test.sh makes it, with reasoning-gym).
# Go: `go` on PATH. Raw outputs go to target/compare-external/.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${NENYAX_PYTHON:-$PWD/.venv/bin/python}
export NENYAX_PYTHON=$PY
OUT=target/compare-external
mkdir -p "$OUT/bin"

cargo build -q --release --bin nenyax
(cd examples/plugins/driver-go && GOTOOLCHAIN=local go build -o "../../../$OUT/bin/nenyax-driver-gosums" .)
(cd examples/plugins/driver-go && GOTOOLCHAIN=local go build -buildmode=c-shared -tags nenyax_lib -o "../../../$OUT/libgosums.so" .)
printf '[[plugin]]\nname = "gosums"\nkind = "driver"\nscheme = "gosums_inproc"\nlibrary = "libgosums.so"\n' >"$OUT/plugins.toml"
export NENYAX_PLUGINS="$PWD/$OUT/plugins.toml"
export PATH="$PWD/$OUT/bin:$PATH"
uris=("gosums:sums" "gosums_inproc:sums")
if [ -x "$PY" ]; then uris+=("reasoning_gym:basic_arithmetic"); fi
NENYAX=target/release/nenyax

echo "nproc: $(nproc); load average: $(cut -d' ' -f1-3 /proc/loadavg); $(go version); $("$PY" --version 2>&1)"
for threads in 1 2; do
    for base in "${uris[@]}"; do
        uri="$base?size=2000&workers=$threads"
        rates=()
        "$NENYAX" run "$uri" --policy oracle -n 200 --concurrency "$threads" >/dev/null # warm-up
        for _ in 1 2 3 4 5; do
            line=$("$NENYAX" run "$uri" --policy oracle -n 2000 --concurrency "$threads")
            echo "$line" >>"$OUT/runs.txt"
            rates+=("$(sed -E 's/.* ([0-9]+) rollouts\/s.*/\1/' <<<"$line")")
        done
        sorted=$(printf '%s\n' "${rates[@]}" | sort -n)
        printf '{"workload": "%s", "threads": %d, "unit": "rollouts/s", "best": %s, "median": %s}\n' \
            "${uri%%\?*}" "$threads" "$(tail -1 <<<"$sorted")" "$(sed -n 3p <<<"$sorted")"
    done
done | tee "$OUT/results.jsonl"
