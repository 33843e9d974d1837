#!/usr/bin/env python3
"""The Python reference's sandboxes (nenyax==0.1.0a1) and bare Podman, measured like
benches/container.rs and benches/sandbox.rs, for benches/container_compare.sh.

One JSON object per line on stdout: workload, n, median_ms, mean_ms, min_ms (each iteration timed
alone with time.perf_counter, after warm-up iterations that are not counted).

Workloads:

- ``bare/podman_run_rm_true``: ``podman run --rm IMG true`` (what the issue compares against),
  and ``bare/podman_run_rm_true_network_none`` with ``--network=none`` as nenyax's containers;
- ``reference/container/...``: the reference's docker backend driven through Podman
  (``DockerBackend(binary="podman")``, image IMG, workdir ``/tmp`` because Podman, unlike Docker,
  refuses a ``-w`` directory missing from the image): ``cold_create`` (create timed; exec and
  destroy not), ``exec_true``, ``destroy`` (``podman rm -f`` without ``-t``, which waits 10 s
  for ``sleep infinity`` to ignore SIGTERM), ``warm_pool_acquire`` (the episode loop: acquire
  timed, then ``exec("true")``, then destroy handed to a background thread, as
  benches/container.rs does) and ``warm_pool_acquire_full`` (``fill()`` untimed before each
  acquire: the hand-out alone);
- ``reference/process/warm_pool_acquire``: ``pool.acquire().destroy()`` in a loop on the
  reference's process backend (the loop of scripts/bench_sandbox_python.py); reported both as
  the median of single iterations and as the mean of a tight loop (criterion's statistic).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

SETUP = ["mkdir -p data && seq 1 1000 > data/numbers.txt"]


def report(workload: str, times: list[float], **extra) -> None:
    rec = {
        "workload": workload,
        "n": len(times),
        "median_ms": statistics.median(times) * 1e3,
        "mean_ms": statistics.fmean(times) * 1e3,
        "min_ms": min(times) * 1e3,
        **extra,
    }
    print(json.dumps(rec), flush=True)


def timed(f, n: int, warmup: int = 1) -> list[float]:
    for _ in range(warmup):
        f()
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        f()
        out.append(time.perf_counter() - t0)
    return out


def bare(engine: str, image: str, n: int) -> None:
    for name, flags in (("", []), ("_network_none", ["--network=none"])):

        def run(flags=flags) -> None:
            subprocess.run([engine, "run", "--rm", *flags, image, "true"], check=True)

        report(f"bare/podman_run_rm_true{name}", timed(run, n))


def reference_container(engine: str, image: str, n: int, destroy_n: int) -> None:
    from nenyax import sandbox
    from nenyax.sandbox.base import SandboxSpec
    from nenyax.sandbox.docker import DockerBackend

    backend = DockerBackend(binary=engine)
    missing = backend.missing()
    if missing:
        raise SystemExit(f"the reference's docker backend cannot run: {missing}")
    spec = SandboxSpec(image=image, workdir="/tmp")
    # Its destroy waits 10 s per container under Podman: done off the timed path, in parallel.
    reaper = ThreadPoolExecutor(max_workers=16)

    def cold() -> float:
        t0 = time.perf_counter()
        sb = backend.create(spec)
        dt = time.perf_counter() - t0
        assert sb.exec("true").ok
        reaper.submit(sb.destroy)
        return dt

    cold()
    report("reference/container/cold_create", [cold() for _ in range(n)])

    sb = backend.create(spec)
    report("reference/container/exec_true", timed(lambda: sb.exec("true"), n))

    victims = [backend.create(spec) for _ in range(destroy_n)]
    times = []
    for v in victims:
        t0 = time.perf_counter()
        v.destroy()
        times.append(time.perf_counter() - t0)
    if times:
        report("reference/container/destroy", times)

    pool = sandbox.WarmPool(backend, spec, setup=SETUP, size=4)

    def episode() -> float:
        t0 = time.perf_counter()
        got = pool.acquire()
        dt = time.perf_counter() - t0
        assert got.exec("true").ok
        reaper.submit(got.destroy)
        return dt

    report("reference/container/warm_pool_acquire", [episode() for _ in range(n)])

    def full() -> float:
        pool.fill()
        return episode()

    report("reference/container/warm_pool_acquire_full", [full() for _ in range(n)])
    with pool._lock:
        left, pool._ready = list(pool._ready), type(pool._ready)()
    for s in [*left, pool.template, sb]:
        reaper.submit(s.destroy)
    reaper.shutdown(wait=True)


def reference_process(n: int) -> None:
    from nenyax import sandbox

    pool = sandbox.WarmPool(sandbox.get("process"), setup=SETUP, size=4)
    # The reference refills only on fill(): past the first 4, acquire forks synchronously.
    singles = timed(lambda: pool.acquire().destroy(), n, warmup=3)
    t0 = time.perf_counter()
    for _ in range(n):
        pool.acquire().destroy()
    tight_ms = (time.perf_counter() - t0) / n * 1e3
    report("reference/process/warm_pool_acquire", singles, tight_loop_mean_ms=tight_ms)
    pool.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("part", choices=["bare", "container", "process"])
    ap.add_argument("--engine", default="podman")
    ap.add_argument("--image", default="localhost/nenyax-base:bookworm")
    ap.add_argument("-n", type=int, default=10)
    ap.add_argument("--destroy-n", type=int, default=2)
    args = ap.parse_args()
    if args.part == "bare":
        bare(args.engine, args.image, args.n)
    elif args.part == "container":
        reference_container(args.engine, args.image, args.n, args.destroy_n)
    else:
        reference_process(args.n)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
