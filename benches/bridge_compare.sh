#!/usr/bin/env bash
# The Python bridge next to its alternatives, from one invocation: the Rust bench
# (benches/bridge_throughput.rs) and the Python peers (benches/python_bridge.py: the bare
# Gymnasium loop in process, and the Python reference nenyax==0.1.0a1).
#
#   benches/bridge_compare.sh                         # about 6 minutes on 2 cores, after the build
#   NENYAX_BRIDGE_SPIN_US=0 benches/bridge_compare.sh # the bridge without polling
#
# Python: $NENYAX_PYTHON, else .venv/bin/python (scripts/test.sh makes it); it needs nenyax
# 0.1.0a1, gymnasium and reasoning-gym. Raw outputs go to target/compare-bridge/.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${NENYAX_PYTHON:-$PWD/.venv/bin/python}
export NENYAX_PYTHON=$PY
OUT=target/compare-bridge
mkdir -p "$OUT"

echo "== machine"
{
    echo "nproc: $(nproc)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
    echo "rustc: $(rustc --version)"
    echo "python: $("$PY" --version 2>&1) ($PY)"
    echo "packages: $("$PY" -c 'import importlib.metadata as m; print(", ".join(f"{p} {m.version(p)}" for p in ("nenyax", "gymnasium", "reasoning-gym", "numpy")))')"
    echo "NENYAX_BRIDGE_SPIN_US: ${NENYAX_BRIDGE_SPIN_US:-default (200)}"
    echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/machine.txt"
awk '{ if ($1 > 0.5) print "warning: load average " $1 " > 0.5; the figures will be noisy" }' /proc/loadavg

echo
echo "== Rust: cargo bench --bench bridge_throughput"
cargo bench -q --bench bridge_throughput | tee "$OUT/rust.jsonl"

echo
echo "== Python: benches/python_bridge.py"
"$PY" benches/python_bridge.py | tee "$OUT/python.jsonl"
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"

echo
echo "== side by side (5 timed runs each)"
"$PY" - "$OUT/rust.jsonl" "$OUT/python.jsonl" <<'EOF' | tee "$OUT/summary.md"
import json, sys

rust = {r["workload"]: r for r in map(json.loads, open(sys.argv[1]))}
py = {(r["side"], r["workload"]): r for r in map(json.loads, open(sys.argv[2]))}
fmt = lambda x: f"{x:,.0f}"

blocking = rust["pipe/json_round_trip/blocking"]["median_us"]
polling = rust["pipe/json_round_trip/polling"]["median_us"]
bridge = rust["cartpole/step"]["median_us"]
inproc = py[("python-inprocess", "cartpole/step")]["median_us"]
overhead = bridge - inproc
print("| per CartPole step (median of the per-run medians) | us |")
print("|---|---:|")
print(f"| bare JSON round trip over a pipe, both ends sleeping in `read` | {blocking:.1f} |")
print(f"| bare JSON round trip over a pipe, both ends polling as the bridge does | {polling:.1f} |")
print(f"| `env.step` in process (Python, bare Gymnasium) | {inproc:.1f} |")
print(f"| `Episode::act` through the bridge | {bridge:.1f} |")
print(f"| bridge overhead = act - in-process step | {overhead:.1f} |")
print(f"| overhead / polling round trip | {overhead / polling:.2f}x |")
print()
print("| workload | unit | Rust best | Rust median | reference best | reference median | Rust / reference (best, median) |")
print("|---|---|---:|---:|---:|---:|---:|")
for w, r in rust.items():
    ref = py.get(("python-reference", w))
    if ref is None:
        continue
    print(f"| {w} | {r['unit']} | {fmt(r['best'])} | {fmt(r['median'])} | {fmt(ref['best'])} | {fmt(ref['median'])} "
          f"| {r['best'] / ref['best']:.2f}x, {r['median'] / ref['median']:.2f}x |")
print()
print("| scaling, runner/2 over runner/1 (medians) | Rust (bridge) | Python reference |")
print("|---|---:|---:|")
for env in ("cartpole", "reasoning_gym"):
    r = rust[f"{env}/runner/2"]["median"] / rust[f"{env}/runner/1"]["median"]
    p = py[("python-reference", f"{env}/runner/2")]["median"] / py[("python-reference", f"{env}/runner/1")]["median"]
    print(f"| {env} | {r:.2f}x | {p:.2f}x |")
EOF
