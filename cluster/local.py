"""A Ray cluster of several nodes on this one machine, all on loopback: for tests, benchmarks.

    .venv/bin/python -m demofactory.cluster.local --nodes 2 --cpus 1     # prints the address;
    Ctrl-C stops it
    export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
    .venv/bin/factory run scene_specs/lift.yaml --address 127.0.0.1:PORT

Each node is a `ray start --block` process (head first, then the others joining it), started
in its own session. `ray start --block` shares its fate with the node's processes (the kernel
kills them when it dies), so stopping a node is a SIGTERM to that one PID: nothing here
searches processes by name, and other Ray clusters on the machine are left alone (`ray stop`
would stop every one of them).

Loopback only: `ray start` swaps 127.0.0.1 for the machine's outward IP so that other
machines could reach the node. Here every node is on this machine, so the node process is
started with that swap turned off (`_LOOPBACK_NODE`). A driver connecting to such a cluster
needs `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` (`driver_env()`), which makes Ray's address
helpers answer 127.0.0.1 in that process too.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from demofactory.cluster.reaper import descendants, start_time

# Runs `ray start` with Ray's "make 127.0.0.1 reachable from elsewhere" rewrite turned off.
_LOOPBACK_NODE = """
import sys
import ray._private.services as services
from ray._common.network_utils import is_localhost
services.get_node_ip_address = lambda address=None: "127.0.0.1"
services.resolve_ip_for_localhost = lambda host: "127.0.0.1" if is_localhost(host) else host
from ray.scripts.scripts import main
sys.argv = ["ray", "start", *sys.argv[1:]]
sys.exit(main())
"""
_READY = "Ray runtime started"


# `ray start` flags for every port a node opens: Ray's defaults (52365, 10001, ...) clash with
# other clusters on the machine, so each is chosen free.
NODE_PORT_FLAGS = (
    "node-manager-port",
    "object-manager-port",
    "dashboard-agent-listen-port",
    "dashboard-agent-grpc-port",
    "metrics-export-port",
    "runtime-env-agent-port",
)


# What a node's log says when a port drawn free was taken by someone else before the node bound
# it: then the node is started again with other ports.
_PORT_TAKEN_MESSAGES = ("is used by other components", "Address already in use")
PORT_RETRIES = 2


class _PortTaken(RuntimeError):
    """A node did not start: one of its ports was taken."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS picks it)."""
    return free_ports(1)[0]


def free_ports(count: int, taken: tuple[int, ...] = ()) -> list[int]:
    """`count` different TCP ports free on 127.0.0.1 now, none of `taken`. The probes stay
    bound until all are drawn: one at a time, the OS may hand out the same port twice (a node
    then refuses to start: "port ... is used by other components")."""
    probes: list[socket.socket] = []
    try:
        ports: list[int] = []
        while len(ports) < count:
            probe = socket.socket()
            probes.append(probe)
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
            if port not in taken:
                ports.append(port)
        return ports
    finally:
        for probe in probes:
            probe.close()


def driver_env(base: dict | None = None) -> dict:
    """Environment for a driver process (`factory run --address 127.0.0.1:PORT`) of a
    LocalCluster."""
    env = dict(os.environ if base is None else base)
    env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # Ray's address helpers answer 127.0.0.1
    env["RAY_AUTH_MODE"] = "disabled"  # a loopback cluster of our own: no token
    return env


@dataclass
class LocalCluster:
    """Ray nodes on this machine: `cpus[i]` CPUs on node i (node 0 is the head)."""

    cpus: tuple[int, ...] = (1, 1)
    gpus: int = 0
    object_store_bytes: int = 200 * 1024 * 1024
    start_timeout_s: float = 90.0
    temp_dir: Path = field(
        default_factory=lambda: Path(tempfile.mkdtemp(prefix="rayl", dir="/tmp"))
    )
    port: int = 0  # the head's GCS port; 0: one drawn free (and drawn again if it is taken)
    nodes: list[subprocess.Popen] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._port_drawn = self.port == 0
        if self._port_drawn:
            self.port = free_port()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> LocalCluster:
        """Start the head, then the other nodes; returns once every node says it is up."""
        try:
            for i, cpus in enumerate(self.cpus):
                self._start_node(i, cpus)
        except BaseException:
            self.stop(remove_logs=False)  # the error names a log in temp_dir
            raise
        return self

    def _start_node(self, index: int, cpus: int) -> None:
        """Start node `index`; once more with other ports (up to PORT_RETRIES times) when a
        port drawn free was taken before Ray bound it (another process on the machine)."""
        for attempt in range(PORT_RETRIES + 1):
            try:
                self._start_node_once(index, cpus)
                return
            except _PortTaken:
                failed = self.nodes.pop()
                try:  # whatever it started before it failed (its own session)
                    os.killpg(failed.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                if attempt == PORT_RETRIES:
                    raise
                if index == 0 and self._port_drawn:  # the head's own port may be the one taken
                    self.port = free_port()

    def _start_node_once(self, index: int, cpus: int) -> None:
        log = self.temp_dir / f"node{index}.log"
        ports = free_ports(len(NODE_PORT_FLAGS), taken=(self.port,))
        args = [
            f"--num-cpus={cpus}",
            f"--num-gpus={self.gpus}",
            "--block",
            "--disable-usage-stats",
            f"--object-store-memory={self.object_store_bytes}",
            "--min-worker-port=0",
            "--max-worker-port=0",
            *(f"--{name}={port}" for name, port in zip(NODE_PORT_FLAGS, ports, strict=True)),
        ]
        if index == 0:
            args += [
                "--head",
                f"--port={self.port}",
                "--include-dashboard=false",
                f"--temp-dir={self.temp_dir}",
            ]
        else:
            args += [f"--address={self.address}"]
        with open(log, "w") as out:
            node = subprocess.Popen(
                [sys.executable, "-c", _LOOPBACK_NODE, *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=driver_env() | {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1"},
            )
        self.nodes.append(node)
        deadline = time.monotonic() + self.start_timeout_s
        while _READY not in log.read_text():
            if node.poll() is not None or time.monotonic() > deadline:
                text = log.read_text()
                tail = "\n".join(text.splitlines()[-15:])
                message = f"ray node {index} did not start (see {log}):\n{tail}"
                if node.poll() is not None and any(m in text for m in _PORT_TAKEN_MESSAGES):
                    raise _PortTaken(message)
                raise RuntimeError(message)
            time.sleep(0.2)

    def add_node(self, cpus: int = 1) -> int:
        """Start one more node joining the running cluster; returns its index."""
        index = len(self.nodes)
        self._start_node(index, cpus)
        self.cpus = (*self.cpus, cpus)
        return index

    def processes(self, index: int | None = None) -> dict[int, str]:
        """PID -> command line (a Ray worker's shows its title, e.g. `ray::_ShardActor.run_shard`)
        of every process below this cluster's nodes (below node `index` only, when given)."""
        found = {}
        for node in self.nodes if index is None else [self.nodes[index]]:
            if node.poll() is None:
                for pid in descendants(node.pid):
                    try:
                        found[pid] = (
                            (Path("/proc") / str(pid) / "cmdline")
                            .read_bytes()
                            .replace(b"\0", b" ")
                            .decode()
                            .strip()
                        )
                    except OSError:
                        continue  # exited meanwhile
        return found

    def stop(self, timeout_s: float = 20.0, remove_logs: bool = True) -> list[int]:
        """SIGTERM each node (workers first), SIGKILL what of ours is left, remove temp_dir.

        Returns the PIDs that had to be SIGKILLed (none when Ray stopped cleanly).
        """
        ours = {
            pid: t
            for node in self.nodes
            if node.poll() is None
            for pid, t in descendants(node.pid).items()
        }
        for node in reversed(self.nodes):
            if node.poll() is None:
                node.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for node in reversed(self.nodes):
            try:
                node.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                node.kill()
                node.wait()
        while ours and time.monotonic() < deadline:
            # same process, still there
            ours = {pid: t for pid, t in ours.items() if start_time(pid) == t}
            time.sleep(0.2)
        for pid in ours:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.nodes.clear()
        if remove_logs:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
        return sorted(ours)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--cpus", type=int, default=1, help="CPUs per node")
    args = parser.parse_args()
    with LocalCluster(cpus=(args.cpus,) * args.nodes) as cluster:
        print(
            f"{args.nodes} nodes up; driver: RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 "
            "factory run SPEC --address "
            f"{cluster.address} (logs: {cluster.temp_dir}); Ctrl-C stops",
            flush=True,
        )
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
