#!/usr/bin/env python3
"""The Python side of benches/bridge_throughput.rs: the same workloads, in process.

Two kinds of peer, one JSON object per line on stdout:

- ``side: python-inprocess``: ``cartpole/step``, the bare Gymnasium loop (``env.step`` with
  ``action_space.sample()``, ``reset(seed=episode)`` when an episode ends), which is what the
  bridge adds its overhead to. Median microseconds per ``env.step`` and steps/s.
- ``side: python-reference``: the Python reference ``nenyax==0.1.0a1`` on the workloads of the
  Rust bench, under the same names: ``cartpole/rollout/serial`` (200 episodes of
  ``env.rollout(env.random_policy(0), seed=i)``), ``cartpole/runner/{1,2}`` (1000 episodes of
  ``nenyax.run(..., concurrency=c)``), ``reasoning_gym/rollout/serial`` and
  ``reasoning_gym/runner/{1,2}`` (1000 rollouts of ``reasoning_gym:basic_arithmetic?size=1000``
  with the reference policy; every one must score 1.0).

Each workload runs once to warm up, then 5 timed runs with ``time.perf_counter``; the best is
reported, with the median.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

RUNS = 5
EPISODES = 1000


def report(workload, side, unit, rates, **extra):
    rec = {"workload": workload, "side": side, "unit": unit, "best": max(rates), "median": statistics.median(rates)}
    rec.update(extra)
    print(json.dumps(rec), flush=True)


def cartpole_inprocess():
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    rates, medians = [], []
    for run in range(RUNS + 1):
        n, episode, lat = 20_000, 0, []
        env.reset(seed=episode)
        env.action_space.seed(0)
        t0 = time.perf_counter()
        while len(lat) < n:
            a = env.action_space.sample()
            t = time.perf_counter()
            _, _, terminated, truncated, _ = env.step(a)
            lat.append((time.perf_counter() - t) * 1e6)
            if terminated or truncated:
                episode += 1
                env.reset(seed=episode)
        if run:
            rates.append(n / (time.perf_counter() - t0))
            medians.append(statistics.median(lat))
    report("cartpole/step", "python-inprocess", "steps/s", rates, median_us=statistics.median(medians))


def steps(trajs):
    assert all(t.error is None for t in trajs), [t.error for t in trajs if t.error][:1]
    return sum(len(t.steps) for t in trajs)


def timed(fn, count):
    rates = []
    for run in range(RUNS + 1):
        t0 = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t0
        if run:
            rates.append(count(out) / dt)
    return rates


def cartpole_reference():
    import nenyax

    env = nenyax.load("gymnasium:CartPole-v1")
    policy = env.random_policy(0)
    rates = timed(lambda: [env.rollout(policy, seed=i) for i in range(200)], steps)
    report("cartpole/rollout/serial", "python-reference", "steps/s", rates)
    for c in (1, 2):
        rates = timed(lambda: list(nenyax.run(env, policy, n=EPISODES, concurrency=c)), steps)
        report(f"cartpole/runner/{c}", "python-reference", "steps/s", rates)


def solved(trajs):
    for t in trajs:
        assert t.error is None, t.error
        assert t.judgment is not None and t.judgment.score == 1.0, t.judgment
    return len(trajs)


def arithmetic_reference():
    import nenyax

    env = nenyax.load("reasoning_gym:basic_arithmetic?size=1000")
    oracle = env.reference_policy()
    tasks = env.tasks()
    assert len(tasks) == 1000
    rates = timed(lambda: [env.rollout(oracle, task=t, seed=i) for i, t in enumerate(tasks)], solved)
    report("reasoning_gym/rollout/serial", "python-reference", "rollouts/s", rates)
    for c in (1, 2):
        rates = timed(lambda: list(nenyax.run(env, oracle, tasks=tasks, n=1000, concurrency=c)), solved)
        report(f"reasoning_gym/runner/{c}", "python-reference", "rollouts/s", rates)


def main():
    want = sys.argv[1] if len(sys.argv) > 1 else ""
    if want in "cartpole" or want.startswith("cartpole"):
        cartpole_inprocess()
        cartpole_reference()
    if want in "reasoning_gym" or want.startswith("reasoning_gym"):
        arithmetic_reference()


if __name__ == "__main__":
    main()
