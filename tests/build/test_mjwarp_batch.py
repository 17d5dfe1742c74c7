"""A shard's attempts as MuJoCo Warp worlds: each world starts where the CPU path's attempt does.

Needs the gpu extra (skipped, saying so, without it); warp's CPU device.
"""

from __future__ import annotations

import numpy as np
import pytest
from demofactory.simulation import mjwarp

from tests.conftest import NEEDS_MJWARP, SPECS

pytestmark = [
    pytest.mark.sim,
    pytest.mark.slow,
    NEEDS_MJWARP,
]


@pytest.fixture(scope="module")
def resolved():
    from demofactory.seeds.resolve import resolve_spec
    from demofactory.specs.spec import load_spec

    return resolve_spec(load_spec(SPECS / "stack.yaml"))


def test_each_world_starts_where_the_cpu_attempt_starts(resolved):
    from demofactory.build.batched import batch_starts
    from demofactory.build.pipeline import ShardWorker
    from demofactory.build.records import ShardTask

    worker = ShardWorker(resolved.spec, resolved.demos, resolved.scene)
    task = ShardTask(2, (20, 21, 22))
    starts = batch_starts(worker, task)
    assert [plan.attempt_id for plan, _ in starts] == [20, 21, 22]
    ours = np.array([np.concatenate([[d.time], d.qpos, d.qvel]) for _, d in starts])
    # the CPU path, attempt by attempt: its recorded state before the first action
    cpu = np.array([worker.run_attempt(task, a).states[0] for a in task.attempt_ids])
    np.testing.assert_array_equal(ours, cpu)
    assert np.abs(cpu[0] - cpu[1]).max() > 1e-3  # each attempt placed by its own seed
    worlds = mjwarp.BatchedWorlds(resolved.scene.model, [d for _, d in starts], nworld=3)
    np.testing.assert_allclose(worlds.states(), cpu, rtol=0, atol=1e-6)  # float32 on the device


def test_a_spec_with_physics_draws_is_not_batched_yet(resolved):
    from demofactory.build.batched import batch_starts
    from demofactory.build.pipeline import ShardWorker
    from demofactory.build.records import ShardTask
    from demofactory.specs.spec import load_spec

    spec = load_spec(SPECS / "stack_physics.yaml")
    assert spec.physics is not None
    worker = ShardWorker(spec, resolved.demos, resolved.scene)
    with pytest.raises(NotImplementedError, match="per-world physics draws"):
        batch_starts(worker, ShardTask(0, (0,)))
