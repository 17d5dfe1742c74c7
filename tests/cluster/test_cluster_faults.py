"""Ray at scale, on a real two-node cluster on loopback: shards spread over nodes, faults survived.

Every run below must end with the dataset an uninterrupted single-process run writes (same
shard sha256s, same episodes.jsonl): a worker SIGKILLed mid-shard, a disk that fills up (writes
to /dev/full fail with ENOSPC from the kernel), then the re-run once it is fixed SIGKILLed
mid-run and re-run. `factory run` runs as a subprocess, as users run it.
Last, a driver that started its own local cluster is SIGKILLed: no process of it may remain.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import write_spec

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("ray.scripts.scripts") is None,
        reason="`ray start` is unavailable (no ray.scripts)",
    ),
    pytest.mark.sim,
    pytest.mark.ray,
    pytest.mark.slow,
]

FACTORY = str(Path(sys.executable).parent / "factory")
# A worker process's title; `ray::_ShardActor.run_shard` while it runs a shard.
ACTOR = "ray::_ShardActor"


@pytest.fixture(scope="module")
def lowdim_spec(tmp_path_factory) -> Path:
    """Lift, physics and low-dimensional data only: 16 attempts in 8 shards. Enough work that
    both nodes' actors get shards: with 4 shards of ~1.5 s, the first actor up could finish them
    all while the other node's was still building its env (seen once the loop got faster)."""
    return write_spec(
        tmp_path_factory.mktemp("spec") / "cluster_lift.yaml",
        name="cluster_lift",
        task={"horizon": 400},
        generation={"attempts": 16, "attempts_per_shard": 2},
        cameras=[],
    )


@pytest.fixture(scope="module")
def reference(lowdim_spec, tmp_path_factory) -> Path:
    """The dataset written in this process, shard after shard, without Ray."""
    from demofactory.build.pipeline import ShardWorker
    from demofactory.build.records import plan_shards
    from demofactory.build.run import DatasetRecorder
    from demofactory.seeds.resolve import resolve_spec
    from demofactory.specs.spec import load_spec

    out = tmp_path_factory.mktemp("reference")
    resolved = resolve_spec(load_spec(lowdim_spec))
    worker = ShardWorker(resolved.spec, resolved.demos, resolved.scene)
    recorder = DatasetRecorder(out, {})
    for task in plan_shards(resolved.spec):
        recorder.record(worker.run_shard(task, out))
    recorder.commit()
    recorder.finish(0.0)
    return out


@pytest.fixture(scope="module")
def two_nodes():
    """A head and a worker node, one CPU each, on 127.0.0.1; stopped by PID afterwards."""
    from demofactory.cluster.local import LocalCluster

    cluster = LocalCluster(cpus=(1, 1)).start()
    try:
        yield cluster
    finally:
        assert (
            cluster.stop() == []
        )  # SIGTERM to each `ray start --block` ended every process of the cluster


def factory_run(
    spec: Path,
    out: Path,
    cluster,
    workers: int | None = 2,
    wait: bool = True,
    address: str = "flag",
):
    """`factory run` on `cluster`, its address given as `--address HOST:PORT` ("flag"), in
    RAY_ADDRESS ("env"), or as `--address auto` with RAY_ADDRESS set (a `ray job submit`).
    `workers` None: no --workers (a worker a CPU of the cluster, growing as nodes join)."""
    from demofactory.cluster.local import driver_env

    cmd = [FACTORY, "run", str(spec), "--out", str(out)]
    cmd += ["--workers", str(workers)] if workers is not None else []
    cmd += {"flag": ["--address", cluster.address], "env": [], "auto": ["--address", "auto"]}[
        address
    ]
    env = driver_env()
    env.pop("RAY_ADDRESS", None)
    if address != "flag":
        env["RAY_ADDRESS"] = cluster.address
    proc = subprocess.Popen(
        [*cmd, "--no-progress"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    if not wait:
        return proc
    stdout, stderr = proc.communicate(timeout=300)
    return proc.returncode, stdout, stderr


def listed(out: Path) -> dict[str, str]:
    from demofactory.shards import load_manifest

    return (
        {s.name: s.sha256 for s in load_manifest(out).shards}
        if (out / "manifest.json").exists()
        else {}
    )


def assert_same_dataset(out: Path, reference: Path) -> None:
    from demofactory.shards import shards_dir, verify_shard
    from demofactory.shards.manifest import load_manifest
    from demofactory.shards.stats import sidecar_path

    assert listed(out) == listed(reference)
    assert all(verify_shard(out, info) for info in load_manifest(out).shards)
    assert (out / "episodes.jsonl").read_bytes() == (reference / "episodes.jsonl").read_bytes()
    # merged from per-shard statistics in whatever order the shards finished: same bytes
    assert (out / "stats.json").read_bytes() == (reference / "stats.json").read_bytes()
    shards = load_manifest(out).shards
    sidecars = [sidecar_path(Path(info.name)).name for info in shards if info.samples > 0]
    assert sorted(p.name for p in shards_dir(out).iterdir()) == sorted(
        [*listed(reference), *sidecars]
    )  # no temporaries


def wait_for(condition, timeout_s: float = 120.0, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def actors(cluster, running: bool = False) -> list[int]:
    title = f"{ACTOR}.run_shard" if running else ACTOR
    return sorted(pid for pid, cmd in cluster.processes().items() if cmd.startswith(title))


@pytest.mark.parametrize("address", ["flag", "env", "auto"])
def test_two_nodes_both_run_shards_and_write_the_single_process_dataset(
    two_nodes, lowdim_spec, reference, tmp_path, address
):
    # Two nodes in generation.json: the run joined this cluster (a local one has one node).
    code, stdout, stderr = factory_run(
        lowdim_spec, tmp_path / "out", two_nodes, workers=2, address=address
    )
    assert code == 0, stderr
    generation = json.loads((tmp_path / "out" / "generation.json").read_text())
    nodes = {entry["node"] for entry in generation["shards"].values()}
    assert len(nodes) == 2 and all(len(n) == 56 for n in nodes)  # Ray node ids (hex)
    assert_same_dataset(tmp_path / "out", reference)


def test_a_worker_killed_mid_shard_is_replaced_and_the_shard_redone(
    two_nodes, lowdim_spec, reference, tmp_path
):
    proc = factory_run(lowdim_spec, tmp_path / "out", two_nodes, workers=2, wait=False)
    victim = wait_for(lambda: actors(two_nodes, running=True), what="a worker running a shard")[0]
    time.sleep(0.5)  # inside the shard's attempts, well before its write
    os.kill(victim, signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    assert re.search(
        rf"warning: worker pid {victim} on node \w+ died during shard-\d+\.tar "
        r".*the shard is redone",
        stderr,
    ), stderr
    assert_same_dataset(tmp_path / "out", reference)


def test_a_node_lost_and_a_node_joining_mid_run_give_the_same_dataset(
    lowdim_spec, reference, tmp_path
):
    """The head has no CPU, so node 1 runs every shard. Mid-run (node 1's worker held by
    SIGSTOP in its shard, so that the rest of the work waits) a node joins and takes work: the
    auto-sized pool grows. Then node 1's raylet is SIGKILLed, which loses the node and its
    worker with the held shard. The run finishes on the new node with the bytes of an
    uninterrupted run."""
    from demofactory.cluster.local import LocalCluster

    out = tmp_path / "out"
    with LocalCluster(cpus=(0, 1)) as cluster:
        proc = factory_run(lowdim_spec, out, cluster, workers=None, wait=False)
        try:

            def running_on(node: int) -> list[int]:
                return [
                    pid
                    for pid, cmd in cluster.processes(node).items()
                    if cmd.startswith(f"{ACTOR}.run_shard")
                ]

            busy = wait_for(lambda: running_on(1), what="a shard running on node 1")
            os.kill(busy[0], signal.SIGSTOP)  # held mid-shard: the queue waits for the new node
            joined = cluster.add_node(cpus=1)
            wait_for(lambda: running_on(joined), what="a shard running on the node that joined")
            node1 = cluster.processes(1)
            raylet = [pid for pid, cmd in node1.items() if cmd.split()[0].endswith("raylet")]
            assert len(raylet) == 1, node1
            os.kill(raylet[0], signal.SIGKILL)  # node 1 is lost, its worker with it
            stdout, stderr = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, stderr
    assert_same_dataset(out, reference)
    died = re.search(
        rf"warning: worker pid {busy[0]} on node (\w+) died during (shard-\d+\.tar)", stderr
    )
    assert died, stderr  # the held worker, named with its node and its shard
    node1, held = died.groups()
    generation = json.loads((out / "generation.json").read_text())
    # the held shard was redone, and finished by the node that joined, not by node 1 (which may
    # have finished a shard before it was held: the poll above can miss a short first shard)
    assert not generation["shards"][held]["node"].startswith(node1), generation["shards"][held]


def test_a_full_disk_then_a_killed_driver_are_resumed_to_the_same_dataset(
    two_nodes, lowdim_spec, reference, tmp_path
):
    """Two faults on one dataset (one `factory run` fewer than a dataset per fault): a disk
    that fills up stops the run in one line keeping the finished shards; once it is fixed, the
    re-run's driver is SIGKILLed after it listed a shard; the next re-run finishes with the
    bytes of an uninterrupted run, redoing no listed shard."""
    out = tmp_path / "out"
    wait_for(
        lambda: not actors(two_nodes), timeout_s=60, what="the workers of earlier runs to exit"
    )
    proc = factory_run(lowdim_spec, out, two_nodes, workers=1, wait=False)
    worker = wait_for(lambda: actors(two_nodes), what="the worker")[0]
    first = wait_for(lambda: listed(out), what="the first shard in manifest.json")
    # From now on this worker's shard files land on /dev/full: every write fails with ENOSPC.
    for index in range(1, len(listed(reference))):
        (out / "shards" / f".shard-{index:06d}.tar.tmp-{worker}").symlink_to("/dev/full")
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 2, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr
    assert re.fullmatch(
        rf"error: {re.escape(str(out.resolve()))}/shards/shard-\d{{6}}\.tar: "
        r"cannot write the shard: "
        r"\[Errno 28\] No space left on device; .*run the same command again to resume",
        errors[0],
    ), errors[0]
    kept = listed(out)
    assert (
        first.items() <= kept.items() and kept.items() <= listed(reference).items()
    )  # finished, intact
    assert len(kept) < len(listed(reference))

    for link in (out / "shards").glob(".shard-*"):  # the disk is "fixed"
        link.unlink()
    wait_for(lambda: not actors(two_nodes), timeout_s=60, what="the stopped run's workers to exit")
    proc = factory_run(lowdim_spec, out, two_nodes, workers=1, wait=False)
    wait_for(lambda: len(listed(out)) > len(kept), what="a shard of the re-run in manifest.json")
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    before = listed(out)
    assert kept.items() <= before.items() and len(before) < len(listed(reference))  # mid-run
    # Ray ends the dead driver's actors: nothing of that run is left on the cluster.
    wait_for(lambda: not actors(two_nodes), timeout_s=60, what="the killed run's workers to exit")
    mtimes = {name: (out / "shards" / name).stat().st_mtime_ns for name in before}

    code, stdout, stderr = factory_run(lowdim_spec, out, two_nodes, workers=2)
    assert code == 0, stderr
    assert_same_dataset(out, reference)
    assert {
        name: (out / "shards" / name).stat().st_mtime_ns for name in before
    } == mtimes  # kept, not redone


def test_a_driver_killed_with_its_own_local_cluster_leaves_no_ray_process(lowdim_spec, tmp_path):
    """Without --address the CLI starts a local cluster; SIGKILLed, it must not leave it running."""
    from demofactory.cluster.local import driver_env
    from demofactory.cluster.reaper import descendants, start_time

    out = tmp_path / "out"
    proc = subprocess.Popen(
        [FACTORY, "run", str(lowdim_spec), "--out", str(out), "--workers", "1", "--no-progress"],
        env=driver_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: dict[int, int] = {}  # pid -> start time of everything below the driver
    names: list[str] = []

    def first_shard_listed():
        for pid, t in descendants(proc.pid).items():  # gcs, raylet, agents, the worker, the reaper
            if pid not in seen:
                seen[pid] = t
                try:
                    names.append(Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"))
                except OSError:
                    pass  # exited meanwhile
        return listed(out)

    wait_for(first_shard_listed, what="the first shard in manifest.json")
    assert any("raylet" in name for name in names)
    proc.kill()
    proc.communicate(timeout=60)
    wait_for(
        lambda: not [pid for pid, t in seen.items() if start_time(pid) == t],
        timeout_s=30,
        what="every process of the killed driver's cluster to exit",
    )


def test_a_node_given_a_port_twice_starts_again_with_other_ports(monkeypatch):
    """A CI run failed when two ports drawn one at a time came out equal and Ray refused the
    node ("port ... is used by other components"). Ports are now drawn at once, and a node
    that Ray refuses for a port is started again with other ports."""
    import demofactory.cluster.local as local

    real, draws = local.free_ports, []

    def first_draw_repeats_a_port(count, taken=()):
        ports = real(count, taken)
        if count == len(local.NODE_PORT_FLAGS):  # a node's ports (not the head's own port)
            draws.append(ports)
            if len(draws) == 1:
                ports[1] = ports[0]  # node manager and object manager on one port
        return ports

    monkeypatch.setattr(local, "free_ports", first_draw_repeats_a_port)
    cluster = local.LocalCluster(cpus=(1,))
    try:
        cluster.start()
        assert len(draws) == 2 and len(cluster.nodes) == 1
        assert cluster.nodes[0].poll() is None
        assert "Ray runtime started" in (cluster.temp_dir / "node0.log").read_text()
    finally:
        cluster.stop()
