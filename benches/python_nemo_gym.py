#!/usr/bin/env python3
"""The Python reference (nenyax==0.1.0a1) rolling out single-turn NeMo Gym tasks against a
running resources server, for benches/nemo_gym_compare.sh. Same server, same data and the
same answers as the Rust side's reference policy (the row's expected answer, boxed).

Usage: python_nemo_gym.py <server URL> <tasks.jsonl> <episodes> <concurrency>
Prints one JSON object: episodes/s and the client's CPU time per episode (after one warm-up
episode), and the mean score.
"""

import json
import resource
import sys
import time

import nenyax
from nenyax.formats.nemo_gym import NemoGymEnvironment

url, data, n, concurrency = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
env = NemoGymEnvironment(url, data=data, reference="Answer: {expected_answer}\n\\boxed{{{expected_answer}}}")
policy = env.reference_policy()
tasks = env.tasks()
env.rollout(policy, task=tasks[0])  # warm-up: imports, first connection
jobs = [tasks[i % len(tasks)] for i in range(n)]
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


t0, c0 = time.perf_counter(), cpu()
trajs = list(nenyax.run(env, policy, tasks=jobs, n=n, concurrency=concurrency))
dt, dc = time.perf_counter() - t0, cpu() - c0
assert all(t.error is None for t in trajs), [t.error for t in trajs if t.error][:1]
scores = [t.score for t in trajs]
print(json.dumps({
    "side": "python-reference", "n": n, "concurrency": concurrency,
    "episodes_per_s": n / dt, "client_cpu_ms_per_episode": 1000 * dc / n,
    "mean_score": sum(scores) / n,
}))
