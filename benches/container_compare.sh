#!/usr/bin/env bash
# Sandboxes side by side, from one invocation: the container backend against bare Podman and
# against the Python reference's docker backend (driven through Podman), and the process and
# jail WarmPools against the reference's process WarmPool.
#
#   benches/container_compare.sh                 # everything (about 3 minutes after the build)
#   PARTS=pool benches/container_compare.sh      # only the process/jail WarmPool comparison
#   N=20 ROUNDS=3 IMAGE=localhost/debian:bookworm benches/container_compare.sh
#
# Every workload prints one JSON line (workload, n, median_ms, mean_ms, min_ms); both sides
# time each iteration alone after uncounted warm-up iterations. What each loop does is written
# at the top of benches/sandbox_compare.rs (Rust) and benches/python_container.py (reference and
# bare Podman). Raw outputs go to target/container_compare/.
#
# Python: $NENYAX_PYTHON, else .venv/bin/python; it must have the reference package `nenyax`
# (0.1.0a1). The engine is Podman (`podman` on PATH); the image must exist locally
# (`nenyax images bootstrap` makes localhost/nenyax-base:bookworm).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${NENYAX_PYTHON:-.venv/bin/python}
IMAGE=${IMAGE:-localhost/nenyax-base:bookworm}
N=${N:-10}
POOL_N=${POOL_N:-200}
ROUNDS=${ROUNDS:-2}
# Freed inodes slow the next allocations on ext4 without a journal for up to ~35 s (see
# docs/performance.md), so each side of the pool comparison starts after a pause.
PAUSE=${PAUSE:-20}
PARTS=${PARTS:-pool container}
OUT=target/container_compare
mkdir -p "$OUT"
: >"$OUT/results.jsonl"
export NENYAX_CONTAINER_ENGINE=${NENYAX_CONTAINER_ENGINE:-podman}

load() { cut -d' ' -f1-3 /proc/loadavg; }

echo "== machine"
{
    echo "date: $(date -u +%FT%TZ)"
    echo "nproc: $(nproc)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
    echo "kernel: $(uname -r)"
    echo "fs of the temporary directory: $(df -T "${TMPDIR:-/tmp}" | awk 'NR == 2 {print $2}')"
    echo "podman: $(podman --version 2>&1)"
    echo "image: $IMAGE $(podman image inspect --format '{{.Id}}' "$IMAGE" 2>&1 | cut -c1-12)"
    echo "python: $("$PY" --version 2>&1); reference nenyax $("$PY" -c 'import nenyax; print(nenyax.__version__)')"
    echo "load average at start: $(load)"
} | tee "$OUT/machine.txt"

echo
echo "== build: cargo bench --bench sandbox_compare --no-run"
cargo bench -q --bench sandbox_compare --no-run 2>&1 | tail -3
rust() { cargo bench -q --bench sandbox_compare -- "$@" 2>"$OUT/rust.stderr"; }
py() { "$PY" benches/python_container.py "$@"; }
# One tagged JSON line per workload: which round, and the load average when it was printed.
tag() {
    local round=$1
    while IFS= read -r line; do
        [[ $line == \{* ]] || { echo "$line" >&2; continue; }
        line="${line%\}}, \"round\": $round, \"load\": \"$(load)\"}"
        echo "$line" | tee -a "$OUT/results.jsonl"
    done
}

for round in $(seq 1 "$ROUNDS"); do
    if [[ " $PARTS " == *" pool "* ]]; then
        echo
        echo "== round $round: WarmPool acquire, process and jail against the reference's process"
        sleep "$PAUSE"
        py process -n "$POOL_N" | tag "$round"
        sleep "$PAUSE"
        rust pool -n "$POOL_N" | tag "$round"
    fi
    if [[ " $PARTS " == *" container "* ]]; then
        echo
        echo "== round $round: containers ($IMAGE)"
        py bare --image "$IMAGE" -n "$N" | tag "$round"
        rust container --image "$IMAGE" -n "$N" | tag "$round"
        py bare --image "$IMAGE" -n "$N" | tag "$round"
        # The reference's destroy waits 10 s per container under Podman; measured once.
        destroy_n=0
        [[ $round == 1 ]] && destroy_n=2
        py container --image "$IMAGE" -n "$N" --destroy-n "$destroy_n" | tag "$round"
    fi
done
echo "load average at end: $(load)" | tee -a "$OUT/machine.txt"

echo
echo "== side by side (medians, each round apart)"
"$PY" - "$OUT/results.jsonl" <<'EOF' | tee "$OUT/summary.md"
import json, sys
from collections import defaultdict

rounds = defaultdict(lambda: defaultdict(list))
for line in open(sys.argv[1]):
    r = json.loads(line)
    rounds[r["round"]][r["workload"]].append(r)

def med(rs, w, key="median_ms"):
    got = [r[key] for r in rs.get(w, []) if key in r]
    return sum(got) / len(got) if got else None

rows = [
    # (what, ours, theirs, statistic)
    ("container create+exec+destroy vs bare `podman run --rm IMG true`",
     "container/create_exec_destroy", "bare/podman_run_rm_true", "median_ms"),
    ("same, bare with --network=none",
     "container/create_exec_destroy", "bare/podman_run_rm_true_network_none", "median_ms"),
    ("container WarmPool acquire (episode loop) vs our cold create",
     "container/warm_pool_acquire", "container/cold_create", "median_ms"),
    ("container WarmPool acquire (episode loop) vs the reference's",
     "container/warm_pool_acquire", "reference/container/warm_pool_acquire", "median_ms"),
    ("container WarmPool acquire from a full pool vs the reference's",
     "container/warm_pool_acquire_full", "reference/container/warm_pool_acquire_full", "median_ms"),
    ("container cold create vs the reference's",
     "container/cold_create", "reference/container/cold_create", "median_ms"),
    ("container exec `true` vs the reference's",
     "container/exec_true", "reference/container/exec_true", "median_ms"),
    ("container destroy vs the reference's",
     "container/destroy", "reference/container/destroy", "median_ms"),
    ("process WarmPool acquire+drop (median) vs the reference's process",
     "process/warm_pool_acquire", "reference/process/warm_pool_acquire", "median_ms"),
    ("process WarmPool acquire+drop (tight-loop mean) vs the reference's",
     "process/warm_pool_acquire", "reference/process/warm_pool_acquire", "tight_loop_mean_ms"),
    ("jail WarmPool acquire+drop (median) vs the reference's process",
     "jail/warm_pool_acquire", "reference/process/warm_pool_acquire", "median_ms"),
    ("jail WarmPool acquire+drop (tight-loop mean) vs the reference's process",
     "jail/warm_pool_acquire", "reference/process/warm_pool_acquire", "tight_loop_mean_ms"),
]
print("| round | comparison | ours (ms) | theirs (ms) | ours / theirs |")
print("|---|---|---:|---:|---:|")
for rnd in sorted(rounds):
    rs = rounds[rnd]
    for what, ours, theirs, key in rows:
        a, b = med(rs, ours, key), med(rs, theirs, key)
        if a is None or b is None:
            continue
        print(f"| {rnd} | {what} | {a:.4g} | {b:.4g} | {a / b:.3g}x |")
EOF
