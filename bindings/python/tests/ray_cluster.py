"""A real multi-node Ray cluster on one machine, for the scale-out test and benches/ray_scaleout.py.

Every node is its own ``ray start --block`` (its own raylet, object store and workers) on ports
of its own. Each node's processes inherit a marker variable naming the node, so that one node
can be killed outright (raylet, agents and workers together: a machine that vanished) and the
whole cluster stopped without ``ray stop``, which would also stop Ray clusters this process did
not start.

Nodes are started with ``--node-ip-address=127.0.0.1``, but Ray replaces a loopback address with
the host's own (``resolve_ip_for_localhost``), so the nodes advertise that; nothing is reached
beyond this machine either way.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Dict, List, Set

MARKER = "NENYAX_RAY_NODE"


def free_ports(count: int, taken: Set[int]) -> List[int]:
    """``count`` distinct TCP ports nothing listens on now and not in ``taken`` (which they join).

    The sockets stay bound until all are picked: a port released at once is often handed out
    again by the next bind, and Ray refuses two components on one port.
    """
    socks, ports = [], []
    try:
        while len(ports) < count:
            s = socket.socket()
            socks.append(s)
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            if port not in taken:
                taken.add(port)
                ports.append(port)
        return ports
    finally:
        for s in socks:
            s.close()


def marked(value: str, prefix: bool = False) -> List[int]:
    """The pids whose environment carries ``MARKER=value`` (or a value starting with it)."""
    needle = f"{MARKER}={value}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                variables = f.read().split(b"\0")
        except OSError:  # gone, or not ours
            continue
        if any(v == needle or (prefix and v.startswith(needle)) for v in variables):
            pids.append(int(entry))
    return pids


def descendants(root: int) -> List[int]:
    """``root``'s children, their children and so on, as the process table has them now."""
    children: Dict[int, List[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                # The parent pid is the second field after the parenthesised command name.
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.extend(children.get(pid, ()))
        todo.extend(children.get(pid, ()))
    return out


def holding(directory: Path) -> List[int]:
    """The pids with a file open under ``directory`` (every Ray process writes its logs in the session dir)."""
    prefix = str(directory.resolve()) + os.sep
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
            if any(os.readlink(f"/proc/{entry}/fd/{fd}").startswith(prefix) for fd in fds):
                pids.append(int(entry))
        except OSError:
            continue
    return pids


def kill_all(pids: List[int]) -> None:
    for pid in set(pids) - {os.getpid()}:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class LocalCluster:
    """Head plus worker nodes, each a separate raylet on this host; ``stop()`` kills everything it started."""

    def __init__(self, root: Path, cpus_per_node: int = 2, object_store_bytes: int = 100_000_000) -> None:
        self.root = Path(root)
        self.cpus = cpus_per_node
        self.store = object_store_bytes
        self.tag = uuid.uuid4().hex[:12]
        self.ray = str(Path(sys.executable).with_name("ray"))
        if not Path(self.ray).exists():
            self.ray = shutil.which("ray") or "ray"
        self._taken: Set[int] = set()
        self.port = free_ports(1, self._taken)[0]
        self.address = f"127.0.0.1:{self.port}"
        self.procs: Dict[str, subprocess.Popen] = {}
        # Worker ports come from a range of their own per node, away from the ephemeral ports above.
        self._next_worker_port = random.randrange(20000, 30000, 200)

    def _ports(self) -> List[str]:
        lo = self._next_worker_port
        self._next_worker_port += 200
        names = ["node-manager", "object-manager", "dashboard-agent-listen", "dashboard-agent-grpc", "runtime-env-agent", "metrics-export"]
        return self._port_flags(names) + [f"--min-worker-port={lo}", f"--max-worker-port={lo + 199}"]

    def _port_flags(self, names: List[str]) -> List[str]:
        """``--<name>-port=<free port>`` for each name, every port distinct in this cluster."""
        return [f"--{name}-port={port}" for name, port in zip(names, free_ports(len(names), self._taken), strict=True)]

    def _start(self, name: str, args: List[str]) -> None:
        # Token auth turns itself on when ~/.ray/auth_token exists (another Ray user on this host
        # may have made one); this throwaway loopback cluster opts out, like the driver does.
        env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled", **{MARKER: f"{self.tag}-{name}"})
        # A dead node is noticed after period x threshold; the defaults (seconds) only slow the test.
        env.setdefault("RAY_health_check_period_ms", "1000")
        env.setdefault("RAY_health_check_failure_threshold", "5")
        common = [
            "--block",
            "--node-ip-address=127.0.0.1",
            f"--num-cpus={self.cpus}",
            f"--object-store-memory={self.store}",
            f'--resources={{"nx_node_{name}": 1}}',
            "--disable-usage-stats",
        ]
        log = open(self.root / f"{name}.log", "wb")
        self.procs[name] = subprocess.Popen([self.ray, "start", *common, *args, *self._ports()], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def start(self, workers: int = 1, timeout_s: float = 120.0) -> "LocalCluster":
        """Start the head and ``workers`` more nodes; return once all are alive in the cluster."""
        self.root.mkdir(parents=True, exist_ok=True)
        self._start(
            "head",
            [
                "--head",
                f"--port={self.port}",
                f"--temp-dir={self.root / 't'}",
                "--include-dashboard=false",
                *self._port_flags(["dashboard", "ray-client-server"]),
            ],
        )
        self._wait_port(timeout_s)
        names = {f"w{i + 1}" for i in range(workers)}
        for name in sorted(names):
            self.add_node(name)
        self.wait_alive(names | {"head"}, timeout_s)
        return self

    def add_node(self, name: str) -> None:
        """Start one more node joining the head."""
        self._start(name, [f"--address={self.address}"])

    def _wait_port(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.procs["head"].poll() is not None:
                raise RuntimeError(f"ray head exited: {(self.root / 'head.log').read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.5)
        raise TimeoutError(f"ray head did not listen on {self.address} within {timeout_s} s")

    def alive(self) -> Dict[str, str]:
        """node name -> Ray node id, for the nodes alive now (needs ray.init to this cluster)."""
        import ray

        out = {}
        for node in ray.nodes():
            for key in node["Resources"] if node["Alive"] else ():
                if key.startswith("nx_node_"):
                    out[key[len("nx_node_") :]] = node["NodeID"]
        return out

    def wait_alive(self, names: Set[str], timeout_s: float = 120.0) -> Dict[str, str]:
        """Wait until exactly the nodes ``names`` are alive (connecting this process if needed); their ids."""
        import ray

        if not ray.is_initialized():
            ray.init(address=self.address, log_to_driver=False)
        deadline = time.monotonic() + timeout_s
        while set(self.alive()) != names:
            if time.monotonic() > deadline:
                raise TimeoutError(f"ray nodes alive: {sorted(self.alive())}, not {sorted(names)} after {timeout_s} s; logs in {self.root}")
            time.sleep(0.5)
        return self.alive()

    def kill_node(self, name: str) -> List[int]:
        """SIGKILL every process of node ``name`` at once (raylet, agents, workers); their pids."""
        proc = self.procs.pop(name, None)
        # Ray's agents overwrite their environment block (setproctitle), so the marker alone misses
        # them: the process tree below the node's `ray start`, taken before anything dies, has them.
        pids = sorted(set(marked(f"{self.tag}-{name}") + ([proc.pid] + descendants(proc.pid) if proc else [])))
        kill_all(pids)
        if proc is not None:
            proc.wait(timeout=30)
        return pids

    def stop(self) -> None:
        """Kill every node this cluster started, then sweep what a dying parent orphaned."""
        try:
            import ray

            if ray.is_initialized():
                ray.shutdown()
        finally:
            for name in list(self.procs):
                self.kill_node(name)
            for _ in range(2):
                kill_all(marked(self.tag, prefix=True) + holding(self.root))
                time.sleep(0.2)
