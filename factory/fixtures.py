"""Where a demo's fixtures stood, when its file does not say (human demos of Door-like tasks).

robosuite re-draws some fixtures' poses at every reset (Door's door: a centimetre, a quarter
radian) and keeps them in the model, not in the MuJoCo state, so a recorded demo's states do not
tell where its door was. Restored into today's model, the hand would close on air beside the
handle. The hand tells instead: while the gripper is closed on the fixture and its joints turn,
the finger pads touch it. `infer_fixture_poses` searches the fixture's pose (x, y, yaw about the
vertical, around the model's own) that puts the pads on it at those steps:

    demo steps with the gripper closed while a fixture joint moves (or all closed steps)
    ──► coarse grid (±5 cm, ±0.4 rad) ──► fine grid around the best ──► {root body: pose}

A plain grid rather than `mujoco.minimize`: the objective (a sum of pad-to-surface distances
capped at a few centimetres) is flat away from the answer and has kinks where the nearest geom
changes, which a least-squares solver started at the model's pose does not cross.
"""

from __future__ import annotations

import itertools

import mujoco
import numpy as np

from factory.records import SeedDemo

SAMPLED_STEPS = 16  # demo steps the objective looks at
DISTANCE_CAP = 0.05  # metres: beyond this a pad is simply "not on it"
COARSE = (np.linspace(-0.05, 0.05, 11), np.linspace(-0.4, 0.4, 17))  # metres, radians
REFINED = 5  # coarse candidates searched finely
FINE = (np.linspace(-0.008, 0.008, 9), np.linspace(-0.04, 0.04, 9))


def infer_fixture_poses(scene, demo: SeedDemo) -> dict[str, list[float]]:
    """Poses of the scene's re-drawn fixtures that best explain `demo` (the model's own when
    nothing does).

    Returns body name -> [x, y, z, qw, qx, qy, qz], as `Scene.fixture_poses` does.
    """
    base = scene.fixture_poses()
    result = dict(base)
    for name, pose in base.items():
        root = mujoco.mj_name2id(scene.model, mujoco.mjtObj.mjOBJ_BODY, name)
        steps = _contact_steps(scene, demo, root)
        if len(steps):
            result[name] = _search(scene, demo, root, np.asarray(pose), steps)
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


def _contact_steps(scene, demo: SeedDemo, root: int) -> np.ndarray:
    """Steps where the gripper is closed and, if it ever does, a joint of the fixture moves."""
    model = scene.model
    joints = [j for j in range(model.njnt) if _ancestor(model, int(model.jnt_bodyid[j]), root)]
    closed = demo.actions[:, -1] > 0
    if joints:
        adr = [1 + int(model.jnt_qposadr[j]) for j in joints]
        moving = np.zeros(demo.length, dtype=bool)
        moving[1:] = np.abs(np.diff(demo.states[:, adr], axis=0)).max(axis=1) > 1e-4
        if (closed & moving).any():
            closed = closed & moving
    steps = np.flatnonzero(closed)
    if len(steps) > SAMPLED_STEPS:
        steps = steps[np.linspace(0, len(steps) - 1, SAMPLED_STEPS).astype(int)]
    return steps


def _search(scene, demo: SeedDemo, root: int, pose: np.ndarray, steps: np.ndarray) -> list[float]:
    geoms = _subtree(scene.model, root)
    pads = [sorted(p) for p in scene.finger_pads()]
    site = scene.grip_site
    held = _held_body(scene, demo, geoms, steps, site)

    def grid(centre, offsets, yaws):
        for dx, dy, dyaw in itertools.product(offsets, offsets, yaws):
            candidate = (centre[0] + dx, centre[1] + dy, centre[2] + dyaw)
            yield (
                _cost(scene, demo, root, pose, candidate, steps, geoms, pads, held, site),
                candidate,
            )

    coarse = sorted(grid((0.0, 0.0, 0.0), *COARSE))[
        :REFINED
    ]  # several basins: the coarse best can mislead
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
                min(
                    abs(mujoco.mj_geomDistance(model, data, a, g, DISTANCE_CAP, None))
                    for g in geoms
                )
                for a in pad
            )
    return total + len(steps) * float(np.linalg.norm(np.std(in_part, axis=0)))
