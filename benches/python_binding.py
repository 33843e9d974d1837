#!/usr/bin/env python3
"""The Python binding (nenyax_native, over libnenyax's C ABI) against the Python reference, in one run.

Both packages are imported into the same interpreter and timed on the same machine, one
workload after the other. One JSON object per line on stdout, then a table of ratios.

- ``arithmetic/...``: ``builtin:arithmetic?size=1000`` against the reference's ``define`` port
  of it (benches/python_reference.py: the same 1000 prompts and answers, scored by the last
  ``<answer></answer>`` span; the prompts are checked equal here). ``oracle``: each side's own
  reference policy (the library's is native code, the reference's a Python lambda);
  ``callable``: the same Python lookup function, prompt -> ``<answer>N</answer>``, as a chat
  policy on both sides (``FunctionModel``). ``serial``: ``env.rollout`` in a Python loop;
  ``runner/{1,2}``: a binding ``Runner(c).run`` / the reference's ``nenyax.run(concurrency=c)``.
  Binding trajectories are parsed on first field access, so these rows do not include the
  parse; ``runner/2+read_score`` reads every trajectory's score inside the timing on both
  sides, and ``runner/2+write_jsonl`` writes the batch to a JSONL file (``Runner.write`` /
  the reference's ``run(out=...)``). ``arithmetic_100k/...``: the same at 100,000 rollouts
  per run (the 1000 tasks 100 times; RUNS_100K, default 2, timed runs and no warm-up).
  KINDS=oracle (or callable) runs only those rows.
- ``reasoning_gym/...``: ``reasoning_gym:basic_arithmetic?size=1000`` with each side's oracle:
  the binding through the library's bridge (Python workers running reasoning-gym; NENYAX_PYTHON,
  default this interpreter), the reference through its own in-process driver.
- ``callback/...``: per-call cost of a Python action callback: 1000-guess episodes of
  ``builtin:guess`` played by the library's native null policy and by a Python function making
  the same guess (identical trajectories); the difference per step is the callback's cost.
- ``breakdown/...``: a binding rollout of builtin:arithmetic split in two: the C call alone
  (options pre-encoded, the trajectory left as JSON bytes) and ``json.loads`` of that JSON; and
  a runner batch of 1000 whose trajectories are kept as JSON bytes, not parsed: through the
  sink callback (one Python call per trajectory), and as one ``"format": "jsonl"`` reply split
  on newlines (what ``Runner.run`` does, in chunks of 4096).
- ``memory/...``: peak RSS of one 100,000-rollout batch (runner/2, the list kept), each side in a
  fresh interpreter.
- ``cffi/...``: one call of a trivial C function (``nenyax_version_number``) and, for scale, of
  a trivial Python function.

Each workload runs once to warm up, then RUNS (default 5) timed runs; best and median reported.
Every arithmetic and reasoning-gym rollout on both sides must score 1.0 (asserted, outside the
timing).
"""

from __future__ import annotations

import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("NENYAX_PYTHON", sys.executable)

import nenyax  # the Python reference, 0.1.0a1
import nenyax_native as nx
import python_reference as port  # the reference's define port of builtin:arithmetic
from nenyax_native._native import call_string, check, ffi, lib, new_string, take_bytes
from nenyax_native.policy import FunctionModel, Policy

RUNS = int(os.environ.get("RUNS", "5"))
N = 1000
RESULTS: List[Dict[str, Any]] = []


def timed(workload: str, side: str, fn: Callable[[], Any], count: Callable[[Any], int], unit: str = "rollouts/s", runs: int = 0) -> None:
    """Warm up (unless ``runs`` is given), then ``runs`` (default RUNS) timed runs of ``fn``; ``count(out)``
    checks the output, outside the timing, and says how many units it did."""
    if not runs:
        count(fn())
    rates = []
    for _ in range(runs or RUNS):
        t0 = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t0
        rates.append(count(out) / dt)
        del out
    rec = {"workload": workload, "side": side, "unit": unit, "best": max(rates), "median": statistics.median(rates)}
    RESULTS.append(rec)
    print(json.dumps(rec), flush=True)


def solved_n(n: int) -> Callable[[List[Any]], int]:
    """A check that there are ``n`` rollouts, each scored 1.0 (either side's Trajectory)."""

    def check(trajs: List[Any]) -> int:
        assert len(trajs) == n, len(trajs)
        for t in trajs:
            score = t.score
            assert score == 1.0, getattr(t, "error", None) or t.judgment
        return len(trajs)

    return check


solved = solved_n(N)


def written_n(n: int, path: Path) -> Callable[[Any], int]:
    """A check that ``path`` holds ``n`` JSON lines, each a trajectory scored 1.0; empties it for the next run."""

    def check(_: Any) -> int:
        lines = path.read_bytes().splitlines()
        assert len(lines) == n, len(lines)
        assert all(json.loads(line)["judgment"]["score"] == 1.0 for line in lines)
        path.write_bytes(b"")
        return n

    return check


def answer_lookup(rows: List[Dict[str, str]]) -> Callable[[str], str]:
    """prompt -> ``<answer>N</answer>``, the work both sides' callable policies share."""
    answers = {r["prompt"]: f"<answer>{r['answer']}</answer>" for r in rows}
    return lambda prompt: answers.get(prompt, "?")


def arithmetic(jobs: int = N, runs: int = 0) -> None:
    """builtin:arithmetic's 1000 tasks against the reference's port, ``jobs`` rollouts per run (the tasks cycled)."""
    rows = port.arithmetic_rows(N)
    lookup = answer_lookup(rows)
    tag = "arithmetic" if jobs == N else f"arithmetic_{jobs // 1000}k"
    check = solved_n(jobs)

    env = nx.load(f"builtin:arithmetic?size={N}")
    tasks = env.tasks()
    assert [t["prompt"] for t in tasks] == [r["prompt"] for r in rows], "the port's prompts differ from builtin:arithmetic's"
    ours = {
        "oracle": env.reference_policy(),
        "callable": FunctionModel(lambda messages: lookup(messages[-1]["content"])).policy(),
    }
    ref_env = port.make_env(rows)
    ref_tasks = ref_env.tasks()
    theirs = {
        "oracle": ref_env.reference_policy(),
        "callable": nenyax.FunctionModel(lambda messages: lookup(messages[-1].content), name="lookup"),
    }
    # The reference's run does not cycle its tasks: it gets the whole job list, the binding the 1000 tasks.
    our_jobs = tasks * (jobs // N)
    ref_jobs = ref_tasks * (jobs // N)
    path = Path(tempfile.mkdtemp()) / "trajectories.jsonl"
    for kind in os.environ.get("KINDS", "oracle,callable").split(","):
        p, q = ours[kind], theirs[kind]
        timed(f"{tag}/{kind}/serial", "binding", lambda: [env.rollout(p, task=t, seed=i) for i, t in enumerate(our_jobs)], check, runs=runs)
        timed(f"{tag}/{kind}/serial", "reference", lambda: [ref_env.rollout(q, task=t, seed=i) for i, t in enumerate(ref_jobs)], check, runs=runs)
        for c in (1, 2):
            runner = nx.Runner(c)
            timed(f"{tag}/{kind}/runner/{c}", "binding", lambda: runner.run(env, p, n=jobs, tasks=tasks), check, runs=runs)
            timed(
                f"{tag}/{kind}/runner/{c}", "reference", lambda: list(nenyax.run(ref_env, q, tasks=ref_jobs, n=jobs, concurrency=c)), check, runs=runs
            )
        runner = nx.Runner(2)
        # The same batch with every trajectory's score read inside the timing (the binding parses each then).
        timed(f"{tag}/{kind}/runner/2+read_score", "binding", lambda: [t for t in runner.run(env, p, n=jobs, tasks=tasks) if t.score is not None], check, runs=runs)
        timed(
            f"{tag}/{kind}/runner/2+read_score",
            "reference",
            lambda: [t for t in nenyax.run(ref_env, q, tasks=ref_jobs, n=jobs, concurrency=2) if t.score is not None],
            check,
            runs=runs,
        )
        # Straight to a JSONL file: Runner.write against the reference's run(out=).
        timed(f"{tag}/{kind}/runner/2+write_jsonl", "binding", lambda: runner.write(path, env, p, n=jobs, tasks=tasks), written_n(jobs, path), runs=runs)
        timed(
            f"{tag}/{kind}/runner/2+write_jsonl",
            "reference",
            lambda: collections.deque(nenyax.run(ref_env, q, tasks=ref_jobs, n=jobs, concurrency=2, out=path), maxlen=0),
            written_n(jobs, path),
            runs=runs,
        )


def arithmetic_100k() -> None:
    """The arithmetic rows at 100,000 rollouts per run (the 1000 tasks 100 times), RUNS_100K runs, no warm-up."""
    arithmetic(100_000, runs=int(os.environ.get("RUNS_100K", "2")))


def memory() -> None:
    """Peak RSS of a fresh interpreter that runs one 100,000-rollout arithmetic batch on 2 threads and keeps
    the list, each side alone (VmHWM: ``ru_maxrss`` would include this process's peak from before the exec;
    the import and environment included, measured without the batch too)."""
    prelude = "import sys; sys.path.insert(0, %r); import nenyax, nenyax_native as nx, python_reference as port\n" % str(
        Path(__file__).resolve().parent
    )
    sides = {
        "binding": "env = nx.load('builtin:arithmetic?size=1000'); tasks = env.tasks(); p = env.reference_policy()\n"
        "out = nx.Runner(2).run(env, p, n=JOBS, tasks=tasks) if JOBS else []\n",
        "reference": "env = port.make_env(port.arithmetic_rows(1000)); tasks = env.tasks() * 100; p = env.reference_policy()\n"
        "out = list(nenyax.run(env, p, tasks=tasks, n=JOBS, concurrency=2)) if JOBS else []\n",
    }
    for side, body in sides.items():
        peaks = []
        for jobs in (0, 100_000):
            code = prelude + f"JOBS = {jobs}\n" + body + "assert len(out) == JOBS\nprint(next(int(line.split()[1]) for line in open('/proc/self/status') if line.startswith('VmHWM')) / 1024)"
            peaks.append(float(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout))
        rec = {"workload": "memory/arithmetic_100k/runner/2", "side": side, "unit": "MB peak RSS", "best": peaks[1], "median": peaks[1], "without_batch": peaks[0]}
        RESULTS.append(rec)
        print(json.dumps(rec), flush=True)


def reasoning_gym() -> None:
    uri = f"reasoning_gym:basic_arithmetic?size={N}"
    env = nx.load(uri)
    tasks = env.tasks()
    oracle = env.reference_policy()
    ref_env = nenyax.load(uri)
    ref_tasks = ref_env.tasks()
    ref_oracle = ref_env.reference_policy()
    timed("reasoning_gym/serial", "binding", lambda: [env.rollout(oracle, task=t, seed=i) for i, t in enumerate(tasks)], solved)
    timed("reasoning_gym/serial", "reference", lambda: [ref_env.rollout(ref_oracle, task=t, seed=i) for i, t in enumerate(ref_tasks)], solved)
    for c in (1, 2):
        runner = nx.Runner(c)
        timed(f"reasoning_gym/runner/{c}", "binding", lambda: runner.run(env, oracle, n=N, tasks=tasks), solved)
        timed(f"reasoning_gym/runner/{c}", "reference", lambda: list(nenyax.run(ref_env, ref_oracle, tasks=ref_tasks, n=N, concurrency=c)), solved)


def callback() -> None:
    steps = 1000
    env = nx.load(f"builtin:guess?size=1&high=1000000&max_guesses={steps}")
    task = env.tasks()[0]
    native = env.null_policy()
    python = Policy.from_callable(lambda observation: 0)
    a, b = env.rollout(native, task=task), env.rollout(python, task=task)
    assert [s["action"] for s in a.steps] == [s["action"] for s in b.steps] == [0] * steps, (a.error, b.error)

    def per_step(policy: Policy) -> Callable[[], int]:
        return lambda: len(env.rollout(policy, task=task).steps)

    timed("callback/guess_step/native", "binding", per_step(native), lambda n: n, unit="steps/s")
    timed("callback/guess_step/python_act", "binding", per_step(python), lambda n: n, unit="steps/s")


def breakdown() -> None:
    """Where a binding rollout's time goes: the C call alone (options pre-encoded, the JSON reply
    kept as bytes), then json.loads of that reply, the rest being the Python wrapping."""
    env = nx.load(f"builtin:arithmetic?size={N}")
    tasks = env.tasks()
    oracle = env.reference_policy()
    options = [json.dumps({"task": t, "seed": i}).encode() for i, t in enumerate(tasks)]
    replies = [call_string(lib.nenyax_env_rollout, env.handle, oracle.handle, o, len(o)) for o in options]
    assert all(json.loads(r)["judgment"]["score"] == 1.0 for r in replies)
    timed("breakdown/c_rollout", "binding", lambda: [call_string(lib.nenyax_env_rollout, env.handle, oracle.handle, o, len(o)) for o in options], len)
    timed("breakdown/json_loads", "python", lambda: [json.loads(r) for r in replies], len, unit="trajectories/s")
    # The batch with each trajectory kept as its JSON bytes (a sink that only copies them): what
    # Runner.run would cost if Trajectory parsed lazily, e.g. for a caller that writes them out.
    batch = json.dumps({"n": N, "tasks": tasks}).encode()
    jsonl = json.dumps({"n": N, "tasks": tasks, "format": "jsonl"}).encode()
    kept: List[bytes] = []

    @ffi.callback("nenyax_trajectory_fn", error=1)
    def keep(_user: Any, _index: int, ptr: Any, size: int) -> int:
        kept.append(ffi.unpack(ptr, size))
        return 0

    for c in (1, 2):
        runner = nx.Runner(c)

        def as_bytes() -> List[bytes]:
            kept.clear()
            check(lib.nenyax_runner_run(runner._handle, env.handle, oracle.handle, batch, len(batch), keep, ffi.NULL, ffi.NULL))
            return list(kept)

        def as_jsonl() -> List[bytes]:
            out = new_string()
            check(lib.nenyax_runner_run(runner._handle, env.handle, oracle.handle, jsonl, len(jsonl), ffi.NULL, ffi.NULL, out))
            return take_bytes(out).split(b"\n")[:-1]

        assert [json.loads(b)["judgment"]["score"] for b in as_bytes()] == [1.0] * N
        assert [json.loads(b)["seed"] for b in as_jsonl()] == [json.loads(b)["seed"] for b in as_bytes()] == list(range(N))
        timed(f"breakdown/runner/{c}/json_bytes", "binding", as_bytes, len)
        timed(f"breakdown/runner/{c}/jsonl_one_call", "binding", as_jsonl, len)


def cffi_calls() -> None:
    calls = 1_000_000
    version = lib.nenyax_version_number

    def c_calls() -> int:
        for _ in range(calls):
            version()
        return calls

    def noop() -> int:
        return 0

    def py_calls() -> int:
        for _ in range(calls):
            noop()
        return calls

    timed("cffi/nenyax_version_number", "binding", c_calls, lambda n: n, unit="calls/s")
    timed("cffi/python_noop", "python", py_calls, lambda n: n, unit="calls/s")


def summary() -> None:
    """Ratios binding / reference per workload (best, median), and per-call costs in us."""
    by = {(r["workload"], r["side"]): r for r in RESULTS}
    print("\n| workload | unit | binding best | binding median | reference best | reference median | binding / reference (best, median) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for (workload, side), ours in by.items():
        theirs = by.get((workload, "reference"))
        if side != "binding" or theirs is None:
            continue
        print(
            f"| {workload} | {ours['unit']} | {ours['best']:,.0f} | {ours['median']:,.0f} | {theirs['best']:,.0f} | "
            f"{theirs['median']:,.0f} | {ours['best'] / theirs['best']:.1f}x, {ours['median'] / theirs['median']:.1f}x |"
        )
    us = {w: 1e6 / by[(w, s)]["median"] for (w, s) in by if w.startswith(("callback/", "cffi/", "breakdown/"))}
    if us:
        print("\n| per call (median) | us |\n|---|---:|")
        for w, v in us.items():
            print(f"| {w} | {v:.3f} |")
        native, python = us.get("callback/guess_step/native"), us.get("callback/guess_step/python_act")
        if native and python:
            print(f"| Python act callback, over the native policy (difference) | {python - native:.3f} |")


def main() -> None:
    want = sys.argv[1:] or ["arithmetic", "arithmetic_100k", "memory", "reasoning_gym", "callback", "breakdown", "cffi"]
    print(json.dumps({"machine": {"nproc": os.cpu_count(), "python": sys.version.split()[0], "nenyax": nenyax.__version__,
                                  "nenyax_native": nx.__version__, "libnenyax": nx.version(), "runs": RUNS,
                                  "loadavg": os.getloadavg()}}), flush=True)
    for name in want:
        {"arithmetic": arithmetic, "arithmetic_100k": arithmetic_100k, "memory": memory, "reasoning_gym": reasoning_gym, "callback": callback, "breakdown": breakdown, "cffi": cffi_calls}[name]()
    summary()


if __name__ == "__main__":
    main()
