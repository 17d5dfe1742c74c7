"""The batch stage on a real local Ray cluster: batch actors generate whole shards, the other
workers render and write them (ClusterConfig.batch_gpus; what `generation.backend: mjwarp`
runs on Ray). The stage does not know which physics generates: here the CPU backend's
`ShardWorker.generate` stands in for MuJoCo Warp (which this suite does not need installed), so
the dataset must be, byte for byte, the one a single process writes, whatever dies on the way.

Faults are real process deaths (os._exit in the actor), each injected once, in one run: a
batch actor mid-generation (the shard is generated again, by a new one) and a render worker
holding a generated shard (the shard is rendered again from the same attempts, not generated
again).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import write_spec

pytestmark = [pytest.mark.sim, pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(scope="module")
def batch_spec(tmp_path_factory) -> Path:
    """Lift, low-dimensional: 4 attempts in 2 shards (physics and shard writing only)."""
    return write_spec(
        tmp_path_factory.mktemp("spec") / "batch_lift.yaml",
        name="batch_lift",
        task={"horizon": 400},
        generation={"attempts": 4, "attempts_per_shard": 2},
        cameras=[],
    )


@pytest.fixture(scope="module")
def resolved(batch_spec):
    from demofactory.robots import repairs
    from demofactory.seeds.resolve import resolve_spec
    from demofactory.specs.spec import load_spec

    repairs.install()
    return resolve_spec(load_spec(batch_spec))


@pytest.fixture(scope="module")
def reference(resolved, tmp_path_factory) -> dict[str, str]:
    """sha256 of each shard one process writes, shard after shard, without Ray."""
    from demofactory.build.pipeline import ShardWorker
    from demofactory.build.records import plan_shards

    out = tmp_path_factory.mktemp("reference")
    worker = ShardWorker(resolved.spec, resolved.demos, resolved.scene)
    for task in plan_shards(resolved.spec):
        worker.run_shard(task, out)
    return shard_sums(out)


def shard_sums(out: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((out / "shards").glob("shard-*.tar"))
    }


@dataclass(frozen=True)
class FaultyFactory:
    """Builds the spec's ShardWorker wrapped so that the actor dies, once for each
    (stage, shard) of `faults` (a marker file in `markers` says it happened): "generate", a
    batch actor in that shard's generation; "render", a render worker handed that shard's
    attempts. Every generate call appends its shard index to `log`."""

    spec: object
    log: str
    faults: tuple = ()
    markers: str = ""

    def __call__(self):
        from demofactory.build.worker_factory import ShardWorkerFactory

        return _Faulty(ShardWorkerFactory(self.spec)(), self)


class _Faulty:
    def __init__(self, worker, fault: FaultyFactory):
        self.worker, self.fault = worker, fault

    @property
    def demos(self):
        return self.worker.demos

    @demos.setter
    def demos(self, demos):
        self.worker.demos = demos

    def _maybe_die(self, stage: str, task) -> None:
        marker = Path(self.fault.markers) / f"{stage}-{task.index}"
        if (stage, task.index) in self.fault.faults and not marker.exists():
            marker.touch()
            os._exit(1)  # a real death: no exception, no clean-up

    def generate(self, task, device=None, out_dir=None):
        with open(self.fault.log, "a") as f:
            f.write(f"{task.index}\n")
        self._maybe_die("generate", task)
        return self.worker.generate(task, device, out_dir)

    def run_shard(self, task, out_dir, on_attempt=None, attempts=None):
        assert attempts is not None, "a batch stage's render worker generated a shard itself"
        self._maybe_die("render", task)
        return self.worker.run_shard(task, out_dir, on_attempt, attempts)


def run_with_batch_stage(resolved, out: Path, factory: FaultyFactory) -> tuple[list, list]:
    """The spec's shards on the session's Ray cluster (2 CPUs): one batch actor, one render
    worker. Returns (results in the order they landed, warnings)."""
    import ray
    from demofactory.build.records import plan_shards
    from demofactory.cluster.runner import ClusterConfig, ShardCluster

    # the actors cannot import this test module: its classes travel by value
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    config = ClusterConfig(workers=1, batch_gpus=1.0, batch_workers=1)
    tasks = plan_shards(resolved.spec)
    results, warnings = [], []
    with ShardCluster(factory, out, config, max_workers=len(tasks)) as cluster:
        cluster.run(resolved.demos, tasks, results.append, on_warning=warnings.append)
    return results, warnings


def generated(log: Path) -> list[int]:
    return sorted(int(line) for line in log.read_text().split())


def test_batch_actors_generate_render_workers_write_the_single_process_dataset(
    ray_cluster, resolved, reference, tmp_path
):
    log = tmp_path / "generated.log"
    results, warnings = run_with_batch_stage(
        resolved, tmp_path / "out", FaultyFactory(resolved.spec, str(log))
    )
    assert shard_sums(tmp_path / "out") == reference
    assert sorted(r.task.index for r in results) == [0, 1]
    assert generated(log) == [0, 1]  # each shard generated once, by the batch actor
    # the session's cluster has no GPU: said once, the batches ran on warp's CPU device
    assert [w for w in warnings if "no GPU" in w] == [
        "the cluster has no GPU: the batches of worlds run on warp's CPU device "
        "(for development; docs/mjwarp.md)"
    ]


def test_a_batch_actor_or_a_render_worker_dying_gives_the_same_dataset(
    ray_cluster, resolved, reference, tmp_path
):
    """Shard 1's batch actor dies while generating it: a new batch actor generates it again.
    The render worker handed shard 0's attempts dies: shard 0 is rendered again from the
    attempts already generated, not generated again."""
    log = tmp_path / "generated.log"
    factory = FaultyFactory(
        resolved.spec, str(log), faults=(("generate", 1), ("render", 0)), markers=str(tmp_path)
    )
    _, warnings = run_with_batch_stage(resolved, tmp_path / "out", factory)
    assert (tmp_path / "generate-1").exists() and (tmp_path / "render-0").exists()
    died = [w for w in warnings if "died during" in w]
    assert len(died) == 2, warnings
    assert any(
        w.startswith("batch actor pid ") and "died during shard-000001.tar" in w for w in died
    ), died
    assert any(w.startswith("worker pid ") and "died during shard-000000.tar" in w for w in died)
    assert generated(log) == [0, 1, 1]  # shard 1 twice; shard 0 once: its attempts were kept
    assert shard_sums(tmp_path / "out") == reference


def test_render_capacity_leaves_the_batch_stage_its_cpus_and_gpu_shares():
    from demofactory.cluster.runner import render_capacity

    assert render_capacity({"CPU": 16}) == 16
    assert render_capacity({"CPU": 16, "GPU": 1}, batchers=1, batch_share=0.5) == 15
    # render on the GPU too: a quarter each, beside a half-GPU batch actor
    assert render_capacity({"CPU": 16, "GPU": 1}, 0.25, batchers=1, batch_share=0.5) == 2
    assert render_capacity({"CPU": 16, "GPU": 2}, 0.25, batchers=2, batch_share=0.5) == 4
    assert render_capacity({"CPU": 16, "GPU": 8}, 0.5, batchers=1, batch_share=1.0) == 14
    assert render_capacity({"CPU": 1}, batchers=1) == 1  # one waits for room


def test_gpu_shares_that_leave_no_room_to_render_are_refused_in_one_line(tmp_path):
    """A cluster with one (declared) GPU: a batch actor's 0.75 and render workers' 0.5 cannot
    share it. Its own process: the session's cluster has no GPU."""
    script = textwrap.dedent(
        """
        import ray
        from demofactory.cluster.errors import ClusterError
        from demofactory.cluster.runner import ClusterConfig, ShardCluster

        ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)
        config = ClusterConfig(workers=1, gpus_per_worker=0.5, batch_gpus=0.75)
        try:
            ShardCluster(lambda: None, ".", config, max_workers=1)
        except ClusterError as err:
            print(err)
        ray.shutdown()
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == (
        "generation.batch_workers 1 x generation.gpus_per_batch 0.75 leave 0.25 of the "
        "cluster's 1 GPUs, less than one render worker's render.gpus_per_worker 0.5; "
        "lower one of them"
    )


def test_a_cluster_whose_cpus_the_batch_stage_takes_gives_up_in_one_line(tmp_path):
    """A cluster of one CPU this run did not start (it cannot add one, as it does to its own):
    the batch actor and the render worker each need a CPU, so whichever starts first, the
    other waits for a node to join. The run warns, waits $DEMOFACTORY_GPU_WAIT_S, then stops
    with one line instead of hanging. Its own process: a cluster of one CPU."""
    script = textwrap.dedent(
        """
        import os, time, ray
        os.environ["DEMOFACTORY_GPU_WAIT_S"] = "3"
        from demofactory.build.records import ShardTask
        from demofactory.cluster.errors import ClusterError
        from demofactory.cluster.runner import ClusterConfig, ShardCluster

        class Slow:  # a batch actor's worker whose shard takes a minute
            demos = None

            def generate(self, task, device=None, out_dir=None):
                time.sleep(60)
                return []

        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
        warnings, started = [], time.monotonic()
        try:
            config = ClusterConfig(workers=1, batch_gpus=1.0, batch_workers=1)
            with ShardCluster(Slow, ".", config, max_workers=1) as cluster:
                cluster.run([], [ShardTask(0, (0,))], print, on_warning=warnings.append)
        except ClusterError as err:
            print("error:", err)
        print("took", round(time.monotonic() - started))
        for line in warnings:
            print("warning:", line)
        ray.shutdown()
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    error = next(line for line in lines if line.startswith("error:"))
    assert error == (
        "error: no render worker and batch actor could both start within 3 s: the cluster has "
        "1 CPU and the batch stage's actors take 1 (generation.batch_workers, a CPU each), none "
        "left to render, and no node joined; add nodes, or wait longer with "
        "$DEMOFACTORY_GPU_WAIT_S"
    )
    took = int(next(line for line in lines if line.startswith("took")).split()[1])
    assert took < 60  # gave up at the deadline, not after the shard (or never)
    assert any("none left to render: the run waits" in line for line in lines), lines
