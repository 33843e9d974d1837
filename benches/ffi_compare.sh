#!/usr/bin/env bash
# The C ABI's overhead: the same batches of rollouts through libnenyax (benches/ffi_overhead.c)
# and in Rust (benches/rollout_throughput.rs), side by side, from one invocation.
#
#   benches/ffi_compare.sh            # about 2 minutes on 2 cores once built
#   REPS=20 benches/ffi_compare.sh    # more timed repetitions per C workload (default 10)
#   FFI_LIB_DIR=/path benches/ffi_compare.sh   # the C side against another libnenyax build
#
# Order: C bench (run 1), Rust criterion bench, C bench (run 2); the two C runs bracket the Rust
# one so that drift in the machine's load shows up as a difference between them. Raw outputs go
# to target/ffi-compare/. Needs cargo, a C compiler (cc) and python3 (stdlib only, for the table).
set -euo pipefail
cd "$(dirname "$0")/.."

REPS=${REPS:-10}
LIB_DIR=${FFI_LIB_DIR:-$PWD/target/release}
OUT=target/ffi-compare
mkdir -p "$OUT"
CC=${CC:-cc}

snapshot() {
    echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    if [[ -r /proc/pressure/cpu ]]; then
        echo "cpu pressure: $(head -1 /proc/pressure/cpu)"
    fi
    echo "top CPU users (ps, lifetime %CPU):"
    ps -eo pcpu=,etime=,comm= --sort=-pcpu | head -5 | sed 's/^/    /'
}

echo "== machine"
{
    echo "nproc: $(nproc)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
    echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
    echo "rustc: $(rustc --version)"
    echo "cc: $("$CC" --version | head -1)"
    echo "C side linked against: ${FFI_LIB_DIR:-target/release (this checkout)}"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- core ffi 2>/dev/null || echo ' (core/ or ffi/ modified)')"
    echo "-- at start"
    snapshot
} | tee "$OUT/machine.txt"

echo
echo "== build: cargo build --release -p nenyax-ffi; $CC -O2 benches/ffi_overhead.c (library: $LIB_DIR)"
if [[ -z "${FFI_LIB_DIR:-}" ]]; then
    cargo build -q --release -p nenyax-ffi
fi
"$CC" -O2 -std=c11 -Wall -Wextra -Werror -Iinclude benches/ffi_overhead.c \
    -L"$LIB_DIR" -lnenyax -lpthread -Wl,-rpath,"$LIB_DIR" -o "$OUT/ffi_overhead"
# Build the Rust bench before timing anything, so that the C runs do not share the CPUs with it.
cargo bench -q --bench rollout_throughput --no-run 2>&1 | grep -v '^ *Executable' || true

# The Rust figures used: rollout/runner/T and rollout/serial_loop (the figures of
# docs/performance.md: no JSON, jobs planned and trajectories dropped outside the timed region),
# json/to_json/action (the serialisation only the C path does), and ffi_equivalent/* (the C
# path's whole work done in Rust: planning, to_json, dropping each trajectory as it arrives).
FILTER='rollout/(runner|serial_loop)|json/to_json/action|ffi_equivalent'

# Foreign CPU users during the timed part: every second, processes above 20% CPU (ps's lifetime
# average, so a busy newcomer shows at once) that are not this comparison's own.
sampler() {
    while :; do
        ps -eo pcpu=,pid=,comm= --sort=-pcpu | head -8 |
            awk '$1 > 20 && $3 !~ /^(ffi_overhead|rollout_through|cargo|ps|awk|python3)/ {print strftime("%T"), $0}'
        sleep 1
    done
}
sampler > "$OUT/foreign.txt" 2>/dev/null &
SAMPLER=$!
trap 'kill "$SAMPLER" 2>/dev/null || true' EXIT

phase() { echo "$(date +%T) $*" >> "$OUT/phases.txt"; }
: > "$OUT/phases.txt"

echo
echo "== C ABI, run 1: $OUT/ffi_overhead $REPS"
phase "C run 1 starts"
"$OUT/ffi_overhead" "$REPS" | tee "$OUT/ffi_run1.jsonl"

phase "C run 1 ends"
echo
echo "== Rust: cargo bench --bench rollout_throughput -- --noplot '$FILTER'"
rm -rf target/criterion/rollout target/criterion/json target/criterion/ffi_equivalent
cargo bench -q --bench rollout_throughput -- --noplot "$FILTER" 2>&1 | tee "$OUT/criterion.txt" |
    grep -E '^[a-z_]+/[^ ]+ +time:|^ +thrpt:|^[a-z_/0-9]+$' || true

phase "Rust bench ends"
echo
echo "== C ABI, run 2: $OUT/ffi_overhead $REPS"
"$OUT/ffi_overhead" "$REPS" | tee "$OUT/ffi_run2.jsonl"

phase "C run 2 ends"
kill "$SAMPLER" 2>/dev/null || true
{
    echo "-- phases"
    cat "$OUT/phases.txt"
    echo "-- at end"
    snapshot
    if [[ -s "$OUT/foreign.txt" ]]; then
        echo "foreign CPU users seen during the timed runs (see $OUT/foreign.txt):"
        awk '{n[$4]++; if ($2 > m[$4]) m[$4] = $2} END {for (c in n) printf "    %s: %d samples, up to %s%% CPU\n", c, n[c], m[c]}' "$OUT/foreign.txt"
    else
        echo "foreign CPU users seen during the timed runs: none above 20%"
    fi
} | tee -a "$OUT/machine.txt"

echo
echo "== side by side"
python3 - "$OUT" "$FILTER" <<'PY' | tee "$OUT/summary.md"
import glob, json, os, re, sys

out, wanted = sys.argv[1], re.compile(sys.argv[2])

def load(path):
    recs = {}
    for line in open(path):
        r = json.loads(line)
        recs[r["workload"]] = r
    return recs

c1, c2 = load(f"{out}/ffi_run1.jsonl"), load(f"{out}/ffi_run2.jsonl")

rust, rust_ci = {}, {}
for path in glob.glob("target/criterion/**/new/benchmark.json", recursive=True):
    bench = json.load(open(path))
    if not wanted.search(bench["full_id"]):
        continue  # older results of other groups
    est = json.load(open(os.path.join(os.path.dirname(path), "estimates.json")))
    e = est.get("slope") or est["mean"]
    elements = bench["throughput"]["Elements"]
    rate = lambda ns: elements / (ns * 1e-9)
    rust[bench["full_id"]] = rate(e["point_estimate"])
    ci = e["confidence_interval"]
    rust_ci[bench["full_id"]] = (rate(ci["upper_bound"]), rate(ci["lower_bound"]))

def same_work(name, threads):
    """The Rust benchmark doing what a C workload does, minus the C boundary."""
    if name.startswith("ffi/rollout_loop/"):
        return "ffi_equivalent/serial_json"
    return f"ffi_equivalent/runner_json/{threads}"

us = lambda rate: 1e6 / rate
fmt = lambda x: f"{x:,.0f}" if x else "n/a"
reps = next(r["reps"] for k, r in c1.items() if k != "plan_proxy")
print(f"Rust: criterion's estimate (slope). C: median of {reps} timed batches of 1000, "
      "run 1 / run 2 (before and after the Rust bench).")
to_json = rust.get("json/to_json/action")
if to_json:
    print(f"json/to_json/action (Rust): {fmt(to_json)} trajectories/s = {us(to_json):.2f} us per "
          "trajectory, the serialisation the C path does for every rollout and rollout/* does not.")
plan = c1.get("plan_proxy", {}).get("median_us_per_task")
if plan is not None:
    print(f"plan_proxy (C): nenyax_env_tasks(env, 1000) = {plan:.2f} us per task, an upper bound "
          "on the planning the C path times and rollout/* does not.")
print()
print("| Rust benchmark | rollouts/s | 95% CI |")
print("|---|---:|---|")
for k in sorted(rust):
    lo, hi = rust_ci[k]
    print(f"| {k} | {fmt(rust[k])} | {fmt(lo)} - {fmt(hi)} |")
print()
print("A: overhead per rollout against the Rust figure of docs/performance.md, "
      "1e6/rate_C - 1e6/rate_Rust (us).")
print("B: the same against Rust doing the same work (ffi_equivalent/*): the C boundary alone (us).")
print()
print("| C workload | C rollouts/s (run 1 / run 2) | Rust counterpart | A | same work in Rust | B |")
print("|---|---:|---|---:|---|---:|")
for name, r in c1.items():
    if "median_rollouts_per_s" not in r:
        continue  # plan_proxy and the pair, shown below
    a, b = r["median_rollouts_per_s"], c2.get(name, {}).get("median_rollouts_per_s")
    eq, sw = r["rust_equivalent"], same_work(name, r["threads"])

    def over(ref):
        if ref not in rust:
            return "n/a"
        return " / ".join(f"{us(x) - us(rust[ref]):.2f}" for x in (a, b) if x)

    print(f"| {name} | {fmt(a)} / {fmt(b)} | {eq} ({fmt(rust.get(eq))}/s) | {over(eq)} "
          f"| {sw} ({fmt(rust.get(sw))}/s) | {over(sw)} |")
print()
for run, recs in (("run 1", c1), ("run 2", c2)):
    p = recs.get("ffi/rollout_loop/pair")
    if p:
        print(f"ffi/rollout_loop/pair ({run}, interleaved): not thread-safe "
              f"{fmt(p['callback_median_rollouts_per_s'])}/s, NENYAX_THREAD_SAFE "
              f"{fmt(p['callback_ts_median_rollouts_per_s'])}/s, time ratio "
              f"{p['time_ratio_callback_over_ts']:.2f}")
PY
