"""The cluster's pure parts, without Ray: GPU → EGL device mapping, the progress line, the
driver's bookkeeping (commit spacing, failed writes, the directory lock), the cluster configs.

GPU ids are the one thing faked here: this machine has no GPU, so the mapping is fed the id
lists Ray would return.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from demofactory.build.progress import (
    ProgressState,
    RunProgress,
    eta_seconds,
    format_duration,
    format_progress,
)
from demofactory.cluster.gpu import GpuRenderError, egl_device_for, gpu_render_env
from demofactory.errors import UserError

REPO = Path(__file__).resolve().parents[2]


# --- GPU rendering -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ids, expected",
    [
        ([], None),
        (["0"], 0),
        (
            ["3"],
            3,
        ),  # the node's 4th GPU: EGL lists every GPU, CUDA_VISIBLE_DEVICES does not apply to it
        ([2, 5], 2),  # several assigned: the first renders
        (["7", "6"], 7),
    ],
)
def test_egl_device_is_the_first_assigned_gpu_ordinal(ids, expected):
    assert egl_device_for(ids) == expected


def test_egl_device_of_a_gpu_uuid_is_its_place_in_the_machine_list():
    machine = ["GPU-aaaa-1111", "GPU-bbbb-2222", "GPU-cccc-3333"]
    assert egl_device_for(["GPU-cccc-3333"], machine) == 2
    with pytest.raises(GpuRenderError, match="GPU-dddd.*not among this machine's GPUs"):
        egl_device_for(["GPU-dddd-4444"], machine)


def test_a_mig_slice_cannot_render():
    with pytest.raises(GpuRenderError, match="MIG"):
        egl_device_for(["MIG-5f2a1c3e-aaaa"], [])


def test_gpu_render_env_selects_egl_on_that_device():
    assert gpu_render_env(["3"]) == {
        "MUJOCO_GL": "egl",
        "PYOPENGL_PLATFORM": "egl",
        "MUJOCO_EGL_DEVICE_ID": "3",
    }
    assert gpu_render_env([]) == {}


def test_the_actor_module_and_its_arguments_do_not_import_mujoco():
    """The actor picks its EGL device in __init__: mujoco must not be imported before that."""
    # What crosses to the actor: the worker factory (and the spec in it), then the demos.
    code = (
        "import sys, demofactory.cluster.runner, demofactory.build.worker_factory, "
        "demofactory.generators.records; "
        "print(sorted({'mujoco', 'robosuite'} & set(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert out.stdout.strip() == "[]"


def test_gpus_per_worker_from_the_environment(monkeypatch, tiny_lift_spec):
    from demofactory.build.run import GPUS_ENV, gpus_per_worker
    from demofactory.specs.spec import load_spec

    spec = load_spec(tiny_lift_spec)
    monkeypatch.delenv(GPUS_ENV, raising=False)
    assert gpus_per_worker(spec) == 0.0
    monkeypatch.setenv(GPUS_ENV, "0.25")
    assert gpus_per_worker(spec) == 0.25
    monkeypatch.setenv(GPUS_ENV, "one")
    with pytest.raises(UserError, match=rf"\${GPUS_ENV}: expected a number >= 0 .* got 'one'"):
        gpus_per_worker(spec)


# --- progress ------------------------------------------------------------------------------------


def test_progress_line_shows_shards_attempts_successes_rate_eta_workers():
    state = ProgressState(
        shards_total=10,
        attempts_total=50,
        shards_done=4,
        attempts=20,
        successes=9,
        workers=2,
        attempts_run=20,
        successes_run=9,
    )
    line = format_progress(state, elapsed_s=120.0)
    assert line == (
        "shards 4/10 · attempts 20/50 · successes 9 (45%) · 4.5 ep/min · ETA 3m00s · workers 2"
    )


def test_rates_and_eta_count_only_this_run():
    # 30 attempts kept from an earlier run; this run did 10 in 60 s: 10 left take 60 s more.
    state = ProgressState(
        shards_total=8,
        attempts_total=50,
        attempts=40,
        successes=20,
        attempts_run=10,
        successes_run=6,
    )
    assert eta_seconds(state, 60.0) == pytest.approx(60.0)
    assert "6.0 ep/min" in format_progress(state, 60.0)
    assert (
        eta_seconds(ProgressState(shards_total=1, attempts_total=5), 10.0) is None
    )  # nothing done yet


def test_eta_with_a_success_target_ends_at_the_target():
    state = ProgressState(
        shards_total=100,
        attempts_total=1000,
        target_successes=20,
        attempts=10,
        successes=10,
        attempts_run=10,
        successes_run=10,
    )
    assert eta_seconds(state, 10.0) == pytest.approx(
        10.0
    )  # 10 more successes at 1/s, not 990 attempts
    assert "successes 10/20 (100%)" in format_progress(state, 10.0)


@pytest.mark.parametrize(
    "seconds, text", [(None, "?"), (0.4, "0s"), (42, "42s"), (185, "3m05s"), (7620, "2h07m")]
)
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


def test_run_progress_counts_events_and_warns_without_a_bar(capsys):
    now = [0.0]
    state = ProgressState(shards_total=3, attempts_total=6)
    with RunProgress(state, enabled=False, clock=lambda: now[0]) as progress:
        progress.resumed(shards=1, attempts=2, successes=1)
        progress.workers(2)
        now[0] = 30.0
        for ok in (True, False):
            progress.attempt(1, ok)
        progress.shard_done()
        progress.warn(
            "worker pid 12 on node abcd1234 died during shard-000001.tar (x); the shard is redone"
        )
    assert (state.shards_done, state.attempts, state.successes, state.workers) == (2, 4, 2, 2)
    assert (state.attempts_run, state.successes_run) == (2, 1)
    assert capsys.readouterr().err == (
        "warning: worker pid 12 on node abcd1234 died during shard-000001.tar (x); "
        "the shard is redone\n"
    )


# --- the driver's bookkeeping --------------------------------------------------------------------


def _result(out: Path, index: int):
    """A finished, empty shard (a real tar) and its result record."""
    from demofactory.build.records import ShardResult, ShardTask
    from demofactory.shards import shards_dir, write_shard

    shards_dir(out).mkdir(parents=True, exist_ok=True)
    info = write_shard([], shards_dir(out), index)
    task = ShardTask(index, (2 * index, 2 * index + 1))
    return ShardResult(
        task=task,
        info=info,
        attempts=2,
        successes=0,
        failures={"horizon": 2},
        episodes=(),
        wall_s=0.5,
        node="f" * 56,
    )


def test_commits_are_journal_lines_and_fsyncs_are_spaced_once_they_get_expensive(
    tmp_path, monkeypatch
):
    from demofactory.build.run import DatasetRecorder
    from demofactory.shards import load_manifest
    from demofactory.shards.journal import JournalWriter

    now, syncs = [0.0], []

    def clock():  # every call is 1 s later: each fsync "takes" 1 s
        now[0] += 1.0
        return now[0]

    real_sync = JournalWriter.sync
    monkeypatch.setattr(JournalWriter, "sync", lambda self: syncs.append(now[0]) or real_sync(self))
    recorder = DatasetRecorder(tmp_path, {}, clock=clock)
    recorder.record(_result(tmp_path, 0))  # committed by its line; the first fsync is immediate
    assert [s.name for s in load_manifest(tmp_path).shards] == ["shard-000000.tar"]
    assert load_manifest(tmp_path, with_journal=False).shards == ()  # manifest.json not rewritten
    assert len(syncs) == 1
    recorder.record(_result(tmp_path, 1))  # listed at once; its fsync waits (<= 5% of the time)
    assert len(load_manifest(tmp_path).shards) == 2 and len(syncs) == 1
    recorder.maybe_commit()  # asked again between shards, still too soon
    assert len(syncs) == 1
    now[0] += 20.0
    recorder.maybe_commit()  # 20 s on: the fsync costs 5% of the time, it goes ahead
    assert len(syncs) == 2
    recorder.finish(0.0)
    generation = json.loads((tmp_path / "generation.json").read_text())
    assert generation["shards"]["shard-000001.tar"]["node"] == "f" * 56


def test_one_driver_per_dataset_directory(tmp_path, tiny_lift_spec):
    from demofactory.build.output_dir import LOCK_FILENAME, check_output_dir, lock_output_dir
    from demofactory.specs.spec import load_spec

    held = lock_output_dir(tmp_path)
    with pytest.raises(
        UserError, match=rf"another `factory run` is writing this dataset \(pid {os.getpid()} on "
    ):
        lock_output_dir(tmp_path)
    held.close()
    lock_output_dir(tmp_path).close()  # free again once the holder is gone
    # A directory holding only the lock (a driver killed before dataset_info.json) is still empty.
    assert [p.name for p in tmp_path.iterdir()] == [LOCK_FILENAME]
    assert check_output_dir(tmp_path, load_spec(tiny_lift_spec)) is False


# --- cluster configs -----------------------------------------------------------------------------


def test_cluster_launcher_config_has_head_cpu_and_gpu_groups_and_the_makefile_pins():
    config = yaml.safe_load((REPO / "cluster" / "cluster.yaml").read_text())
    assert config["provider"]["type"] == "aws"
    types = config["available_node_types"]
    assert config["head_node_type"] == "head" and set(types) == {
        "head",
        "cpu_workers",
        "gpu_workers",
    }
    assert types["head"]["resources"] == {"CPU": 0}
    assert types["gpu_workers"]["min_workers"] == 0  # optional
    setup = " ; ".join(config["setup_commands"])
    assert (
        setup.index("torch==2.13.0")
        < setup.index("demofactory[dev]")
        < setup.index("ray[default]==2.60.0")
    )
    for command in config["head_start_ray_commands"] + config["worker_start_ray_commands"]:
        if "ray start" in command:
            assert "MUJOCO_GL=egl" in command and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in command


def test_rayjob_runs_factory_on_a_head_and_cpu_and_gpu_groups():
    job = yaml.safe_load((REPO / "cluster" / "rayjob.yaml").read_text())
    assert (job["apiVersion"], job["kind"]) == ("ray.io/v1", "RayJob")
    spec = job["spec"]
    assert spec["entrypoint"].startswith("factory run ") and "--address auto" in spec["entrypoint"]
    assert spec["rayClusterSpec"]["rayVersion"] == "2.60.0"
    assert spec["rayClusterSpec"]["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    groups = {g["groupName"]: g for g in spec["rayClusterSpec"]["workerGroupSpecs"]}
    assert set(groups) == {"cpu", "gpu"}
    gpu = groups["gpu"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert gpu["nvidia.com/gpu"] == "1"
    for pod in [spec["rayClusterSpec"]["headGroupSpec"], *groups.values()]:
        mounts = pod["template"]["spec"]["containers"][0]["volumeMounts"]
        assert {"name": "shared", "mountPath": "/shared"} in mounts  # workers write shards there


# --- the reaper of a driver's own local cluster -------------------------------------------------


def test_the_reaper_ends_the_watched_processes_and_no_others():
    from demofactory.cluster.reaper import release, start_time, watch_local_cluster

    ray_like = subprocess.Popen(["sleep", "60"])  # stands for the gcs/raylet ray.init started
    bystander = subprocess.Popen(["sleep", "60"])  # another child of the same driver
    try:
        reaper = watch_local_cluster({ray_like.pid: start_time(ray_like.pid)})
        release(reaper)  # as when the driver ends: stdin closes
        assert reaper.wait(timeout=30) == 0
        assert ray_like.wait(timeout=5) == -9  # SIGKILLed after the grace period
        assert bystander.poll() is None
    finally:
        for proc in (ray_like, bystander):
            proc.kill()
            proc.wait()
