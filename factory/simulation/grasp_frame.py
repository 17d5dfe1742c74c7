"""The grasp frame of a gripper, read from its robosuite model, and re-targeting through it.

Robots put their end-effector (grip) site in different places relative to the fingers, and
their fingers close along different axes of it (the Panda hand along +x of its grip site,
Robotiq hands along -x). A demo recorded with one gripper is replayed by another by moving
the grasp frame, not the grip site:

    grip site ──G──► grasp frame: x the closing direction (left pads → right pads), z the
                     approach (from the gripper's root body towards the pads), y = z × x;
                     origin between the pads, moved along z to the fingers' far end

    target grip-site pose = source grip-site pose · G_source · G_target⁻¹

The origin sits where the fingers end, not at the pads' centres: grippers whose fingertips
reach past their pads (Robotiq's) would otherwise push their tips into the table where the
Panda, whose pads are its tips, grasped a cube low (measured: IIWA's hand held 2 cm into the
table at the grasp).

A two-sided gripper grasps the same with its grasp frame turned half a turn about the
approach axis; of the two, `nearer_half_turn` takes the one that keeps the target's wrist
nearest its own home orientation, so a retargeted demo does not wind the last joint by π.
Pure numpy; `measure_grasp_frame` reads the points off a MuJoCo model in the pose it is in.
"""

from __future__ import annotations

import mujoco
import numpy as np
from demofactory.generators.poses import make_pose, mat_to_axis_angle, pose_inv

HALF_TURN = np.diag([-1.0, -1.0, 1.0, 1.0])  # a half turn about the grasp frame's z (approach)


def grasp_frame(
    eef: np.ndarray, left: np.ndarray, right: np.ndarray, root: np.ndarray, tips: np.ndarray
) -> np.ndarray:
    """[4, 4] grasp frame in the grip-site frame `eef` ([4, 4] world pose).

    left, right: [K, 3] world centres of the left and right finger pads; root: [3] world
    position of the gripper's root body (behind the fingers); tips: [M, 3] world points of the
    fingers (corners of their bounding boxes): the origin moves along the approach to the
    farthest. Raises ValueError when the pads coincide or close along the approach.
    """
    left_c, right_c = np.mean(left, axis=0), np.mean(right, axis=0)
    centre = (left_c + right_c) / 2
    closing = right_c - left_c
    approach = centre - np.asarray(root, dtype=np.float64)
    if np.linalg.norm(closing) < 1e-6 or np.linalg.norm(approach) < 1e-6:
        raise ValueError("finger pads coincide, or sit at the gripper's root")
    x = closing / np.linalg.norm(closing)
    z = approach - (approach @ x) * x  # the approach, square to the closing direction
    if np.linalg.norm(z) < 1e-6:
        raise ValueError("the finger pads close along the approach axis")
    z /= np.linalg.norm(z)
    reach = float(np.max((np.asarray(tips, dtype=np.float64) - centre) @ z))
    world = make_pose(centre + reach * z, np.stack([x, np.cross(z, x), z], axis=1))
    return pose_inv(eef) @ world


def retarget_eef(poses: np.ndarray, source: np.ndarray, target: np.ndarray) -> np.ndarray:
    """[T, 4, 4] target grip-site poses that put the target's grasp frame where the source's was.

    poses: [T, 4, 4] source grip-site poses; source, target: [4, 4] grasp frames in their grip
    sites (`grasp_frame`).
    """
    return np.asarray(poses) @ source @ pose_inv(target)


def nearer_half_turn(
    source_home: np.ndarray, target_home: np.ndarray, source: np.ndarray, target: np.ndarray
) -> np.ndarray:
    """`target`, or `target` turned half a turn about its approach axis: the one whose retarget
    of the source's home grip-site pose is the nearer in rotation to the target's home pose."""
    best, best_angle = target, np.inf
    for candidate in (target, target @ HALF_TURN):
        moved = retarget_eef(source_home[None], source, candidate)[0]
        angle = float(np.linalg.norm(mat_to_axis_angle(moved[:3, :3].T @ target_home[:3, :3])))
        if angle < best_angle - 1e-9:
            best, best_angle = candidate, angle
    return best


def geom_corners(model: mujoco.MjModel, data: mujoco.MjData, geom: int) -> np.ndarray:
    """[8, 3] world corners of a geom's bounding box (MuJoCo's, in the geom's frame)."""
    centre, half = model.geom_aabb[geom][:3], model.geom_aabb[geom][3:]
    signs = np.array([[i, j, k] for i in (-1, 1) for j in (-1, 1) for k in (-1, 1)], dtype=float)
    local = centre + signs * half
    return data.geom_xpos[geom] + local @ data.geom_xmat[geom].reshape(3, 3).T
