#!/usr/bin/env bash
# Rollout throughput of the Rust library next to the Python reference, from one invocation.
#
#   benches/compare.sh              # everything (about 1 minute on 2 cores, after the build)
#   RSS_N=20000 benches/compare.sh  # smaller CLI-equivalent run for the peak-RSS comparison
#
# Python: $NENYAX_PYTHON, else .venv/bin/python, else /tmp/refvenv/bin/python; it must have the
# reference package `nenyax` (0.1.0a1) installed. Raw outputs go to target/compare/.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${NENYAX_PYTHON:-}
if [[ -z "$PY" ]]; then
    if [[ -x .venv/bin/python ]]; then PY=.venv/bin/python; else PY=/tmp/refvenv/bin/python; fi
fi
RSS_N=${RSS_N:-100000}
CONCURRENCY=2
OUT=target/compare
mkdir -p "$OUT"

echo "== machine"
{
    echo "nproc: $(nproc)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
    echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
    echo "rustc: $(rustc --version)"
    echo "python: $("$PY" --version 2>&1) ($PY)"
    echo "reference: nenyax $("$PY" -c 'import nenyax; print(nenyax.__version__)')"
    echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/machine.txt"
# Both sides share the machine's cores: anything else running skews the figures.
awk '{ if ($1 > 0.5) print "warning: load average " $1 " > 0.5; the figures will be noisy" }' /proc/loadavg

echo
echo "== Rust: cargo bench --bench rollout_throughput"
# Fresh estimates (and no "change since last run" noise).
rm -rf target/criterion/rollout target/criterion/chat target/criterion/json
cargo bench -q --bench rollout_throughput -- --noplot 2>&1 | tee "$OUT/criterion.txt" |
    grep -E '^[a-z_]+/[^ ]+ +time:|^ +thrpt:' || true

echo
echo "== Python reference: benches/python_reference.py"
"$PY" benches/python_reference.py | tee "$OUT/python.jsonl"

echo
echo "== peak RSS: $RSS_N rollouts, concurrency $CONCURRENCY, tasks of builtin:arithmetic?size=1000"
cargo build -q --release --bin nenyax
# Peak RSS of a child from getrusage (no /usr/bin/time needed); one child per call.
peak() {
    "$PY" - "$@" <<'EOF'
import json, resource, subprocess, sys, time
t0 = time.perf_counter()
p = subprocess.run(sys.argv[1:], capture_output=True, text=True)
wall = time.perf_counter() - t0
sys.stderr.write(p.stdout + p.stderr)
if p.returncode:
    sys.exit(p.returncode)
kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"cmd": " ".join(sys.argv[1:]), "peak_rss_kib": kib, "wall_s": round(wall, 3)}))
EOF
}
{
    peak target/release/nenyax run 'builtin:arithmetic?size=1000' --policy oracle -n 1 --concurrency "$CONCURRENCY"
    peak target/release/nenyax run 'builtin:arithmetic?size=1000' --policy oracle -n "$RSS_N" --concurrency "$CONCURRENCY"
    peak "$PY" benches/python_reference.py --rss 1 --concurrency "$CONCURRENCY"
    peak "$PY" benches/python_reference.py --rss "$RSS_N" --concurrency "$CONCURRENCY"
} 2>&1 | tee "$OUT/rss.txt"

echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"

echo
echo "== side by side (Rust: criterion's estimate as printed; Python: best of 3)"
"$PY" - "$OUT/python.jsonl" <<'EOF' | tee "$OUT/summary.md"
import glob, json, os, sys

py = {}
for line in open(sys.argv[1]):
    rec = json.loads(line)
    py[rec["workload"]] = rec
rust = {}
for path in glob.glob("target/criterion/**/new/benchmark.json", recursive=True):
    bench = json.load(open(path))
    est = json.load(open(os.path.join(os.path.dirname(path), "estimates.json")))
    ns = (est.get("slope") or est["mean"])["point_estimate"]
    elements = bench["throughput"]["Elements"]
    rust[bench["full_id"]] = elements / (ns * 1e-9)
order = [w for w in py if w in rust] + sorted(set(rust) - set(py))
print("| workload | Rust /s | Python /s (best of 3) | Python /s (median of 3) | Rust / Python best |")
print("|---|---:|---:|---:|---:|")
for w in order:
    r = rust.get(w)
    p, pm = py.get(w, {}).get("rollouts_per_s"), py.get(w, {}).get("median_rollouts_per_s")
    ratio = f"{r / p:.1f}x" if r and p else "n/a"
    fmt = lambda x: f"{x:,.0f}" if x else "n/a"
    print(f"| {w} | {fmt(r)} | {fmt(p)} | {fmt(pm)} | {ratio} |")
EOF
