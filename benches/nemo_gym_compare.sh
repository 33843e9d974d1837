#!/usr/bin/env bash
# Single-turn NeMo Gym episodes/s through the Rust driver against the Python reference's
# nemo_gym driver (nenyax==0.1.0a1), on the same real resources server (mcqa from nemo-gym
# 0.7.0, started here) with the same data (its shipped example.jsonl) and the same answers
# (each row's expected answer, so the figures are the plumbing's cost, not a model's).
#
#   benches/nemo_gym_compare.sh     # about 3 minutes on 2 cores; needs scripts/setup_nemo_gym.sh
#   REPS=5 EXTRA=2000 benches/nemo_gym_compare.sh   # more runs (median) / more episodes per run
#
# Rust: the marginal rate of `nenyax run`, EXTRA / (time of -n BASE+EXTRA minus time of -n BASE),
# so process start-up and loading are not counted; the reference: a warm-up episode, then a
# timed nenyax.run; each figure is the median of REPS runs. Also the client's CPU time per
# episode (user + system, server excluded): the plumbing's own cost. Per episode, the Rust driver sends /seed_session (with the row), /verify and
# /close_session; the reference sends /seed_session (an empty body) and /verify. The server is
# one uvicorn process on the same 2 cores as the client. Outputs go to target/compare-nemo-gym/.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=target/compare-nemo-gym
mkdir -p "$OUT"
BASE=${BASE:-50}
EXTRA=${EXTRA:-1000}
REPS=${REPS:-3}
S=scripts/nemo_gym_servers.sh
cargo build -q --release --bin nenyax
REF_VENV=.venv-bench-py
if ! "$REF_VENV/bin/python" -c 'import sys, nenyax; sys.exit(nenyax.__version__ != "0.1.0a1")' 2>/dev/null; then
    python3 -m venv --clear "$REF_VENV"
    "$REF_VENV/bin/python" -m pip install -q --disable-pip-version-check nenyax==0.1.0a1
fi
$S start mcqa >/dev/null
trap '$S stop >/dev/null' EXIT
URL=$($S url mcqa)
DATA=$($S data mcqa)
URI="nemo_gym:$URL?data=$DATA"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/summary.txt"

# One timed run: "<wall seconds> <client CPU seconds>".
timed() {
    local t0 t1 cpu
    t0=$(date +%s.%N)
    /usr/bin/time -f '%U %S' -o "$OUT/time.txt" "$@" >/dev/null 2>&1
    cpu=$(tail -n1 "$OUT/time.txt")
    t1=$(date +%s.%N)
    echo "$(echo "$t1 - $t0" | bc -l) $(echo "$cpu" | awk '{ print $1 + $2 }')"
}

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# "<episodes/s> <client CPU ms/episode>" of the Rust driver: the marginal rate over EXTRA
# episodes, the median of REPS runs.
rust_rate() { # concurrency
    local rates=() cpus=() a b
    for _ in $(seq 1 "$REPS"); do
        a=$(timed target/release/nenyax run "$URI" --policy oracle -n "$BASE" --concurrency "$1" --out /dev/null)
        b=$(timed target/release/nenyax run "$URI" --policy oracle -n $((BASE + EXTRA)) --concurrency "$1" --out /dev/null)
        rates+=("$(echo "$EXTRA / (${b%% *} - ${a%% *})" | bc -l)")
        cpus+=("$(echo "1000 * (${b##* } - ${a##* }) / $EXTRA" | bc -l)")
    done
    echo "$(printf '%s\n' "${rates[@]}" | median) $(printf '%s\n' "${cpus[@]}" | median)"
}

py_rate() { # concurrency
    local rates=() cpus=() j
    for _ in $(seq 1 "$REPS"); do
        j=$("$REF_VENV/bin/python" benches/python_nemo_gym.py "$URL" "$DATA" "$EXTRA" "$1" | tail -n1)
        rates+=("$(echo "$j" | python3 -c 'import json,sys; print(json.load(sys.stdin)["episodes_per_s"])')")
        cpus+=("$(echo "$j" | python3 -c 'import json,sys; print(json.load(sys.stdin)["client_cpu_ms_per_episode"])')")
    done
    echo "$(printf '%s\n' "${rates[@]}" | median) $(printf '%s\n' "${cpus[@]}" | median)"
}

echo "| server | concurrency | Rust episodes/s | reference episodes/s | ratio | Rust client CPU ms/episode | reference client CPU ms/episode | ratio |" | tee -a "$OUT/summary.txt"
echo "|---|---|---|---|---|---|---|---|" | tee -a "$OUT/summary.txt"
for c in 1 2 4; do
    read -r r rc <<<"$(rust_rate "$c")"
    read -r p pc <<<"$(py_rate "$c")"
    printf '| mcqa (nemo-gym 0.7.0) | %d | %.0f | %.0f | %.2fx | %.3f | %.3f | %.1fx less |\n' "$c" "$r" "$p" "$(echo "$r / $p" | bc -l)" "$rc" "$pc" "$(echo "$pc / $rc" | bc -l)" | tee -a "$OUT/summary.txt"
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/summary.txt"
