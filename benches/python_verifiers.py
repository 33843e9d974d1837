#!/usr/bin/env python3
"""The Python reference (nenyax==0.1.0a1) rolling out the verifiers test environment, for
benches/verifiers_compare.sh. Run with a verifiers venv's interpreter (the reference installed
into it) and PYTHONPATH=tests/verifiers_envs.

Usage: python_verifiers.py <env id> <rollouts> <concurrency>
Prints one JSON object: rollouts/s (after one warm-up rollout), mean score, model calls.
"""

import json
import sys
import time

import nenyax

env_id, n, concurrency = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
env = nenyax.load(f"verifiers:{env_id}")
tasks = env.tasks()
answers = {}
for i, t in enumerate(tasks):
    fields = env._fields(i)  # the row, as the reference keeps it
    answers[t.prompt] = str(fields.get("answer"))


def reply(messages):
    last = [m for m in messages if m.role == "user"][-1]
    return answers[last.content]


model = nenyax.FunctionModel(reply, name="lookup")
env.rollout(model, task=tasks[0])  # warm-up: imports, first client
jobs = [tasks[i % len(tasks)] for i in range(n)]
t0 = time.perf_counter()
trajs = list(nenyax.run(env, model, tasks=jobs, n=n, concurrency=concurrency))
dt = time.perf_counter() - t0
scores = [t.score for t in trajs]
assert all(t.error is None for t in trajs), [t.error for t in trajs if t.error][:1]
print(json.dumps({
    "side": "python-reference", "env": env_id, "n": n, "concurrency": concurrency,
    "rollouts_per_s": n / dt, "mean_score": sum(scores) / n,
    "model_calls": sum(len(t.model_calls) for t in trajs),
}))
