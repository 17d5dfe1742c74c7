"""A shard's attempts as MuJoCo Warp worlds: each world starts where the CPU path's attempt does.

Needs the gpu extra (skipped, saying so, without it); warp's CPU device.
"""

from __future__ import annotations

import json

import mujoco
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
    # [K, N, state]
    ours = np.array([batch.step({w: a for w in range(3)})[0] for a in actions])
    worker.physics = None  # the same starts and actions, every world under nominal physics
    nominal = DeviceBatch(worker, starts, device="cpu")
    worker.physics = spec.physics
    theirs = np.array([nominal.step({w: a for w in range(3)})[0] for a in actions])
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


# float32 on the device against CPU MuJoCo's float64: the frames gathered against CPU
# MuJoCo's kinematics at the same joint positions, measured at worst 2.4e-07 (metres, or a
# rotation's entry); the grip site after one control step from the same state, as each path
# leaves its data, 5.7e-07 m. The grip site moves up to 8.1e-04 m in a substep here: reading
# it at the state after the step instead of at the last substep's start fails the second bound.
FRAME_ATOL, STEP_ATOL = 1e-6, 1e-5


def test_each_worlds_poses_and_kinematic_predicates_come_from_the_device(resolved):
    """What an attempt asks every control step (the grip site's pose, the proprio, the objects'
    poses) and the kinematic predicates (near, lifted, ...) are answered for each world from
    the frames MuJoCo Warp left on the device (mjwarp.WorldFrames), without loading its state
    into the CPU scene. They are what the CPU path reads after the same control step: CPU
    MuJoCo's data holds positions computed at the last substep's start (mj_step1), not at the
    state the step ends in. The other predicates (grasped: surface distances) load the world's
    state into the CPU scene, its positions where the step left them."""
    from demofactory.build.batched import DeviceBatch, WorldScene, _Batch, batch_starts
    from demofactory.build.pipeline import ShardWorker
    from demofactory.build.records import ShardTask

    worker = ShardWorker(resolved.spec, resolved.demos, resolved.scene)
    scene, hand = worker.scene, worker.scene._fast.gripper_model
    starts = batch_starts(worker, ShardTask(1, (3, 4, 5)))
    device = DeviceBatch(worker, starts, device="cpu")
    batch = _Batch(device, starts)
    worlds = [WorldScene(batch, w, None) for w in range(3)]
    rng = np.random.default_rng(5)
    worst, answers = np.zeros(3), []
    for check in range(3):
        for _ in range(10):
            action = np.append(rng.uniform(-1, 1, 6), 1.0)
            before = batch.states.copy(), [h.copy() for h in device.hands.hands]
            batch.refresh(device.step({w: action for w in range(3)}))
        distances = [
            np.linalg.norm(v.object_pose("cubeA")[:3, 3] - v.object_pose("cubeB")[:3, 3])
            for v in worlds
        ]
        between = float(np.median(distances))  # some worlds nearer than it, some not
        near = f"near(cubeA, cubeB, {between:.6f})"
        kinematic = [near, f"all({near}, not(lifted(cubeA, 0.05)))", "lifted(cubeB, -1)"]
        ours = [
            (v.eef_pose(), v.proprio(), v.object_pose("cubeA"))
            + tuple(v.holds(p) for p in kinematic)
            for v in worlds
        ]
        assert batch.loaded is None  # none of that loaded a state into the CPU scene
        for w in range(len(worlds)):
            # the CPU path's last step from the world's state before it: its grip site
            scene.set_state(before[0][w])
            hand.current_action = before[1][w].copy()
            scene.step(action)
            stepped = scene.eef_pose()[:3, 3]
            worst[0] = max(worst[0], np.abs(ours[w][0][:3, 3] - stepped).max())
            worst[2] = max(worst[2], np.abs(stepped - scene.data.site_xpos[scene._eef_site]).max())
            mujoco.mj_kinematics(scene.model, scene.data)  # the state after the step
            worst[2] = max(worst[2], np.abs(stepped - scene.eef_pose()[:3, 3]).max())
            # the CPU scene at the world's state, its positions where the step left them
            scene.set_state(batch.states[w], positions=batch.positions[w])
            scene._start_z, scene._start_q = batch.marks[w]
            theirs = (scene.eef_pose(), scene.proprio(), scene.object_pose("cubeA"))
            theirs += tuple(scene.holds(p) for p in kinematic)
            for mine, cpu in zip(ours[w][:3], theirs[:3], strict=True):
                np.testing.assert_allclose(mine, cpu, rtol=0, atol=FRAME_ATOL)
                worst[1] = max(worst[1], float(np.abs(mine - cpu).max()))
            assert ours[w][3:] == theirs[3:], (check, w)
            answers.append(ours[w][3:])
    print("grip site vs the CPU path's step, frames vs CPU kinematics, a substep's move", worst)
    assert worst[0] <= STEP_ATOL, worst
    assert worst[2] > 10 * STEP_ATOL, worst  # the bound tells the two readings apart
    # the predicates went both ways across the worlds and checks: the comparison could fail
    assert {a[0] for a in answers} == {True, False}
    assert all(a[2] for a in answers)


# Surface distances on the device (MuJoCo Warp's GJK/EPA in float32) against CPU MuJoCo's
# mj_geomDistance at the same positions: measured at worst 1.7e-07 m over the pads and cubes
# of the four worlds below; a finger pad grasps within 3 mm (scene.GRASP_MARGIN).
DISTANCE_ATOL = 5e-6
CONTACT_LEAVES = [
    "grasped(cubeA)",
    "grasped(cubeB)",
    "touching(hand, cubeA)",
    "touching(hand, cubeB)",
    "touching(cubeA, cubeB)",
    "contact(cubeA, cubeB)",
    "on_top(cubeA, cubeB)",
    "inside(cubeA, cubeB)",
    "on_peg(cubeA, cubeB, 0.03)",
]


def test_contact_and_distance_predicates_come_from_the_device(resolved):
    """grasped, touching, contact, on_top (and inside, on_peg, on frames and the model's
    geometry) are answered for each world from what MuJoCo Warp computed on the device: the
    world's contacts (its rows of MuJoCo Warp's contact list) and surface distances (MuJoCo
    Warp's GJK/EPA: mjwarp.WorldContacts), without loading its state into the CPU scene. They
    are the CPU scene's answers at the world's state and positions. Four worlds start where a
    CPU Stack attempt was at four moments (the hand empty, closing on cubeA, carrying it,
    cubeA left on cubeB), so each answer goes both ways across them. Before the first step and
    after a restore the device's contacts are not the frames' (`_Batch.fresh`): those leaves
    go to the CPU scene then."""
    import dataclasses

    from demofactory.build.batched import DeviceBatch, WorldScene, _Batch, batch_starts
    from demofactory.build.pipeline import ShardWorker
    from demofactory.build.records import ShardTask

    worker = ShardWorker(resolved.spec, resolved.demos, resolved.scene)
    scene = worker.scene
    task = ShardTask(0, (0,))
    attempt = worker.run_attempt(task, 0)
    assert attempt.success
    states, actions = np.array(attempt.states), np.array(attempt.actions)
    scene.gripper_closed = None  # as after a reset: the hand's command unknown
    grasped = [scene.set_state(s) or scene.holds("grasped(cubeA)") for s in states]
    first = grasped.index(True)
    moments = [2, first - 2, first + (len(states) - first) // 3, len(states) - 1]
    # each world's start: the attempt's state at that moment, its hand's command replayed
    template = batch_starts(worker, task)[0]
    starts = []
    for k in moments:
        data = mujoco.MjData(scene.model)
        scene.set_state(states[k])
        mujoco.mj_copyData(data, scene.model, scene.data)
        hands = mjwarp.GripperCommands(scene._fast, 1, [template.hand])
        for a in actions[:k]:
            hands.ctrl(a[None])
        starts.append(dataclasses.replace(template, data=data, hand=hands.hands[0]))
    device = DeviceBatch(worker, starts, device="cpu")
    batch = _Batch(device, starts)
    worlds = [WorldScene(batch, w, None) for w in range(len(moments))]
    before = [worlds[w].holds("grasped(cubeA)") for w in range(len(moments))]
    assert batch.host_leaves == len(moments)  # before the first step: the CPU scene's
    assert before == [grasped[k] for k in moments] == [False, False, True, False]
    batch.refresh(device.step({w: actions[k] for w, k in enumerate(moments)}))
    batch.loaded, batch.host_leaves = None, 0
    ours = [[v.holds(leaf) for leaf in CONTACT_LEAVES] for v in worlds]
    assert batch.host_leaves == 0 and batch.loaded is None  # no state loaded on the host
    worst = 0.0
    for w, answers in enumerate(ours):
        scene.set_state(batch.states[w], positions=batch.positions[w])
        scene._start_z, scene._start_q = batch.marks[w]
        scene.gripper_closed = batch.closed[w]
        theirs = [scene.holds(leaf) for leaf in CONTACT_LEAVES]
        assert answers == theirs, (w, CONTACT_LEAVES, answers, theirs)
        for pads in scene._pads:
            for obj in ("cubeA", "cubeB"):
                a, b = frozenset(pads), scene._geoms[obj]
                mine = device.contacts.distance(w, a, b, 1.0)
                worst = max(worst, abs(mine - scene._distance(a, b, 1.0)))
    print("distance, device vs mj_geomDistance", worst)
    assert worst <= DISTANCE_ATOL
    columns = list(zip(*ours, strict=True))
    for leaf in ("grasped(cubeA)", "touching(hand, cubeA)", "on_top(cubeA, cubeB)"):
        assert set(columns[CONTACT_LEAVES.index(leaf)]) == {True, False}, leaf
    # after a restore, every world's contact leaves go to the CPU scene until the next step
    batch.restore(0, device.snapshot(0))
    assert worlds[2].holds("grasped(cubeA)") == ours[2][0]
    assert batch.host_leaves == 1 and batch.loaded == 2


def test_a_world_restored_to_its_snapshot_steps_again_as_it_did(resolved):
    """Subtask retries in a batch: two worlds (one whose draw delays its actions) taken back to
    their snapshots (DeviceBatch.snapshot/restore: state, solver warm start, ctrl, the hand's
    command, the delay's queue) step the same actions again into the same states, while the
    third world, not restored, goes on from where it was."""
    from demofactory.build.batched import DeviceBatch, batch_starts
    from demofactory.build.pipeline import ShardWorker
    from demofactory.build.records import ShardTask
    from demofactory.specs.spec import load_spec

    spec = load_spec(SPECS / "stack_physics.yaml")
    worker = ShardWorker(spec, resolved.demos, resolved.scene)
    starts = batch_starts(worker, ShardTask(0, (0, 1, 2)))
    delays = [s.draw.delay for s in starts]
    delayed = next(w for w in range(3) if delays[w] > 0)
    restored = [delayed, next(w for w in range(3) if delays[w] == 0)]
    left = ({0, 1, 2} - set(restored)).pop()
    batch = DeviceBatch(worker, starts, device="cpu")
    rng = np.random.default_rng(11)
    before = rng.uniform(-0.4, 0.4, (6, 7))
    again = rng.uniform(-0.4, 0.4, (8, 7))
    again[:, 6] = 1.0  # closing: robosuite's hand command ramps a step at a time
    try:
        for action in before:
            batch.step({w: action for w in range(3)})
        snaps = {w: batch.snapshot(w) for w in restored}
        assert len(snaps[delayed].pending) == delays[delayed]
        first = np.array([batch.step({w: a for w in range(3)})[0] for a in again])
        for w in restored:
            batch.restore(w, snaps[w])
        states = batch.read()[0]
        for w in restored:
            np.testing.assert_array_equal(states[w], snaps[w].state)
        second = np.array([batch.step({w: a for w in range(3)})[0] for a in again])
    finally:
        batch.physics.restore()
    for w in restored:
        np.testing.assert_allclose(second[:, w], first[:, w], rtol=0, atol=1e-6, err_msg=str(w))
    assert np.abs(first[:, restored[0]] - first[0, restored[0]]).max() > 1e-2  # they moved
    assert np.abs(second[:, left] - first[:, left]).max() > 1e-2  # the other went on


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
