"""train() with the in-context learner in the Python reference (nenyax==0.1.0a1), on the same
define environment and the same scripted chat model as benches/train_loop.rs, for
benches/train_compare.sh.

    python benches/python_train.py TASKS.toml ROUNDS REPEATS

Prints one JSON line per repeat: {"side": "python", "rounds", "wall_s", "baseline", "final"}.
"""

import json
import re
import sys
import time

import nenyax
import tomllib
from nenyax.learners.incontext import InContextLearner


def scripted(messages):
    """Knows every answer; uses the answer tags only when its prompt shows a worked example
    (an assistant turn), else on 3 questions in 10, as the Rust side's model."""
    user = [m for m in messages if m.role == "user"]
    q = user[-1].content if user else ""
    a, op, b = re.match(r"What is (-?\d+) ([+*-]) (-?\d+)\?", q).groups()
    a, b = int(a), int(b)
    answer = a + b if op == "+" else a - b if op == "-" else a * b
    shown = sum(1 for m in messages if m.role == "assistant")
    h = 7
    for ch in q.encode():
        h = (h * 31 + ch) % (1 << 64)
    if shown > 0 or h % 10 < 3:
        return f"<answer>{answer}</answer>"
    return f"The answer is {answer}."


def main():
    path, rounds, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    with open(path, "rb") as f:
        spec = tomllib.load(f)
    tasks = [{"prompt": t["prompt"], "answer": t["answer"]} for t in spec["tasks"]]

    def score(task, reply):
        m = re.findall(r"<answer>(.*?)</answer>", reply, re.S)
        return float(bool(m) and m[-1].strip() == str(task["answer"]))

    env = nenyax.define("arith", tasks=tasks, score=score)
    for _ in range(repeats):
        learner = InContextLearner(nenyax.FunctionModel(scripted, "scripted"), shots=3)
        t0 = time.perf_counter()
        res = nenyax.train(env, learner, rounds=rounds, group_size=4, batch=8, seed=0)
        wall = time.perf_counter() - t0
        print(json.dumps({"side": "python", "rounds": rounds, "wall_s": wall,
                          "baseline": res.baseline, "final": res.best}), flush=True)


if __name__ == "__main__":
    main()
