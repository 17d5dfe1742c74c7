"""The batched attempt loop (generation.backend: mjwarp) on warp's CPU device: a shard's Stack
attempts as one batch of worlds give successes recorded as the CPU path records them, and
`factory run` writes a dataset `factory inspect` reads, its backend recorded.

Needs the gpu extra (skipped, saying so, without it). Slow: warp's CPU device steps a Stack
world at ~0.003 of a CPU core (docs/mjwarp.md), so a batch of 2 attempts takes ~3 minutes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import NEEDS_MJWARP, SPECS, write_spec

pytestmark = [
    pytest.mark.sim,
    pytest.mark.slow,
    NEEDS_MJWARP,
]


@pytest.fixture(scope="module")
def resolved():
    from demofactory.robots import repairs
    from demofactory.seeds.resolve import resolve_spec
    from demofactory.specs.spec import load_spec

    repairs.install()
    return resolve_spec(load_spec(SPECS / "stack.yaml"))


def test_a_batch_of_stack_attempts_records_successes_as_the_cpu_path(resolved):
    from demofactory.build.batched import run_batch
    from demofactory.build.pipeline import ShardWorker
    from demofactory.build.records import ShardTask
    from demofactory.generators.records import Attempt

    worker = ShardWorker(resolved.spec, resolved.demos, resolved.scene)
    task = ShardTask(0, (0, 1))
    batch = run_batch(worker, task, device="cpu")
    cpu = [worker.run_attempt(task, a) for a in task.attempt_ids]
    assert [a.attempt_id for a in batch] == [0, 1]
    # not vacuous: a success was loaded and checked above (float32 contacts may turn an
    # outcome on another machine; this pair ended the same both ways here)
    assert any(a.success for a in batch), [a.reason for a in batch]
    scene = resolved.scene
    for ours, theirs in zip(batch, cpu, strict=True):
        assert isinstance(ours, Attempt)
        assert (ours.seed, ours.shard) == (theirs.seed, theirs.shard)
        # each world placed and seeded as its CPU attempt: same start (read back from the
        # device: float32), same placement
        np.testing.assert_allclose(ours.states[0], theirs.states[0], rtol=0, atol=1e-6)
        assert ours.provenance["placement"] == theirs.provenance["placement"]
        assert set(ours.provenance) == set(theirs.provenance)
        # the CPU path's record layout: a state (time, qpos, qvel) and a float32 action a step
        assert ours.states.shape[1] == theirs.states.shape[1] == scene.state_size
        assert ours.actions.dtype == theirs.actions.dtype == np.float32
        assert ours.proprio.dtype == theirs.proprio.dtype
        assert len(ours.states) == len(ours.actions) == len(ours.proprio)
        assert np.isfinite(ours.states).all()
        # time advances one control step a record, as on the CPU path (the device adds its
        # float32 time a substep: 2e-5 s off after ~500 steps, measured)
        np.testing.assert_allclose(
            np.diff(ours.states[:, 0]), np.diff(theirs.states[:2, 0])[0], atol=1e-4
        )
    for ours in batch:
        if ours.success:
            # the recorded states are MuJoCo states the CPU scene loads: a success's last
            # state, loaded into the CPU scene, holds the task's success check there
            scene.set_state(ours.states[-1])
            assert scene.success()
            assert ours.reason == "" and ours.failed_subtask is None


def test_factory_run_with_mjwarp_writes_a_dataset_inspect_reads(tmp_path):
    spec = write_spec(
        tmp_path / "stack_mjwarp.yaml",
        "stack_lowdim.yaml",
        generation={
            "backend": "mjwarp",
            "attempts": 2,
            "attempts_per_shard": 2,
            "target_successes": None,
        },
    )
    out = tmp_path / "out"
    cli = [sys.executable, "-m", "demofactory.cli.main"]
    run = subprocess.run(
        [*cli, "run", str(spec), "--out", str(out), "--workers", "1", "--no-progress"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "MUJOCO_GL": "egl"},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    # on Ray a batch actor generated the shard (here on warp's CPU device), a worker rendered it
    assert "the cluster has no GPU: the batches of worlds run on warp's CPU device" in run.stderr
    info = json.loads((out / "dataset_info.json").read_text())
    assert info["backend"]["name"] == "mjwarp"
    assert info["backend"]["mujoco_warp"] == "3.9.0.1"
    inspect = subprocess.run(
        [*cli, "inspect", str(out)], cwd=tmp_path, capture_output=True, text=True
    )
    assert inspect.returncode == 0, inspect.stderr[-3000:]
    assert "2" in inspect.stdout  # the attempts it reports


def test_a_batch_under_physics_draws_records_each_attempt_as_the_cpu_path(resolved):
    """stack_physics: each world under its own attempt's draw (per-world model fields, gains,
    delay). Attempts 2 and 4 of shard 0: 2 succeeds and 4 fails, both ways (in
    bench_batched.py's 40-attempt run, where 34 of 40 ended the same both ways). Each records
    the draw the CPU path records and starts where the CPU attempt starts; the success holds
    under its own draw; the CPU scene is nominal after the batch."""
    from demofactory.build.batched import run_batch
    from demofactory.build.pipeline import ShardWorker
    from demofactory.build.records import ShardTask
    from demofactory.simulation.physics import model_rows, recorded_physics
    from demofactory.specs.spec import load_spec

    spec = load_spec(SPECS / "stack_physics.yaml")
    worker = ShardWorker(spec, resolved.demos, resolved.scene)
    scene = worker.scene
    scene.set_physics(None)
    before = model_rows(scene.model)
    task = ShardTask(0, (2, 4))
    batch = run_batch(worker, task, device="cpu")
    after = model_rows(scene.model)
    for name, values in before.items():
        np.testing.assert_array_equal(after[name], values, err_msg=name)
    cpu = [worker.run_attempt(task, a) for a in task.attempt_ids]
    assert [a.success for a in cpu] == [True, False]  # the pair this test was chosen for
    for ours, theirs in zip(batch, cpu, strict=True):
        assert ours.provenance["physics"] == theirs.provenance["physics"]
        assert ours.provenance["placement"] == theirs.provenance["placement"]
        np.testing.assert_allclose(ours.states[0], theirs.states[0], rtol=0, atol=1e-6)
        assert np.isfinite(ours.states).all()
    assert batch[0].provenance["physics"] != batch[1].provenance["physics"]
    print("outcomes, batched:", [(a.success, a.length) for a in batch])
    print("outcomes, CPU:", [(a.success, a.length) for a in cpu])
    for ours in batch:
        if ours.success:  # loaded under its own draw, the last state holds the task's success
            scene.set_physics(recorded_physics(ours.provenance))
            scene.set_state(ours.states[-1])
            assert scene.success()
    scene.set_physics(None)
    # not vacuous: a success was loaded and checked above (float32 contacts may turn an
    # outcome on another machine; this pair ended the same both ways here)
    assert any(a.success for a in batch), [a.reason for a in batch]


def test_a_retried_subtask_restores_its_world_as_the_cpu_path_restores_the_scene(
    resolved, tmp_path
):
    """generation.subtask_retries on the batch: under action noise of 1 the grasp fails, the
    world is restored to its snapshot (DeviceBatch.restore: this world alone) and tries again,
    and the attempt ends as the CPU path's does, with the same reason, retries and length;
    what is recorded is the last try, from the restored start, and it follows the CPU
    path's last try (the same noise from the same seed)."""
    from demofactory.build.batched import run_batch
    from demofactory.build.pipeline import ShardWorker
    from demofactory.build.records import ShardTask
    from demofactory.seeds.resolve import resolve_spec
    from demofactory.specs.spec import load_spec

    path = write_spec(
        tmp_path / "stack_retry.yaml",
        "stack_lowdim.yaml",
        generation={"subtask_retries": 1, "settle_steps": 3, "action_noise": 1.0},
    )
    spec = load_spec(path)
    worker = ShardWorker(spec, resolve_spec(spec).demos, resolved.scene)
    task = ShardTask(0, (0,))
    (ours,) = run_batch(worker, task, device="cpu")
    (theirs,) = [worker.run_attempt(task, a) for a in task.attempt_ids]
    why = "subtask 0 failed: grasped(cubeA) did not hold after 2 tries"
    assert theirs.reason == why and theirs.retries == (1, 0)  # the case this test is for
    assert (ours.reason, ours.retries, ours.length) == (why, theirs.retries, theirs.length)
    # The record restarts at the snapshot (the attempt's start) and follows the CPU path's
    # last try: the same noise, and the hand's pose read as the CPU path reads it (at the
    # last substep's start). Measured over its first RETRY_STEPS steps: arm qpos 4.7e-05 rad,
    # actions 4.5e-05 apart (the float32 difference growing under noise 1; they part where the
    # fingers meet the cube, ~step 130). The hand's pose read at the state after the step
    # instead put the actions 2e-03 apart from the second step on.
    np.testing.assert_allclose(ours.states[0], theirs.states[0], rtol=0, atol=1e-6)
    arm, k = slice(1, 1 + 7), RETRY_STEPS
    print("arm qpos apart", np.abs(ours.states[:k, arm] - theirs.states[:k, arm]).max())
    print("actions apart", np.abs(ours.actions[:k] - theirs.actions[:k]).max())
    np.testing.assert_allclose(ours.states[:k, arm], theirs.states[:k, arm], rtol=0, atol=2e-4)
    np.testing.assert_allclose(ours.actions[:k], theirs.actions[:k], rtol=0, atol=2e-4)


RETRY_STEPS = 100
