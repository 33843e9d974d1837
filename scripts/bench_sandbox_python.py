"""The Python reference's process sandbox (nenyax==0.1.0a1), measured like benches/sandbox.rs:
create + exec("true") + destroy, exec("true") alone, and WarmPool acquire (+ destroy).
Run: python scripts/bench_sandbox_python.py  (in a venv with nenyax==0.1.0a1)."""

import statistics
import time

from nenyax import sandbox


def measure(f, n):
    for _ in range(3):
        f()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


backend = sandbox.get("process")


def create_exec_destroy():
    sb = backend.create()
    assert sb.exec("true").ok
    sb.destroy()


sb = backend.create()
pool = sandbox.WarmPool(backend, setup=["mkdir -p data && seq 1 1000 > data/numbers.txt"], size=4)


def acquire():
    # The reference refills only on fill(); call it outside the timed part would favour it, so
    # acquire falls back to a synchronous fork once the 4 ready ones are gone, as it does in use.
    pool.acquire().destroy()


for name, f in [
    ("process/create_exec_destroy", create_exec_destroy),
    ("process/exec_true", lambda: sb.exec("true")),
    ("process/warm_pool_acquire", acquire),
]:
    print(f"{name}: {measure(f, 200) * 1e6:.1f} us (median of 200)")
pool.close()
sb.destroy()
