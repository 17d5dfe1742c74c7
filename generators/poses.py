"""Pose math for MimicGen-style trajectory retargeting (pure numpy).

Conventions used throughout:

- A pose is a 4x4 homogeneous matrix (float64) mapping local coordinates to the world frame;
  positions are in metres.
- A rotation is a 3x3 orthonormal matrix with det +1.
- An axis-angle vector is a 3-vector: unit axis times angle in radians, angle in [0, pi].
- A quaternion is (x, y, z, w), the order robosuite uses.
- Delta actions follow robosuite's OSC_POSE controller: 6 numbers in [-1, 1], the first three a
  translation and the last three an axis-angle rotation, each scaled by the controller's
  ``output_max`` (0.05 m and 0.5 rad by default) and expressed in the robot base frame.

Functions broadcast over leading dimensions where that is natural (``[..., 4, 4]`` etc.).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "add_action_noise",
    "axis_angle_to_mat",
    "delta_action_to_pose",
    "interpolate_poses",
    "make_pose",
    "mat_to_axis_angle",
    "mat_to_quat",
    "pose_inv",
    "pose_to_delta_action",
    "quat_to_mat",
    "transform_segment",
]

# Below this angle (rad) the Rodrigues coefficients switch to their Taylor series, whose
# truncation error (~theta^4) is then far below float64 resolution.
_SMALL_ANGLE = 1e-4


def _check_shape(name: str, arr: NDArray, tail: tuple[int, ...]) -> None:
    """Raise ValueError unless ``arr.shape`` ends with ``tail``."""
    if arr.ndim < len(tail) or arr.shape[arr.ndim - len(tail) :] != tail:
        want = "[..., " + ", ".join(str(t) for t in tail) + "]"
        raise ValueError(f"{name} must have shape {want}, got {arr.shape}")


def _check_single(name: str, arr: NDArray, shape: tuple[int, ...]) -> None:
    """Raise ValueError unless ``arr.shape == shape`` (no batch dims allowed)."""
    if arr.shape != shape:
        want = "[" + ", ".join(str(t) for t in shape) + "]"
        raise ValueError(f"{name} must have shape {want}, got {arr.shape}")


def make_pose(pos: ArrayLike, rot: ArrayLike) -> NDArray[np.float64]:
    """Build homogeneous poses from positions and rotations.

    Args:
        pos: [..., 3] positions (m).
        rot: [..., 3, 3] rotation matrices; leading dims broadcast against ``pos``.

    Returns:
        [..., 4, 4] poses, e.g. pos [3] + rot [3,3] -> [4,4]; pos [N,3] + rot [N,3,3] -> [N,4,4].
    """
    pos = np.asarray(pos, dtype=np.float64)
    rot = np.asarray(rot, dtype=np.float64)
    _check_shape("pos", pos, (3,))
    _check_shape("rot", rot, (3, 3))
    lead = np.broadcast_shapes(pos.shape[:-1], rot.shape[:-2])
    pose = np.zeros(lead + (4, 4))
    pose[..., :3, :3] = rot
    pose[..., :3, 3] = pos
    pose[..., 3, 3] = 1.0
    return pose


def pose_inv(pose: ArrayLike) -> NDArray[np.float64]:
    """Invert rigid transforms.

    Uses (R, p)^-1 = (R^T, -R^T p), which is exact for rigid transforms and cheaper and better
    conditioned than a general matrix inverse.

    Args:
        pose: [..., 4, 4] poses.

    Returns:
        [..., 4, 4] inverse poses.
    """
    pose = np.asarray(pose, dtype=np.float64)
    _check_shape("pose", pose, (4, 4))
    rot_t = np.swapaxes(pose[..., :3, :3], -1, -2)
    pos = -np.einsum("...ij,...j->...i", rot_t, pose[..., :3, 3])
    return make_pose(pos, rot_t)


def quat_to_mat(quat: ArrayLike) -> NDArray[np.float64]:
    """Convert quaternions (x, y, z, w) to rotation matrices.

    The input is normalised first, so any non-zero scalar multiple gives the same rotation.

    Args:
        quat: [..., 4] quaternions in (x, y, z, w) order.

    Returns:
        [..., 3, 3] rotation matrices.
    """
    quat = np.asarray(quat, dtype=np.float64)
    _check_shape("quat", quat, (4,))
    norm = np.linalg.norm(quat, axis=-1, keepdims=True)
    if np.any(norm == 0.0):
        raise ValueError("quat must be non-zero")
    x, y, z, w = np.moveaxis(quat / norm, -1, 0)
    rows = [
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ]
    return np.stack([np.stack(r, axis=-1) for r in rows], axis=-2)


def mat_to_quat(rot: ArrayLike) -> NDArray[np.float64]:
    """Convert rotation matrices to unit quaternions (x, y, z, w) with w >= 0.

    Shepperd's method: of the four quantities 4w^2 = 1 + tr, 4x^2 = 1 + R00 - R11 - R22, ...,
    take the square root of the largest (always >= 1, so no cancellation) and recover the other
    three components from off-diagonal sums/differences. This stays accurate for every angle,
    including near 0 and near pi.

    Args:
        rot: [..., 3, 3] rotation matrices.

    Returns:
        [..., 4] unit quaternions, sign chosen so that w >= 0.
    """
    rot = np.asarray(rot, dtype=np.float64)
    _check_shape("rot", rot, (3, 3))
    if rot.ndim == 2:
        return np.array(_quat_one(rot))
    m = rot
    m00, m11, m22 = m[..., 0, 0], m[..., 1, 1], m[..., 2, 2]
    # Differences give w*(x, y, z); sums give the products between x, y and z.
    dx, dy, dz = (
        m[..., 2, 1] - m[..., 1, 2],
        m[..., 0, 2] - m[..., 2, 0],
        m[..., 1, 0] - m[..., 0, 1],
    )
    sxy, sxz, syz = (
        m[..., 0, 1] + m[..., 1, 0],
        m[..., 0, 2] + m[..., 2, 0],
        m[..., 1, 2] + m[..., 2, 1],
    )
    diag = np.stack(
        [1 + m00 + m11 + m22, 1 + m00 - m11 - m22, 1 - m00 + m11 - m22, 1 - m00 - m11 + m22],
        axis=-1,
    )
    # s = 4 * (the chosen component); only the chosen candidate is used, so clamp the rest to
    # keep sqrt and division finite.
    s = 2.0 * np.sqrt(np.maximum(diag, 1e-12))
    candidates = np.stack(
        [
            np.stack([dx, dy, dz, s[..., 0] ** 2 / 4], axis=-1) / s[..., 0:1],
            np.stack([s[..., 1] ** 2 / 4, sxy, sxz, dx], axis=-1) / s[..., 1:2],
            np.stack([sxy, s[..., 2] ** 2 / 4, syz, dy], axis=-1) / s[..., 2:3],
            np.stack([sxz, syz, s[..., 3] ** 2 / 4, dz], axis=-1) / s[..., 3:4],
        ],
        axis=-2,
    )
    best = np.argmax(diag, axis=-1)[..., None, None]
    quat = np.take_along_axis(candidates, best, axis=-2)[..., 0, :]
    quat = quat / np.linalg.norm(quat, axis=-1, keepdims=True)
    # q and -q are the same rotation; pick w >= 0 so the output is unique.
    return np.where(quat[..., 3:4] < 0, -quat, quat)


def _quat_one(rot: NDArray) -> tuple[float, float, float, float]:
    """`mat_to_quat` of one [3, 3] matrix in Python floats: the same operations in the same
    order (bit-identical, tested), without the ~40 array operations that make the batched form
    cost 0.1-0.2 ms a call; generation calls it twice per control step (profiled, Stack)."""
    (m00, m01, m02), (m10, m11, m12), (m20, m21, m22) = rot.tolist()
    diag = (1 + m00 + m11 + m22, 1 + m00 - m11 - m22, 1 - m00 + m11 - m22, 1 - m00 - m11 + m22)
    best = max(range(4), key=diag.__getitem__)  # the first largest, as np.argmax
    s = 2.0 * math.sqrt(max(diag[best], 1e-12))
    quarter = s * s / 4
    if best == 0:
        quat = (m21 - m12, m02 - m20, m10 - m01, quarter)
    elif best == 1:
        quat = (quarter, m01 + m10, m02 + m20, m21 - m12)
    elif best == 2:
        quat = (m01 + m10, quarter, m12 + m21, m02 - m20)
    else:
        quat = (m02 + m20, m12 + m21, quarter, m10 - m01)
    x, y, z, w = (c / s for c in quat)
    norm = math.sqrt(x * x + y * y + z * z + w * w)
    x, y, z, w = x / norm, y / norm, z / norm, w / norm
    return (-x, -y, -z, -w) if w < 0 else (x, y, z, w)


def _skew(v: NDArray) -> NDArray:
    """[..., 3] vectors -> [..., 3, 3] cross-product matrices ([v]x @ u == v x u)."""
    x, y, z = np.moveaxis(v, -1, 0)
    zero = np.zeros_like(x)
    return np.stack(
        [
            np.stack([zero, -z, y], axis=-1),
            np.stack([z, zero, -x], axis=-1),
            np.stack([-y, x, zero], axis=-1),
        ],
        axis=-2,
    )


def axis_angle_to_mat(axis_angle: ArrayLike) -> NDArray[np.float64]:
    """Convert axis-angle vectors to rotation matrices (Rodrigues' formula).

    R = I + a(t) [v]x + b(t) [v]x^2 with t = |v|, a = sin(t)/t, b = (1 - cos(t))/t^2. Writing it in
    terms of the unnormalised v avoids dividing by t, so the zero vector gives the identity.

    Args:
        axis_angle: [..., 3] axis (unit) times angle (rad); any angle is accepted.

    Returns:
        [..., 3, 3] rotation matrices.
    """
    v = np.asarray(axis_angle, dtype=np.float64)
    _check_shape("axis_angle", v, (3,))
    t = np.linalg.norm(v, axis=-1)
    small = t < _SMALL_ANGLE
    t_safe = np.where(small, 1.0, t)
    a = np.where(small, 1.0 - t**2 / 6.0, np.sin(t_safe) / t_safe)
    b = np.where(small, 0.5 - t**2 / 24.0, (1.0 - np.cos(t_safe)) / t_safe**2)
    k = _skew(v)
    eye = np.broadcast_to(np.eye(3), k.shape)
    return eye + a[..., None, None] * k + b[..., None, None] * (k @ k)


def mat_to_axis_angle(rot: ArrayLike) -> NDArray[np.float64]:
    """Convert rotation matrices to axis-angle vectors with angle in [0, pi].

    Goes through the quaternion (w >= 0): angle = 2 atan2(|xyz|, w), axis = xyz / |xyz|. atan2
    keeps full precision near 0 and near pi, where arccos of the trace would not. At exactly pi
    the sign of the axis is arbitrary (both describe the same rotation).

    Args:
        rot: [..., 3, 3] rotation matrices.

    Returns:
        [..., 3] axis-angle vectors; the zero vector for the identity.
    """
    rot = np.asarray(rot, dtype=np.float64)
    if rot.shape == (3, 3):  # one matrix: Python floats, bit-identical (see _quat_one)
        x, y, z, w = _quat_one(rot)
        n = math.sqrt(x * x + y * y + z * z)
        scale = 2.0 / max(w, 1e-12) if n < 1e-12 else 2.0 * math.atan2(n, w) / n
        return np.array((x * scale, y * scale, z * scale))
    quat = mat_to_quat(rot)
    xyz, w = quat[..., :3], quat[..., 3]
    n = np.linalg.norm(xyz, axis=-1)
    small = n < 1e-12
    n_safe = np.where(small, 1.0, n)
    # For tiny angles angle/n -> 2/w (w ~ 1 there), the limit of 2 atan2(n, w)/n.
    # math.atan2, not np.arctan2: numpy's SIMD atan2 differs from libm's in the last bit on
    # some CPUs (29 % of draws on this project's Haswell-tuned CI), and a batch must give the
    # bits the one-matrix path gives.
    angle = np.frompyfunc(math.atan2, 2, 1)(n, w).astype(np.float64)
    scale = np.where(small, 2.0 / np.maximum(w, 1e-12), 2.0 * angle / n_safe)
    return xyz * scale[..., None]


def held_offset(
    src_eef: ArrayLike, src_held: ArrayLike, cur_eef: ArrayLike, cur_held: ArrayLike
) -> NDArray[np.float64]:
    """[3] where a held object sat in the source's hand minus where it sits in the hand now,
    in the end-effector's frame (positions of the object's origin; orientations left alone).

    A segment re-targeted to another object (carry the held cube to the base cube) reproduces
    the source's end-effector pose relative to that object, so the held object lands where the
    source's did only if it sits in the hand as it sat in the source's. Adding this offset to
    each target, in the target's own frame, puts it there (`shift_in_hand`).
    """
    src_eef, src_held = np.asarray(src_eef, np.float64), np.asarray(src_held, np.float64)
    cur_eef, cur_held = np.asarray(cur_eef, np.float64), np.asarray(cur_held, np.float64)
    for name, pose in (("src_eef", src_eef), ("src_held", src_held), ("cur_eef", cur_eef)):
        _check_single(name, pose, (4, 4))
    _check_single("cur_held", cur_held, (4, 4))
    in_src = src_eef[:3, :3].T @ (src_held[:3, 3] - src_eef[:3, 3])
    in_cur = cur_eef[:3, :3].T @ (cur_held[:3, 3] - cur_eef[:3, 3])
    return in_src - in_cur


def shift_in_hand(poses: ArrayLike, offset: ArrayLike) -> NDArray[np.float64]:
    """[N, 4, 4] `poses` each moved by `offset` [3] expressed in its own frame."""
    out = np.array(poses, dtype=np.float64)
    out[:, :3, 3] += out[:, :3, :3] @ np.asarray(offset, dtype=np.float64)
    return out


def transform_segment(
    src_eef: ArrayLike, src_obj: ArrayLike, cur_obj: ArrayLike
) -> NDArray[np.float64]:
    """Replay a source end-effector segment relative to an object's new pose (MimicGen).

    Each eef pose keeps its pose relative to the object: T_cur_obj @ T_src_obj^-1 @ T_src_eef[i].

    Args:
        src_eef: [N, 4, 4] end-effector poses (world) from the source demonstration.
        src_obj: [4, 4] object pose (world) in the source demonstration.
        cur_obj: [4, 4] object pose (world) in the current scene.

    Returns:
        [N, 4, 4] end-effector poses (world) for the current scene.
    """
    src_eef = np.asarray(src_eef, dtype=np.float64)
    src_obj = np.asarray(src_obj, dtype=np.float64)
    cur_obj = np.asarray(cur_obj, dtype=np.float64)
    if src_eef.ndim != 3 or src_eef.shape[1:] != (4, 4):
        raise ValueError(f"src_eef must have shape [N, 4, 4], got {src_eef.shape}")
    _check_single("src_obj", src_obj, (4, 4))
    _check_single("cur_obj", cur_obj, (4, 4))
    return (cur_obj @ pose_inv(src_obj)) @ src_eef


CONTINUOUS_SYMMETRY_STEPS = (
    72  # frames tried for an object symmetric under any yaw (5 degrees apart)
)


def symmetric_frame(
    cur_obj: ArrayLike, src_obj: ArrayLike, src_eef: ArrayLike, reference: ArrayLike, fold: int
) -> NDArray[np.float64]:
    """The frame equivalent to `cur_obj` under its yaw symmetry that needs the least wrist rotation.

    An object with `fold`-fold symmetry about its own z axis (0: any angle) looks the same in
    cur_obj @ Rz(2 pi k / fold). The segment's first target, src_eef carried into each of those
    frames, is compared with `reference` (where the hand is now); the one closest in rotation wins.
    fold 1 (no symmetry) returns `cur_obj`.

    Args:
        cur_obj: [4, 4] object pose (world) now. src_obj: [4, 4] object pose in the source demo.
        src_eef: [4, 4] the source segment's first eef pose. reference: [4, 4] eef pose now.
    """
    cur_obj = np.asarray(cur_obj, dtype=np.float64)
    if fold == 1:
        return cur_obj
    count = CONTINUOUS_SYMMETRY_STEPS if fold == 0 else fold
    offset = pose_inv(np.asarray(src_obj, dtype=np.float64)) @ np.asarray(src_eef, dtype=np.float64)
    ref_rot = np.asarray(reference, dtype=np.float64)[:3, :3]
    best, best_angle = cur_obj, np.inf
    for k in range(count):
        turn = np.eye(4)
        angle = 2 * np.pi * k / count
        turn[:2, :2] = [[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]]
        frame = cur_obj @ turn
        rot = (frame @ offset)[:3, :3]
        wrist = np.linalg.norm(mat_to_axis_angle(ref_rot.T @ rot))
        if wrist < best_angle - 1e-9:
            best, best_angle = frame, wrist
    return best


def interpolate_poses(start: ArrayLike, end: ArrayLike, num_steps: int) -> NDArray[np.float64]:
    """Poses moving from ``start`` to ``end`` in ``num_steps`` equal steps.

    Position is interpolated linearly; rotation turns at constant speed about one fixed axis:
    R_k = R_start @ exp(s_k * log(R_start^T R_end)), s_k = k / num_steps, k = 1..num_steps.
    ``start`` itself is excluded (the robot is already there) and the last pose is exactly ``end``
    (so a following segment starts where this one stops, bit for bit).

    Args:
        start: [4, 4] start pose (world).
        end: [4, 4] end pose (world).
        num_steps: number of poses to return, >= 0.

    Returns:
        [num_steps, 4, 4] poses; shape [0, 4, 4] when num_steps == 0.
    """
    start = np.asarray(start, dtype=np.float64)
    end = np.asarray(end, dtype=np.float64)
    _check_single("start", start, (4, 4))
    _check_single("end", end, (4, 4))
    if int(num_steps) != num_steps or num_steps < 0:
        raise ValueError(f"num_steps must be an integer >= 0, got {num_steps!r}")
    num_steps = int(num_steps)
    if num_steps == 0:
        return np.zeros((0, 4, 4))
    s = np.arange(1, num_steps + 1, dtype=np.float64) / num_steps
    pos = start[:3, 3] + s[:, None] * (end[:3, 3] - start[:3, 3])
    rot_start = start[:3, :3]
    aa = mat_to_axis_angle(rot_start.T @ end[:3, :3])
    rot = rot_start @ axis_angle_to_mat(s[:, None] * aa)
    poses = make_pose(pos, rot)
    poses[-1] = end
    return poses


def transit_over(
    start: ArrayLike, end: ArrayLike, clearance: float, speed: float
) -> NDArray[np.float64]:
    """Poses from ``start`` up, across and down to ``end``, clear of what stands between them.

    Rises to ``clearance`` above the higher of the two positions, crosses at that height (turning
    the hand on the way), and descends onto ``end``; each leg takes ceil(length / speed) steps
    (at least one). ``start`` is excluded and the last pose is exactly ``end``.

    Args:
        start, end: [4, 4] poses (world). clearance: metres. speed: metres per step, > 0.
    """
    start = np.asarray(start, dtype=np.float64)
    end = np.asarray(end, dtype=np.float64)
    if speed <= 0:
        raise ValueError(f"speed must be > 0, got {speed!r}")
    top = max(start[2, 3], end[2, 3]) + clearance
    up, over = start.copy(), end.copy()
    up[2, 3], over[2, 3] = top, top
    poses, here = [], start
    for target in (up, over, end):
        steps = max(1, int(np.ceil(np.linalg.norm(target[:3, 3] - here[:3, 3]) / speed)))
        poses.append(interpolate_poses(here, target, steps))
        here = target
    return np.concatenate(poses)


def _frame(frame_rot: ArrayLike | None) -> NDArray[np.float64]:
    """Controller reference-frame rotation [3, 3]; identity when None."""
    frame = np.eye(3) if frame_rot is None else np.asarray(frame_rot, dtype=np.float64)
    _check_single("frame_rot", frame, (3, 3))
    return frame


def _limits(name: str, value: float | ArrayLike) -> NDArray[np.float64]:
    """Validate a controller output limit (scalar or [3], all > 0) and return it as [3]."""
    arr = np.asarray(value, dtype=np.float64)
    if arr.shape != (3,):
        arr = np.broadcast_to(arr, (3,))
    # Python floats: the numpy form of this check cost a sixth of a control step (profiled).
    if not all(0.0 < v < math.inf for v in arr.tolist()):
        raise ValueError(f"{name} must be > 0 and finite (e.g. 0.05), got {value!r}")
    return arr


def pose_to_delta_action(
    target: ArrayLike,
    current: ArrayLike,
    max_dpos: float | ArrayLike,
    max_drot: float | ArrayLike,
    frame_rot: ArrayLike | None = None,
) -> NDArray[np.float64]:
    """OSC_POSE delta action that moves the end effector from ``current`` toward ``target``.

    The controller interprets the action in its reference frame (the robot base):
    goal_p = p + max_dpos * a[:3] and goal_R = Rerr @ R with Rerr = exp(max_drot * a[3:]).
    This inverts that: the world translation and the world rotation error
    Rerr_world = R_target R_current^T are expressed in the base frame, scaled, and clipped to
    [-1, 1] (as the controller clips its input), so moves beyond the limits saturate.

    Args:
        target: [4, 4] desired end-effector pose (world).
        current: [4, 4] current end-effector pose (world).
        max_dpos: translation per unit action (m), scalar or [3]; robosuite default 0.05.
        max_drot: rotation per unit action (rad), scalar or [3]; robosuite default 0.5.
        frame_rot: [3, 3] orientation of the controller's reference frame (robot base) in the
            world; identity when None.

    Returns:
        [6] action in [-1, 1]: (dx, dy, dz, rx, ry, rz).
    """
    target = np.asarray(target, dtype=np.float64)
    current = np.asarray(current, dtype=np.float64)
    _check_single("target", target, (4, 4))
    _check_single("current", current, (4, 4))
    frame = _frame(frame_rot)
    dpos_max, drot_max = _limits("max_dpos", max_dpos), _limits("max_drot", max_drot)
    return checked_delta_action(target, current, dpos_max, drot_max, frame)


def checked_delta_action(
    target: NDArray[np.float64],
    current: NDArray[np.float64],
    dpos_max: NDArray[np.float64],
    drot_max: NDArray[np.float64],
    frame: NDArray[np.float64],
) -> NDArray[np.float64]:
    """`pose_to_delta_action` on arguments already checked (float64 [4, 4] poses, [3] limits
    > 0, a [3, 3] frame): the same operations, bit for bit, without the checks, which cost
    half of it (the two-arm loop calls it twice a control step with limits checked once)."""
    dpos = frame.T @ (target[:3, 3] - current[:3, 3])
    rot_err_world = target[:3, :3] @ current[:3, :3].T
    drot = mat_to_axis_angle(frame.T @ rot_err_world @ frame)
    action = np.concatenate([dpos / dpos_max, drot / drot_max])
    return np.minimum(np.maximum(action, -1.0), 1.0)  # np.clip, without its dispatch cost


def delta_action_to_pose(
    action: ArrayLike,
    current: ArrayLike,
    max_dpos: float | ArrayLike,
    max_drot: float | ArrayLike,
    frame_rot: ArrayLike | None = None,
) -> NDArray[np.float64]:
    """Goal pose an OSC_POSE controller sets for a delta action (inverse of pose_to_delta_action).

    Args:
        action: [6] (or longer; only the first 6 are read) delta action; clipped to [-1, 1] first,
            as the controller does.
        current: [4, 4] current end-effector pose (world).
        max_dpos: translation per unit action (m), scalar or [3].
        max_drot: rotation per unit action (rad), scalar or [3].
        frame_rot: [3, 3] orientation of the controller's reference frame in the world;
            identity when None.

    Returns:
        [4, 4] goal pose (world).
    """
    action = np.clip(np.asarray(action, dtype=np.float64)[:6], -1.0, 1.0)
    if action.shape != (6,):
        raise ValueError(f"action must have at least 6 entries, got shape {action.shape}")
    current = np.asarray(current, dtype=np.float64)
    _check_single("current", current, (4, 4))
    frame = _frame(frame_rot)
    dpos_max, drot_max = _limits("max_dpos", max_dpos), _limits("max_drot", max_drot)
    pos = current[:3, 3] + frame @ (action[:3] * dpos_max)
    rot_err_world = frame @ axis_angle_to_mat(action[3:6] * drot_max) @ frame.T
    return make_pose(pos, rot_err_world @ current[:3, :3])


def add_action_noise(
    actions: ArrayLike,
    scale: float,
    rng: np.random.Generator,
    noise_dims: slice = slice(0, 6),
) -> NDArray[np.float64]:
    """Add Gaussian noise to the arm dims of delta actions (MimicGen's action noise).

    Only ``noise_dims`` are perturbed and clipped to [-1, 1]; the other dims (the gripper)
    are returned unchanged, because noisy gripper commands would open/close at random.

    Args:
        actions: [T, D] actions (e.g. D = 7: 6 arm dims + 1 gripper); not modified.
        scale: standard deviation of the noise, in action units (>= 0); MimicGen uses 0.05.
        rng: the random generator to draw from (passed explicitly for reproducibility).
        noise_dims: which trailing-axis dims receive noise.

    Returns:
        [T, D] float64 copy of ``actions`` with noise added.
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    if not np.isfinite(scale) or scale < 0:
        raise ValueError(f"scale must be finite and >= 0 (e.g. 0.05), got {scale!r}")
    out = np.array(actions, dtype=np.float64)
    if out.ndim < 1:
        raise ValueError(f"actions must have shape [T, D], got {out.shape}")
    out[..., noise_dims] = noisy_clip(out[..., noise_dims], scale, rng)
    return out


def noisy_clip(
    values: NDArray[np.float64], scale: float, rng: np.random.Generator
) -> NDArray[np.float64]:
    """`add_action_noise`'s draw on arguments already checked: `values` plus Gaussian noise of
    `scale` (one standard normal draw per entry, in order), clipped to [-1, 1]; the two-arm
    loop calls it twice a control step."""
    noisy = values + scale * rng.standard_normal(values.shape)
    return np.minimum(np.maximum(noisy, -1.0), 1.0)  # np.clip's values, without its dispatch
