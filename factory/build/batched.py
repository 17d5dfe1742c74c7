"""A shard's attempts as a batch of MuJoCo Warp worlds (generation.backend: mjwarp): their starts.

    ShardWorker + ShardTask
      ──► per attempt: its seed (attempt_seed, as the CPU path) ─► its placement, the first
          draw of that seed (generators.mimicgen.attempt_placement) ─► the CPU scene reset to
          it (Scene.reset_to: demo start, placement, depenetration, settling) ─► its MjData
      ──► BatchedWorlds(model, starts): world w starts where the CPU path's attempt w starts

The rest of the batched attempt loop is not landed (docs/mjwarp.md): the physics draws per
world (MuJoCo Warp would need per-world model fields) are refused here.
"""

from __future__ import annotations

import mujoco
from demofactory.build.pipeline import ShardWorker
from demofactory.build.records import ShardTask
from demofactory.generators.mimicgen import AttemptPlan, attempt_placement, attempt_seed


def batch_starts(worker: ShardWorker, task: ShardTask) -> list[tuple[AttemptPlan, mujoco.MjData]]:
    """(plan, start MjData) of each attempt of `task`, in its order: the state the CPU path's
    `generate_attempt` starts the attempt from, made by the same functions from the same seed."""
    if worker.physics is not None:
        raise NotImplementedError("per-world physics draws are not landed for MuJoCo Warp")
    if task.targets:
        raise NotImplementedError("generation.rebalance's targeted shards are not landed")
    scene, spec = worker.scene, worker.spec
    starts = []
    for attempt_id in task.attempt_ids:
        plan = AttemptPlan(attempt_id, task.index, attempt_seed(spec.seed, task.index, attempt_id))
        _, placement = attempt_placement(worker.demos, plan, worker.params)
        demo = worker.demos[0]
        scene.reset_to(demo.start_state, placement, fixtures=demo.fixture_poses)
        data = mujoco.MjData(scene.model)
        mujoco.mj_copyData(data, scene.model, scene.data)
        starts.append((plan, data))
    return starts
