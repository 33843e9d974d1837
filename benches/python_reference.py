#!/usr/bin/env python3
"""The workloads of benches/rollout_throughput.rs, run with the Python reference (nenyax 0.1.0a1).

The reference has no built-in arithmetic environment, so this builds its peer with
``nenyax.define``: a single-turn environment over the *same* 1000 tasks as
``builtin:arithmetic?size=1000`` (the Rust generator, SplitMix64 and all, is ported below, so
the prompts and answers are identical), scored by the last ``<answer></answer>`` span.

Workloads (names match the criterion ids, so benches/compare.sh can join them):

- ``rollout/serial_loop``: ``env.rollout(oracle, task=t, seed=i)`` in a plain loop, where
  ``oracle`` is the defined environment's reference (action) policy;
- ``rollout/runner/{1,2}``: ``list(nenyax.run(env, oracle, tasks=..., concurrency=c))``;
- ``chat/...``: the same with a ``nenyax.FunctionModel`` that looks the answer up by prompt;
- ``json/{to_json,from_json}/{action,chat}``: ``Trajectory.model_dump_json`` /
  ``Trajectory.model_validate_json`` over 1000 trajectories.

Each workload is run once to warm up, then timed 3 times with ``time.perf_counter``; the best
run is reported (``rollouts_per_s``; for json, trajectories per second), with the median too.
One JSON object per line on stdout.

``--rss N`` instead mirrors ``nenyax run 'builtin:arithmetic?size=1000' --policy oracle -n N
--concurrency C`` (tasks cycled, trajectories consumed and dropped as they arrive, mean score
kept) and prints its rate and peak RSS (VmHWM).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections.abc import Callable

import nenyax

N = 1000
M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


# --- a port of core/src/rng.rs and the builtin:arithmetic generator ---------------------------


def splitmix64(x: int) -> int:
    z = (x + GOLDEN) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


class Rng:
    def __init__(self, seed: int) -> None:
        self.state = splitmix64(seed & M64)

    def range(self, lo: int, hi: int) -> int:
        if hi <= lo:
            return lo
        self.state = (self.state + GOLDEN) & M64
        return lo + splitmix64(self.state) % (hi - lo + 1)


def arithmetic_rows(size: int = N, seed: int = 0, digits: int = 2, ops: str = "+-*") -> list[dict]:
    hi, lo = 10**digits - 1, (0 if digits == 1 else 10 ** (digits - 1))
    rows = []
    for index in range(size):
        rng = Rng(seed ^ splitmix64((index + 0xA5A5A5A5) & M64))
        a, b = rng.range(lo, hi), rng.range(lo, hi)
        op = ops[rng.range(0, len(ops) - 1)]
        answer = a + b if op == "+" else a - b if op == "-" else a * b
        expression = f"{a} {op} {b}"
        rows.append(
            {
                "prompt": f"What is {expression}? Give your final answer inside <answer></answer> "
                "tags, e.g. <answer>42</answer>.",
                "answer": str(answer),
                "expression": expression,
            }
        )
    return rows


ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)


def score(task: dict, reply: str) -> float:
    """1.0 when the last <answer></answer> span equals the expected number (as the Rust env)."""
    found = ANSWER.findall(reply)
    if not found:
        return 0.0
    try:
        return float(float(found[-1].strip().replace(",", "")) == float(task["answer"]))
    except ValueError:
        return 0.0


def make_env(rows: list[dict]):
    return nenyax.define(
        "arithmetic",
        tasks=rows,
        score=score,
        reference=lambda row: f"<answer>{row['answer']}</answer>",
    )


def lookup_model(rows: list[dict]) -> nenyax.FunctionModel:
    answers = {r["prompt"]: r["answer"] for r in rows}

    def reply(messages: list) -> str:
        prompt = next((m.content for m in reversed(messages) if m.role == "user"), "")
        return f"<answer>{answers.get(prompt, '?')}</answer>"

    return nenyax.FunctionModel(reply, name="lookup")


# --- timing -------------------------------------------------------------------------------------


def measure(workload: str, fn: Callable[[], object], elements: int = N, runs: int = 3) -> dict:
    out = fn()  # warm-up
    del out
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
        del out  # freed outside the timed region, as criterion does with iter_batched
    rec = {
        "workload": workload,
        "rollouts_per_s": elements / min(times),
        "median_rollouts_per_s": elements / statistics.median(times),
        "runs_s": [round(t, 6) for t in times],
    }
    print(json.dumps(rec), flush=True)
    return rec


def check_solved(trajs: list, what: str) -> None:
    assert len(trajs) == N, what
    bad = [t for t in trajs if t.score != 1.0]
    assert not bad, f"{what}: {bad[0].error or bad[0].judgment}"


def vmhwm_kib() -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def benches() -> None:
    rows = arithmetic_rows()
    env = make_env(rows)
    tasks = env.tasks()
    oracle = env.reference_policy()
    chat = lookup_model(rows)

    def serial(policy):
        return lambda: [env.rollout(policy, task=t, seed=i) for i, t in enumerate(tasks)]

    def runner(policy, c):
        return lambda: list(nenyax.run(env, policy, tasks=tasks, n=N, concurrency=c))

    for group, policy in (("rollout", oracle), ("chat", chat)):
        check_solved(serial(policy)(), group)
        check_solved(runner(policy, 2)(), group)
        measure(f"{group}/serial_loop", serial(policy))
        for c in (1, 2):
            measure(f"{group}/runner/{c}", runner(policy, c))

    for kind, policy in (("action", oracle), ("chat", chat)):
        trajs = serial(policy)()
        lines = [t.model_dump_json() for t in trajs]
        assert nenyax.Trajectory.model_validate_json(lines[0]) == trajs[0]
        measure(f"json/to_json/{kind}", lambda trajs=trajs: [t.model_dump_json() for t in trajs])
        measure(
            f"json/from_json/{kind}",
            lambda lines=lines: [nenyax.Trajectory.model_validate_json(s) for s in lines],
        )


def rss_run(n: int, concurrency: int) -> None:
    """The Python equivalent of `nenyax run builtin:arithmetic?size=1000 --policy oracle -n N`."""
    rows = arithmetic_rows()
    env = make_env(rows)
    listed = env.tasks()
    tasks = [listed[i % len(listed)] for i in range(n)]  # nenyax.run does not cycle tasks itself
    oracle = env.reference_policy()
    t0 = time.perf_counter()
    total, judged, failed = 0.0, 0, 0
    for traj in nenyax.run(env, oracle, tasks=tasks, n=n, concurrency=concurrency):
        if traj.score is not None:
            total += traj.score
            judged += 1
        failed += traj.error is not None
    secs = time.perf_counter() - t0
    rec = {
        "workload": f"cli_equivalent/n={n}/concurrency={concurrency}",
        "rollouts_per_s": n / secs,
        "mean_score": total / max(judged, 1),
        "failed": failed,
        "vmhwm_kib": vmhwm_kib(),
    }
    print(json.dumps(rec), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rss", type=int, metavar="N", help="run N episodes CLI-style, report RSS")
    ap.add_argument("--concurrency", type=int, default=2)
    args = ap.parse_args()
    if args.rss is not None:
        rss_run(args.rss, args.concurrency)
    else:
        benches()
    return 0


if __name__ == "__main__":
    sys.exit(main())
