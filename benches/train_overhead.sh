#!/usr/bin/env bash
# The training loop's own overhead: per round, everything but the rollouts, the held-out
# evaluation and the trainer's own calls (its forward/backward and optimiser), as a fraction of
# the round's wall time, on the two demonstrations where it matters most:
#   - `nenyax train gymnasium:CartPole-v1 --learner grpo` (the built-in softmax policy; the
#     environment runs in Python behind the bridge);
#   - bindings/cpp/examples/guess_trainer.cpp (a C++ trainer through the trainer vtable on the
#     in-process builtin:guess, rounds of about 10 ms: the harshest case for the loop).
# Release builds. Each run's report gives every round's phase times (report.json `times`).
#
#   benches/train_overhead.sh            # CartPole once, the C++ demo 5 times (about 1 minute)
#
# Python: $NENYAX_PYTHON, else .venv/bin/python (with gymnasium==1.4.0). Outputs: target/compare/.
set -euo pipefail
cd "$(dirname "$0")/.."
export NENYAX_PYTHON=${NENYAX_PYTHON:-$PWD/.venv/bin/python}
OUT=target/compare/train_overhead
RUNS=${RUNS:-5}
mkdir -p "$OUT"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
cargo build -q --release
cargo build -q --release -p nenyax-ffi
cmake -S bindings/cpp -B target/cpp-release -DCMAKE_BUILD_TYPE=Release \
    -DNENYAX_LIB_DIR="$PWD/target/release" >/dev/null
cmake --build target/cpp-release --target example_guess_trainer >/dev/null
target/release/nenyax train gymnasium:CartPole-v1 --learner grpo --out "$OUT/cartpole" 2>/dev/null | tail -n 1
for i in $(seq 1 "$RUNS"); do
    target/cpp-release/example_guess_trainer --report "$OUT/cpp-$i.json" | tail -n 1
done
"$NENYAX_PYTHON" - "$OUT" "$RUNS" <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
def summary(path):
    r = json.load(open(path))
    rounds = r["rounds"][1:]
    t = lambda k: sum(x["times"][k] for x in rounds)
    per = [x["times"]["overhead_s"] / x["times"]["wall_s"] for x in rounds if x["times"]["wall_s"] > 0]
    return t("wall_s") / len(rounds), t("overhead_s") / t("wall_s"), statistics.median(per), \
        t("rollout_s") / t("wall_s"), t("eval_s") / t("wall_s"), t("trainer_s") / t("wall_s")
print("| run | mean round | overhead (all rounds) | overhead (median round) | rollouts | held-out eval | trainer |")
print("|---|---|---|---|---|---|---|")
rows = [("CartPole grpo (CLI)", f"{out}/cartpole/report.json")] + \
    [(f"C++ guess trainer, run {i}", f"{out}/cpp-{i}.json") for i in range(1, runs + 1)]
for name, path in rows:
    w, o, m, ro, ev, tr = summary(path)
    print(f"| {name} | {w*1000:.1f} ms | {o:.1%} | {m:.1%} | {ro:.1%} | {ev:.1%} | {tr:.1%} |")
PY
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
