#!/usr/bin/env bash
# Rounds per second of train() with the in-context learner, Rust library next to the Python
# reference's train(), on the same define environment (400 arithmetic tasks, answer tags judged
# exactly) and the same scripted chat model, 4 x 8 rollouts per round, held-out a quarter.
#
#   benches/train_compare.sh            # 20 rounds x 5 repeats each side (about 1 minute)
#
# Python: $NENYAX_PYTHON, else .venv/bin/python, with nenyax==0.1.0a1. Outputs: target/compare/.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${NENYAX_PYTHON:-.venv/bin/python}
ROUNDS=${ROUNDS:-20}
REPEATS=${REPEATS:-5}
OUT=target/compare
mkdir -p "$OUT"
TASKS="$OUT/train_tasks.toml"
# The tasks, seeded, written once for both sides.
"$PY" - "$TASKS" <<'PY'
import random, sys
rng = random.Random(0)
lines = ['name = "arith"', '[judge]', 'type = "exact"', 'field = "answer"', 'extract = "answer_tag"']
for _ in range(400):
    a, b, op = rng.randint(10, 99), rng.randint(10, 99), rng.choice("+-*")
    ans = a + b if op == "+" else a - b if op == "-" else a * b
    lines += ["[[tasks]]", f'prompt = "What is {a} {op} {b}? Answer inside <answer></answer> tags."',
              f'answer = "{ans}"']
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
PY
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
cargo build -q --release --bench train_loop
bin=$(ls -t target/release/deps/train_loop-* | grep -v '\.d$' | head -n 1)
"$PY" benches/python_train.py "$TASKS" "$ROUNDS" "$REPEATS" | tee "$OUT/train_python.jsonl"
CONCURRENCY=1 "$bin" "$TASKS" "$ROUNDS" "$REPEATS" | tee "$OUT/train_rust.jsonl"
CONCURRENCY=2 "$bin" "$TASKS" "$ROUNDS" "$REPEATS" | tee -a "$OUT/train_rust.jsonl"
"$PY" - "$OUT" <<'PY'
import json, statistics, sys
out = sys.argv[1]
rows = [json.loads(l) for f in ("train_python.jsonl", "train_rust.jsonl") for l in open(f"{out}/{f}")]
def rps(side, threads=None):
    w = [r["rounds"] / r["wall_s"] for r in rows if r["side"] == side and r.get("threads", 1) == (threads or 1)]
    return statistics.median(w)
py, r1, r2 = rps("python"), rps("rust", 1), rps("rust", 2)
print(f"rounds/s (median): python {py:.1f}, rust 1 thread {r1:.1f} ({r1/py:.1f}x), rust 2 threads {r2:.1f} ({r2/py:.1f}x)")
PY
