"""A shard's attempts as MuJoCo Warp worlds: each world starts where the CPU path's attempt does.

Needs the gpu extra (skipped, saying so, without it); warp's CPU device.
"""

from __future__ import annotations

import json

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
    assert [s.plan.attempt_id for s in starts] == [20, 21, 22]
    assert all(s.draw is None and s.rows is None for s in starts)  # no physics: section
    ours = np.array([np.concatenate([[s.data.time], s.data.qpos, s.data.qvel]) for s in starts])
    # the CPU path, attempt by attempt: its recorded state before the first action
    cpu = np.array([worker.run_attempt(task, a).states[0] for a in task.attempt_ids])
    np.testing.assert_array_equal(ours, cpu)
    assert np.abs(cpu[0] - cpu[1]).max() > 1e-3  # each attempt placed by its own seed
    worlds = mjwarp.BatchedWorlds(resolved.scene.model, [s.data for s in starts], nworld=3)
    np.testing.assert_allclose(worlds.states(), cpu, rtol=0, atol=1e-6)  # float32 on the device


PHYSICS_STEPS = 40
# Per control step, each world under its own draw against CPU MuJoCo under the same draw (the
# CPU path's Scene.step: its gains, delay, model values), over stack_physics' draws of
# attempts 0-2. Measured at worst over the 40 steps and 3 worlds: the robot (arm and fingers)
# qpos 3.6e-05, qvel 1.0e-03; the cubes qpos 1.0e-03, qvel 0.80. The cubes differ more because
# of the gravity tilt: a cube resting on the table then takes a tangential load, which CPU
# MuJoCo's solver holds still while MuJoCo Warp's (float32, tolerance 1e-6) lets it rock by a
# few mrad/s, with velocity spikes where it lands back; the same draws without the tilt stay
# within the nominal bounds (3.6e-05 at worst), and the tilt given to put_model instead of
# per world gives the same states bit for bit. The bounds leave ~2.5x headroom.
ROBOT_QPOS, ROBOT_QVEL = 1e-4, 2.5e-3
OBJECT_QPOS, OBJECT_QVEL = 2.5e-3, 2.0


def test_each_worlds_model_is_what_mujoco_warp_makes_of_the_model_under_its_draw(resolved):
    """Field by field: every numeric field of the batch's MuJoCo Warp model, at world w's row,
    equals what MuJoCo Warp's own put_model makes of the CPU model with world w's draw
    applied (Scene.set_physics). So no value a draw changes (or one MuJoCo Warp derives from
    it) is left at the nominal model's, whichever fields a later MuJoCo Warp reads."""
    import dataclasses

    from demofactory.build.batched import DeviceBatch, batch_starts
    from demofactory.build.pipeline import ShardWorker
    from demofactory.build.records import ShardTask
    from demofactory.specs.spec import load_spec

    spec = load_spec(SPECS / "stack_physics.yaml")
    worker = ShardWorker(spec, resolved.demos, resolved.scene)
    scene = worker.scene
    starts = batch_starts(worker, ShardTask(0, (0, 1)))
    batch = DeviceBatch(worker, starts, device="cpu")
    warp, mujoco_warp = batch.worlds.warp, batch.worlds.mjw

    def fields(model, prefix=""):
        for f in dataclasses.fields(model):
            value = getattr(model, f.name)
            if isinstance(value, warp.array):
                yield prefix + f.name, value.numpy()
            elif dataclasses.is_dataclass(value):
                yield from fields(value, prefix + f.name + ".")

    ours = dict(fields(batch.worlds.wmodel))
    per_world = set(batch.per_world)
    assert {"body_mass", "geom_size", "geom_friction", "opt.gravity"} <= per_world
    compared = 0
    for w, start in enumerate(starts):
        scene.set_physics(start.draw)
        with warp.ScopedDevice("cpu"):
            theirs = dict(fields(mujoco_warp.put_model(scene.model)))
        scene.set_physics(None)
        for name, values in theirs.items():
            mine = ours[name][w : w + 1] if name in per_world else ours[name]
            if values.dtype.kind not in "fiub" or values.size == 0:
                continue
            assert mine.shape == values.shape, name
            np.testing.assert_allclose(mine, values, rtol=1e-6, atol=1e-7, err_msg=name)
            compared += 1
    assert compared > 200  # the model's numeric fields, not a few


def _cpu_run(worker, start, draw, actions) -> np.ndarray:
    """The CPU path's states under `draw` from `start`'s reset (as run_attempt, then
    generate_attempt's reset_to), one a control step."""
    from demofactory.generators.mimicgen import attempt_placement

    scene = worker.scene
    scene.set_physics(draw)
    _, placement = attempt_placement(worker.demos, start.plan, worker.params)
    demo = worker.demos[0]
    scene.reset_to(demo.start_state, placement, fixtures=demo.fixture_poses)
    np.testing.assert_array_equal(scene.data.qpos, start.data.qpos)
    states = []
    for action in actions:
        scene.step(action)
        states.append(scene.get_state())
    scene.set_physics(None)
    return np.array(states)


def test_each_world_steps_under_its_own_physics_draw_as_the_cpu_path(resolved):
    """stack_physics: three attempts, each with its own draw (friction, masses, sizes, joint
    damping and armature, OSC gains, delay, gravity), as one batch; the same actions through
    the CPU path's Scene.step under each draw. Every world stays within the float32 bound
    of its own CPU run, and the draws matter by far more than that bound."""
    from demofactory.build.batched import DeviceBatch, batch_starts
    from demofactory.build.pipeline import ShardWorker
    from demofactory.build.records import ShardTask
    from demofactory.specs.spec import load_spec

    spec = load_spec(SPECS / "stack_physics.yaml")
    worker = ShardWorker(spec, resolved.demos, resolved.scene)
    scene = worker.scene
    before = {n: v.copy() for n, v in _rows(scene.model).items()}
    starts = batch_starts(worker, ShardTask(0, (0, 1, 2)))
    draws = [s.draw for s in starts]
    assert len({json.dumps(d.to_json()) for d in draws}) == 3  # each attempt its own draw
    assert any(d.delay > 0 for d in draws) and any(d.delay == 0 for d in draws)
    _assert_rows_equal(_rows(scene.model), before)  # batch_starts leaves the scene nominal
    # each start: the CPU attempt's first state under its draw (its sizes move the cubes)
    cpu_first = [worker.run_attempt(ShardTask(0, (0, 1, 2)), a).states[0] for a in (0, 1, 2)]
    for start, first in zip(starts, cpu_first, strict=True):
        np.testing.assert_array_equal(
            np.concatenate([[start.data.time], start.data.qpos, start.data.qvel]), first
        )
    scene.set_physics(None)

    rng = np.random.default_rng(3)
    actions = rng.uniform(-0.4, 0.4, (PHYSICS_STEPS, 7))
    actions[:, 6] = np.where(np.arange(PHYSICS_STEPS) < PHYSICS_STEPS // 2, 1.0, -1.0)
    batch = DeviceBatch(worker, starts, device="cpu")
    assert {"geom_friction", "body_mass", "geom_size", "opt.gravity"} <= set(batch.physics.stacked)
    ours = np.array([batch.step({w: a for w in range(3)}) for a in actions])  # [K, N, state]
    worker.physics = None  # the same starts and actions, every world under nominal physics
    nominal = DeviceBatch(worker, starts, device="cpu")
    worker.physics = spec.physics
    theirs = np.array([nominal.step({w: a for w in range(3)}) for a in actions])
    nq, robot = scene.model.nq, _robot_dofs(scene)
    worst = np.zeros((3, 5))
    for w, (start, draw) in enumerate(zip(starts, draws, strict=True)):
        cpu = _cpu_run(worker, start, draw, actions)
        qpos = np.abs(ours[:, w, 1 : 1 + nq] - cpu[:, 1 : 1 + nq])
        qvel = np.abs(ours[:, w, 1 + nq :] - cpu[:, 1 + nq :])
        off = np.abs(theirs[:, w, 1 : 1 + nq] - cpu[:, 1 : 1 + nq])
        worst[w] = [
            qpos[:, robot[0]].max(),
            qvel[:, robot[1]].max(),
            np.delete(qpos, robot[0], axis=1).max(),
            np.delete(qvel, robot[1], axis=1).max(),
            off[:, robot[0]].max(),
        ]
    print("robot qpos, qvel; objects qpos, qvel; nominal physics' robot qpos\n", worst)
    assert (worst[:, 0] <= ROBOT_QPOS).all() and (worst[:, 1] <= ROBOT_QVEL).all(), worst
    assert (worst[:, 2] <= OBJECT_QPOS).all() and (worst[:, 3] <= OBJECT_QVEL).all(), worst
    # the check can fail: without each world's draw the robot ends far from its CPU run
    assert (worst[:, 4] > 100 * ROBOT_QPOS).all(), worst
    _assert_rows_equal(_rows(scene.model), before)


def _robot_dofs(scene) -> tuple[np.ndarray, np.ndarray]:
    """(qpos, qvel) indices of everything but the free objects (the arm and its fingers)."""
    model = scene.model
    free_q, free_v = set(), set()
    for body in scene.free_bodies:
        joint = int(model.body_jntadr[body])
        free_q |= set(range(model.jnt_qposadr[joint], model.jnt_qposadr[joint] + 7))
        free_v |= set(range(model.jnt_dofadr[joint], model.jnt_dofadr[joint] + 6))
    return (
        np.array(sorted(set(range(model.nq)) - free_q)),
        np.array(sorted(set(range(model.nv)) - free_v)),
    )


def _rows(model):
    from demofactory.simulation.physics import model_rows

    return model_rows(model)


def _assert_rows_equal(now, before):
    for name, values in before.items():
        np.testing.assert_array_equal(now[name], values, err_msg=name)
