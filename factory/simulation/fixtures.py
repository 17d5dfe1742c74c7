"""Where a demo's fixtures stood, when its file does not say (human demos of Door-like tasks).

robosuite re-draws some fixtures' poses at every reset (Door's door: a centimetre, a quarter
radian) and keeps them in the model, not in the MuJoCo state, so a recorded demo's states do not
tell where its door was. Restored into today's model, the hand would close on air beside the
handle. The hand tells instead: while the gripper is closed on the fixture and its joints turn,
the finger pads touch it. A person who never closes the hand (the lever pressed with the open
hand, the door dragged by friction) still touches it while its joints move: some part of the
hand (palm, finger, pad) is on its surface. `infer_fixture_poses` searches the fixture's pose
(x, y, yaw about the vertical, around the model's own) that puts the hand on it at those steps:

    demo steps with the gripper closed while a fixture joint moves ──► both pads on it, the
        grip rigid in the part held ("grip")
    else steps where a fixture joint moves (the open hand moved it) ──► the hand's nearest
        geom on it, none inside it ("touch")
    else every closed step ──► as "grip"
    ──► coarse grid (±5 cm, ±0.4 rad) ──► fine grid around the best ──► {root body: pose}

A push pins the pose less than a grip. Measured on door_push's scripted demos with their poses
removed (5 demos, the door drawn within 2 cm and 0.25 rad): yaw within 0.025 rad (the model's
own pose: up to 0.23 off), across the lever within 5 mm, but along the lever's axis up to 20 mm:
a finger on the lever's 3 cm deep top face explains the demo anywhere across it, and the tie-break
toward the model's own pose decides. A grip pins all three (2-3 mm, Door's grasp demos).
With the distances read through `geom_distance.surface_distance` (MuJoCo's mj_geomDistance
reads 0.0 for some pairs centimetres apart, or a hand sunk into the lever: mujoco#3383) and
REFINED 10 (was 5), the 3 demos of door_push_scripted.hdf5 come within yaw 0, 0.003, 0.011
rad and 0, 3.3, 5.6 mm (before: 0, 0.013, 0.011 rad and 0, 19.2, 5.6 mm), in 10 s a demo
rather than 6 (tests/seeds/test_touching.py).

A plain grid rather than `mujoco.minimize`: the objective (a sum of pad-to-surface distances
capped at a few centimetres) is flat away from the answer and has kinks where the nearest geom
changes, which a least-squares solver started at the model's pose does not cross.
"""

from __future__ import annotations

import itertools

import mujoco
import numpy as np
from demofactory.generators.records import SeedDemo
from demofactory.robots.geom_distance import surface_distance

SAMPLED_STEPS = 16  # demo steps the objective looks at
DISTANCE_CAP = 0.05  # metres: beyond this a pad is simply "not on it"
COARSE = (np.linspace(-0.05, 0.05, 11), np.linspace(-0.4, 0.4, 17))  # metres, radians
REFINED = 10  # coarse candidates searched finely
FINE = (np.linspace(-0.008, 0.008, 9), np.linspace(-0.04, 0.04, 9))
PRESS_DEPTH = 0.002  # metres a pressing hand sinks into MuJoCo's soft contact (measured: ~1 mm)
TIE_BREAK = 0.01  # cost per metre (per 10 rad) away from the model's own pose: breaks ties only


def infer_fixture_poses(scene, demo: SeedDemo) -> dict[str, list[float]]:
    """Poses of the scene's re-drawn fixtures that best explain `demo` (the model's own when
    nothing does).

    Returns body name -> [x, y, z, qw, qx, qy, qz], as `Scene.fixture_poses` does.
    """
    base = scene.fixture_poses()
    result = dict(base)
    for name, pose in base.items():
        root = mujoco.mj_name2id(scene.model, mujoco.mjtObj.mjOBJ_BODY, name)
        steps, grip = _contact_steps(scene, demo, root)
        if len(steps):
            result[name] = _search(scene, demo, root, np.asarray(pose), steps, grip)
    scene.set_fixture_poses(result)
    return result


def _subtree(model: mujoco.MjModel, root: int) -> list[int]:
    bodies = [b for b in range(model.nbody) if _ancestor(model, b, root)]
    return [
        g
        for g in range(model.ngeom)
        if model.geom_bodyid[g] in bodies and (model.geom_contype[g] or model.geom_conaffinity[g])
    ]


def _ancestor(model: mujoco.MjModel, body: int, root: int) -> bool:
    while body > 0:
        if body == root:
            return True
        body = int(model.body_parentid[body])
    return False


def _contact_steps(scene, demo: SeedDemo, root: int) -> tuple[np.ndarray, bool]:
    """(steps, grip): where the gripper is closed while a joint of the fixture moves (grip), or,
    when it never is, where a joint moves (the open hand moved it: not grip), or, when no joint
    moves, every closed step (grip)."""
    model = scene.model
    joints = [j for j in range(model.njnt) if _ancestor(model, int(model.jnt_bodyid[j]), root)]
    closed = demo.actions[:, -1] * scene.gripper_sign > 0
    chosen, grip = closed, True
    if joints:
        adr = [1 + int(model.jnt_qposadr[j]) for j in joints]
        moving = np.zeros(demo.length, dtype=bool)
        moving[1:] = np.abs(np.diff(demo.states[:, adr], axis=0)).max(axis=1) > 1e-4
        if (closed & moving).any():
            chosen = closed & moving
        elif moving.any():
            chosen, grip = moving, False
    steps = np.flatnonzero(chosen)
    if len(steps) > SAMPLED_STEPS:
        steps = steps[np.linspace(0, len(steps) - 1, SAMPLED_STEPS).astype(int)]
    return steps, grip


def _search(
    scene, demo: SeedDemo, root: int, pose: np.ndarray, steps: np.ndarray, grip: bool
) -> list[float]:
    geoms = _subtree(scene.model, root)
    if grip:
        pads = [sorted(p) for p in scene.finger_pads()]
        site = scene.grip_site
        held = _held_body(scene, demo, geoms, steps, site)

        def cost(candidate):
            return _cost(scene, demo, root, pose, candidate, steps, geoms, pads, held, site)
    else:
        hand = sorted(scene.hand_geoms())

        def cost(candidate):
            return _touch_cost(scene, demo, root, pose, candidate, steps, geoms, hand)

    def grid(centre, offsets, yaws):
        for dx, dy, dyaw in itertools.product(offsets, offsets, yaws):
            candidate = (centre[0] + dx, centre[1] + dy, centre[2] + dyaw)
            yield cost(candidate), candidate

    # several basins: the coarse best can mislead
    coarse = sorted(grid((0.0, 0.0, 0.0), *COARSE))[:REFINED]
    best = min(min(grid(centre, *FINE)) for _, centre in coarse)
    return _moved(pose, *best[1]).tolist()


def _held_body(scene, demo: SeedDemo, geoms: list[int], steps: np.ndarray, site: int) -> int:
    """The fixture's body nearest the grip site in the middle of the sampled steps (a handle)."""
    model, data = scene.model, scene.data
    data.qpos[:] = demo.states[steps[len(steps) // 2]][1 : 1 + model.nq]
    mujoco.mj_kinematics(model, data)
    nearest = min(geoms, key=lambda g: np.linalg.norm(data.geom_xpos[g] - data.site_xpos[site]))
    return int(model.geom_bodyid[nearest])


def _moved(pose: np.ndarray, dx: float, dy: float, dyaw: float) -> np.ndarray:
    out = pose.copy()
    out[0] += dx
    out[1] += dy
    turn = np.array([np.cos(dyaw / 2), 0.0, 0.0, np.sin(dyaw / 2)])
    quat = np.empty(4)
    mujoco.mju_mulQuat(quat, turn, pose[3:])
    out[3:] = quat
    return out


def _cost(scene, demo, root, pose, candidate, steps, geoms, pads, held: int, site: int) -> float:
    """Pads on the fixture's surface, and a grasp that stays rigid: the grip site fixed in the frame
    of the part held (`held`) while the joints turn. The second term pins the hinge's axis, which
    the first alone leaves free to slide along a lever."""
    model, data = scene.model, scene.data
    moved = _moved(pose, *candidate)
    model.body_pos[root], model.body_quat[root] = moved[:3], moved[3:]
    total, in_part = 0.0, []
    for t in steps:
        state = demo.states[t]
        data.qpos[:] = state[1 : 1 + model.nq]
        mujoco.mj_kinematics(model, data)
        rot = data.xmat[held].reshape(3, 3)
        in_part.append(rot.T @ (data.site_xpos[site] - data.xpos[held]))
        for pad in pads:
            # |distance|: a pad on the surface, not through it (penetration is no better than a gap)
            total += min(
                min(abs(surface_distance(model, data, a, g, DISTANCE_CAP)) for g in geoms)
                for a in pad
            )
    return total + len(steps) * float(np.linalg.norm(np.std(in_part, axis=0)))


def _touch_cost(scene, demo, root, pose, candidate, steps, geoms, hand) -> float:
    """The open hand on the fixture's surface at each step: the gap between the nearest hand geom
    and fixture geom, or its depth past PRESS_DEPTH inside (a hand through the door costs; one
    pressing a lever sinks a millimetre into MuJoCo's soft contact and does not). No rigidity
    term as for a grip: a pushing hand slides and rolls on the part."""
    model, data = scene.model, scene.data
    moved = _moved(pose, *candidate)
    model.body_pos[root], model.body_quat[root] = moved[:3], moved[3:]
    total = 0.0
    for t in steps:
        data.qpos[:] = demo.states[t][1 : 1 + model.nq]
        mujoco.mj_kinematics(model, data)
        nearest = min(
            surface_distance(model, data, a, g, DISTANCE_CAP) for a in hand for g in geoms
        )
        total += max(nearest, 0.0) + max(-nearest - PRESS_DEPTH, 0.0)
    # Contact alone leaves a family of poses (the lever's top is 3 cm deep along its axis, and
    # the finger anywhere on it explains the demo alike): the one nearest the model's own wins.
    return total + TIE_BREAK * (abs(candidate[0]) + abs(candidate[1]) + 0.1 * abs(candidate[2]))
