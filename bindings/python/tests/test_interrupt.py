"""Ctrl-C (a real SIGINT) during a long batch stops it cleanly with KeyboardInterrupt."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import nenyax_native as nx
import pytest

SCRIPT = textwrap.dedent(
    """
    import sys, time
    import nenyax_native as nx

    env = nx.load("builtin:arithmetic?size=50")
    policy = env.reference_policy() if sys.argv[1] == "native" else (lambda obs: (time.sleep(0.001), "<answer>0</answer>")[1])
    seen = []

    def on_trajectory(traj):
        seen.append(traj)
        if len(seen) == 20:
            print("started", flush=True)

    try:
        nx.run(env, policy, n=10_000_000, concurrency=2, on_trajectory=on_trajectory)
        print("finished without interruption", flush=True)
    except KeyboardInterrupt:
        # The library is still usable: the batch stopped and its handles were freed.
        again = nx.run(env, env.reference_policy(), n=4, concurrency=2)
        print(f"interrupted after {len(seen)}; then {sum(t.score for t in again):.0f}/4", flush=True)
        sys.exit(3)
    """
)


@pytest.mark.parametrize("policy", ["native", "python"])
def test_sigint_stops_a_long_run_in_a_subprocess(policy, tmp_path):
    script = tmp_path / "long_run.py"
    script.write_text(SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script), policy], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "started"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)  # a hang fails here instead of blocking the suite
    finally:
        proc.kill()
    assert proc.returncode == 3, err
    assert out.startswith("interrupted after ") and out.strip().endswith("then 4/4"), out
    seen = int(out.split()[2].rstrip(";"))
    assert 20 <= seen < 10_000_000


def test_sigint_in_process_raises_keyboard_interrupt_and_the_runner_survives():
    env = nx.load("builtin:arithmetic?size=10")
    calls = []

    def slow(obs):
        calls.append(1)
        time.sleep(0.002)
        return "<answer>0</answer>"

    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            nx.run(env, slow, n=1_000_000, concurrency=2)
    finally:
        timer.cancel()
    assert 0 < len(calls) < 1_000_000
    # Nothing is left half-stopped: the same runner and policy run again.
    assert len(nx.run(env, slow, n=3, concurrency=2)) == 3


def test_sigint_during_a_single_rollout():
    env = nx.define("wait", reset=lambda seed: {}, observe=lambda s: "go", step=lambda s, a: (s, 0.0, False), max_steps=1_000_000)

    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            env.rollout(lambda obs: time.sleep(0.001) or "x")
    finally:
        timer.cancel()
    assert env.rollout(lambda obs: "x", max_steps=2).error is None
