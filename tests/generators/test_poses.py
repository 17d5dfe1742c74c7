"""Tests for demofactory.generators.poses: hand-computed poses, round trips, and seeded random
cases."""

from __future__ import annotations

import numpy as np
import pytest
from demofactory.generators.poses import (
    CONTINUOUS_SYMMETRY_STEPS,
    add_action_noise,
    axis_angle_to_mat,
    delta_action_to_pose,
    held_offset,
    interpolate_poses,
    make_pose,
    mat_to_axis_angle,
    mat_to_quat,
    pose_inv,
    pose_to_delta_action,
    quat_to_mat,
    shift_in_hand,
    symmetric_frame,
    transform_segment,
    transit_over,
)

# Hand-written rotations (no helper code involved).
RZ90 = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
H = np.sqrt(0.5)
RZ45 = np.array([[H, -H, 0.0], [H, H, 0.0], [0.0, 0.0, 1.0]])
RX180 = np.diag([1.0, -1.0, -1.0])
MAX_DPOS, MAX_DROT = 0.05, 0.5  # robosuite OSC_POSE output_max defaults


def rot_z(angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def rot_x(angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])


def random_rotations(rng: np.random.Generator, n: int) -> np.ndarray:
    """[n, 3, 3] rotations from normalised Gaussian quaternions (uniform on SO(3))."""
    return quat_to_mat(rng.standard_normal((n, 4)))


def random_pose(rng: np.random.Generator) -> np.ndarray:
    return make_pose(rng.uniform(-1.0, 1.0, 3), random_rotations(rng, 1)[0])


def angle_between(r_a: np.ndarray, r_b: np.ndarray) -> float:
    return float(np.linalg.norm(mat_to_axis_angle(r_a.T @ r_b)))


# ---------------------------------------------------------------- make_pose / pose_inv


def test_make_pose_single_and_batched():
    pose = make_pose([1.0, 2.0, 3.0], RZ90)
    expected = np.array(
        [[0.0, -1.0, 0.0, 1.0], [1.0, 0.0, 0.0, 2.0], [0.0, 0.0, 1.0, 3.0], [0.0, 0.0, 0.0, 1.0]]
    )
    np.testing.assert_array_equal(pose, expected)
    assert pose.dtype == np.float64

    batch = make_pose(np.arange(6.0).reshape(2, 3), np.stack([np.eye(3), RZ90]))
    assert batch.shape == (2, 4, 4)
    np.testing.assert_array_equal(batch[1], make_pose([3.0, 4.0, 5.0], RZ90))
    np.testing.assert_array_equal(batch[:, 3], [[0, 0, 0, 1]] * 2)


def test_make_pose_rejects_bad_shapes():
    with pytest.raises(ValueError, match="pos"):
        make_pose([1.0, 2.0], np.eye(3))
    with pytest.raises(ValueError, match="rot"):
        make_pose([1.0, 2.0, 3.0], np.eye(4))


def test_pose_inv_hand_computed():
    # Frame at (1, 0, 0) rotated 90 deg about z: world (1, 1, 0) is local (1, 0, 0).
    pose = make_pose([1.0, 0.0, 0.0], RZ90)
    inv = pose_inv(pose)
    np.testing.assert_allclose(inv @ [1.0, 1.0, 0.0, 1.0], [1.0, 0.0, 0.0, 1.0], atol=1e-15)
    np.testing.assert_allclose(inv[:3, 3], [0.0, 1.0, 0.0], atol=1e-15)


def test_pose_inv_round_trip_batched():
    rng = np.random.default_rng(0)
    poses = make_pose(rng.uniform(-1, 1, (20, 3)), random_rotations(rng, 20))
    eye = np.broadcast_to(np.eye(4), (20, 4, 4))
    np.testing.assert_allclose(pose_inv(poses) @ poses, eye, atol=1e-12)
    np.testing.assert_allclose(poses @ pose_inv(poses), eye, atol=1e-12)


# ---------------------------------------------------------------- quaternions


def test_quat_to_mat_hand_computed():
    # 90 deg about z: q = (0, 0, sin 45, cos 45); maps x -> y.
    rot = quat_to_mat([0.0, 0.0, H, H])
    np.testing.assert_allclose(rot, RZ90, atol=1e-15)
    np.testing.assert_allclose(rot @ [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], atol=1e-15)
    np.testing.assert_allclose(quat_to_mat([1.0, 0.0, 0.0, 0.0]), RX180, atol=1e-15)
    np.testing.assert_allclose(quat_to_mat([0.0, 0.0, 0.0, 2.0]), np.eye(3))  # normalised


def test_mat_to_quat_hand_computed_and_canonical():
    np.testing.assert_allclose(mat_to_quat(RZ90), [0.0, 0.0, H, H], atol=1e-15)
    np.testing.assert_allclose(mat_to_quat(np.eye(3)), [0.0, 0.0, 0.0, 1.0])
    np.testing.assert_allclose(mat_to_quat(RX180), [1.0, 0.0, 0.0, 0.0], atol=1e-15)
    # -90 deg about z must come back with w > 0 (not as +90 deg with w < 0).
    np.testing.assert_allclose(mat_to_quat(RZ90.T), [0.0, 0.0, -H, H], atol=1e-15)


def test_quat_mat_round_trip_random():
    rng = np.random.default_rng(1)
    quats = rng.standard_normal((200, 4))
    quats /= np.linalg.norm(quats, axis=1, keepdims=True)
    quats *= np.sign(quats[:, 3:])  # canonical w >= 0
    rots = quat_to_mat(quats)
    np.testing.assert_allclose(
        rots @ np.swapaxes(rots, 1, 2), np.broadcast_to(np.eye(3), rots.shape), atol=1e-12
    )
    np.testing.assert_allclose(np.linalg.det(rots), 1.0, atol=1e-12)
    np.testing.assert_allclose(mat_to_quat(rots), quats, atol=1e-12)


def test_mat_to_quat_near_pi_each_axis():
    # Rotations of ~pi stress the branch selection (trace ~ -1).
    for axis in np.eye(3):
        for angle in (np.pi, np.pi - 1e-9):
            rot = axis_angle_to_mat(axis * angle)
            np.testing.assert_allclose(quat_to_mat(mat_to_quat(rot)), rot, atol=1e-12)


def test_one_matrix_takes_the_float_path_bit_for_bit():
    # A single [3, 3] goes through Python floats (generation's hot path); a batch through
    # numpy. Both must give the same bits: each of the four branches, the angles near 0 and pi,
    # the identity, and matrices slightly off orthonormal (as MuJoCo's are).
    rng = np.random.default_rng(11)
    near = [axis_angle_to_mat(a * t) for a in np.eye(3) for t in (1e-13, 1e-7, np.pi - 1e-9, np.pi)]
    rots = np.concatenate(
        [
            random_rotations(rng, 2000),
            np.array([np.eye(3), RZ90, RZ45, RX180, np.diag([-1.0, 1.0, -1.0]), *near]),
        ]
    )
    rots = np.concatenate([rots, rots[:200] + rng.normal(0.0, 1e-6, (200, 3, 3))])
    quats, angles = mat_to_quat(rots), mat_to_axis_angle(rots)
    assert {int(np.argmax(np.abs(q))) for q in quats} == {0, 1, 2, 3}  # every branch taken
    for rot, quat, angle in zip(rots, quats, angles, strict=True):
        assert np.array_equal(mat_to_quat(rot), quat)
        assert np.array_equal(mat_to_axis_angle(rot), angle)


# ---------------------------------------------------------------- axis-angle


def test_axis_angle_to_mat_hand_computed():
    np.testing.assert_allclose(axis_angle_to_mat([0.0, 0.0, np.pi / 2]), RZ90, atol=1e-15)
    np.testing.assert_allclose(axis_angle_to_mat([0.0, 0.0, np.pi / 4]), RZ45, atol=1e-15)
    np.testing.assert_allclose(axis_angle_to_mat([np.pi, 0.0, 0.0]), RX180, atol=1e-15)
    np.testing.assert_array_equal(axis_angle_to_mat(np.zeros(3)), np.eye(3))


def test_mat_to_axis_angle_hand_computed():
    np.testing.assert_allclose(mat_to_axis_angle(RZ90), [0.0, 0.0, np.pi / 2], atol=1e-15)
    np.testing.assert_allclose(mat_to_axis_angle(RZ90.T), [0.0, 0.0, -np.pi / 2], atol=1e-15)
    np.testing.assert_array_equal(mat_to_axis_angle(np.eye(3)), np.zeros(3))
    # At exactly pi either axis sign is correct.
    np.testing.assert_allclose(np.abs(mat_to_axis_angle(RX180)), [np.pi, 0.0, 0.0], atol=1e-15)


@pytest.mark.parametrize("angle", [0.0, 1e-12, 1e-8, 1e-5, 0.3, 2.0, np.pi - 1e-4, np.pi - 1e-8])
def test_axis_angle_round_trip(angle):
    rng = np.random.default_rng(2)
    axes = rng.standard_normal((20, 3))
    axes /= np.linalg.norm(axes, axis=1, keepdims=True)
    vecs = axes * angle
    back = mat_to_axis_angle(axis_angle_to_mat(vecs))
    # Relative precision for tiny angles; near pi the matrix itself pins the angle to ~1e-8.
    np.testing.assert_allclose(back, vecs, atol=1e-15 + 1e-9 * angle, rtol=1e-9)


def test_axis_angle_wraps_angles_above_pi():
    # 270 deg about z is -90 deg about z.
    np.testing.assert_allclose(
        mat_to_axis_angle(axis_angle_to_mat([0.0, 0.0, 1.5 * np.pi])),
        [0.0, 0.0, -np.pi / 2],
        atol=1e-12,
    )


# ---------------------------------------------------------------- transform_segment


def test_transform_segment_hand_computed():
    # Source: object at (0.2, 0.3, 0), unrotated; eef 5 cm along x and 10 cm above it.
    src_obj = make_pose([0.2, 0.3, 0.0], np.eye(3))
    src_eef = make_pose([[0.25, 0.3, 0.1], [0.2, 0.3, 0.2]], np.stack([np.eye(3), np.eye(3)]))
    # Current: object at (0.1, 0, 0), rotated 90 deg about z. The relative offset (0.05, 0, 0.1)
    # turns into (0, 0.05, 0.1), so the eef lands at (0.1, 0.05, 0.1), rotated with the object.
    cur_obj = make_pose([0.1, 0.0, 0.0], RZ90)
    out = transform_segment(src_eef, src_obj, cur_obj)
    assert out.shape == (2, 4, 4)
    np.testing.assert_allclose(out[0], make_pose([0.1, 0.05, 0.1], RZ90), atol=1e-15)
    np.testing.assert_allclose(out[1], make_pose([0.1, 0.0, 0.2], RZ90), atol=1e-15)


def test_transform_segment_keeps_relative_pose_random():
    rng = np.random.default_rng(3)
    src_obj, cur_obj = random_pose(rng), random_pose(rng)
    src_eef = make_pose(rng.uniform(-1, 1, (10, 3)), random_rotations(rng, 10))
    out = transform_segment(src_eef, src_obj, cur_obj)
    np.testing.assert_allclose(pose_inv(cur_obj) @ out, pose_inv(src_obj) @ src_eef, atol=1e-12)
    # Object unmoved -> trajectory unchanged.
    np.testing.assert_allclose(transform_segment(src_eef, src_obj, src_obj), src_eef, atol=1e-12)


def test_transform_segment_rejects_unbatched_eef():
    with pytest.raises(ValueError, match="src_eef"):
        transform_segment(np.eye(4), np.eye(4), np.eye(4))


def test_held_offset_and_shift_hand_computed():
    # The source held the cube 1 cm ahead of its hand (+x of the hand); this hand holds it 1 cm
    # behind, and is turned 90 degrees about z: the offset is +2 cm along the hand's x.
    src_eef, src_held = make_pose([0.0, 0.0, 0.3], np.eye(3)), make_pose([0.01, 0, 0.3], np.eye(3))
    cur_eef = make_pose([0.5, 0.5, 0.3], RZ90)
    cur_held = make_pose([0.5, 0.49, 0.3], np.eye(3))  # the hand's x is the world's y
    offset = held_offset(src_eef, src_held, cur_eef, cur_held)
    np.testing.assert_allclose(offset, [0.02, 0.0, 0.0], atol=1e-15)
    # shifted along each pose's own x: the world's y for the turned pose, x for the other
    poses = np.stack([cur_eef, src_eef])
    out = shift_in_hand(poses, offset)
    np.testing.assert_allclose(out[0, :3, 3], [0.5, 0.52, 0.3], atol=1e-15)
    np.testing.assert_allclose(out[1, :3, 3], [0.02, 0.0, 0.3], atol=1e-15)
    np.testing.assert_array_equal(out[:, :3, :3], poses[:, :3, :3])  # orientations kept
    np.testing.assert_array_equal(poses[0], cur_eef)  # the input is not modified


def test_shifted_targets_put_the_held_object_where_the_sources_was_random():
    rng = np.random.default_rng(5)
    src_eef, cur_eef = random_pose(rng), random_pose(rng)
    src_in_hand, cur_in_hand = rng.uniform(-0.03, 0.03, 3), rng.uniform(-0.03, 0.03, 3)
    src_held = src_eef @ make_pose(src_in_hand, np.eye(3))
    cur_held = cur_eef @ make_pose(cur_in_hand, np.eye(3))
    offset = held_offset(src_eef, src_held, cur_eef, cur_held)
    targets = make_pose(rng.uniform(-1, 1, (6, 3)), random_rotations(rng, 6))
    shifted = shift_in_hand(targets, offset)
    # the object, carried rigidly at the current grip, lands at each target's source grip
    np.testing.assert_allclose(
        (shifted @ make_pose(cur_in_hand, np.eye(3)))[:, :3, 3],
        (targets @ make_pose(src_in_hand, np.eye(3)))[:, :3, 3],
        atol=1e-12,
    )
    with pytest.raises(ValueError, match="cur_held"):
        held_offset(src_eef, src_held, cur_eef, np.eye(3))


# ---------------------------------------------------------------- interpolate_poses


def test_interpolate_poses_hand_computed():
    start = np.eye(4)
    end = make_pose([1.0, 0.0, 0.0], RZ90)
    out = interpolate_poses(start, end, 2)
    assert out.shape == (2, 4, 4)
    # Midpoint: half the translation and 45 deg of the 90 deg turn.
    np.testing.assert_allclose(out[0], make_pose([0.5, 0.0, 0.0], RZ45), atol=1e-15)
    np.testing.assert_array_equal(out[-1], end)


def test_interpolate_poses_constant_speed_random():
    rng = np.random.default_rng(4)
    start, end = random_pose(rng), random_pose(rng)
    out = interpolate_poses(start, end, 7)
    assert out.shape == (7, 4, 4)
    np.testing.assert_array_equal(out[-1], end)
    chain = np.concatenate([start[None], out])
    steps_pos = np.linalg.norm(np.diff(chain[:, :3, 3], axis=0), axis=1)
    steps_rot = [
        angle_between(a[:3, :3], b[:3, :3]) for a, b in zip(chain[:-1], chain[1:], strict=True)
    ]
    np.testing.assert_allclose(steps_pos, steps_pos[0], rtol=1e-9)
    np.testing.assert_allclose(steps_rot, angle_between(start[:3, :3], end[:3, :3]) / 7, rtol=1e-9)
    # Fixed axis: every step is the same relative rotation.
    rel = np.stack([a[:3, :3].T @ b[:3, :3] for a, b in zip(chain[:-1], chain[1:], strict=True)])
    np.testing.assert_allclose(rel, np.broadcast_to(rel[0], rel.shape), atol=1e-12)


def test_interpolate_poses_zero_and_one_step():
    end = make_pose([0.0, 0.0, 1.0], RZ90)
    assert interpolate_poses(np.eye(4), end, 0).shape == (0, 4, 4)
    np.testing.assert_array_equal(interpolate_poses(np.eye(4), end, 1), end[None])
    with pytest.raises(ValueError, match="num_steps"):
        interpolate_poses(np.eye(4), end, -1)


# ---------------------------------------------------------------- delta actions


def test_pose_to_delta_action_hand_computed():
    target = make_pose([0.01, -0.02, 0.03], rot_z(0.1))
    action = pose_to_delta_action(target, np.eye(4), MAX_DPOS, MAX_DROT)
    np.testing.assert_allclose(action, [0.2, -0.4, 0.6, 0.0, 0.0, 0.2], atol=1e-12)
    # The rotation error is taken in the world frame (left-multiplied), so a rotated current
    # pose with the same world-frame turn gives the same command.
    current = make_pose([0.5, 0.0, 0.2], RX180)
    target = make_pose([0.5, 0.0, 0.2], rot_z(0.1) @ RX180)
    action = pose_to_delta_action(target, current, MAX_DPOS, MAX_DROT)
    np.testing.assert_allclose(action, [0.0, 0.0, 0.0, 0.0, 0.0, 0.2], atol=1e-12)


def test_pose_to_delta_action_clips_large_moves():
    target = make_pose([1.0, -1.0, 0.01], rot_x(1.0))
    action = pose_to_delta_action(target, np.eye(4), MAX_DPOS, MAX_DROT)
    np.testing.assert_allclose(action, [1.0, -1.0, 0.2, 1.0, 0.0, 0.0], atol=1e-12)
    # The controller would then stop at the limit.
    goal = delta_action_to_pose(action, np.eye(4), MAX_DPOS, MAX_DROT)
    np.testing.assert_allclose(goal, make_pose([0.05, -0.05, 0.01], rot_x(0.5)), atol=1e-12)


def test_delta_action_frame_rot_hand_computed():
    # Robot base turned 90 deg about z: world +x is base -y, and a turn about world x is a
    # turn about base -y.
    current = make_pose([0.3, 0.2, 0.1], np.eye(3))
    target = make_pose([0.31, 0.2, 0.1], rot_x(0.1))
    action = pose_to_delta_action(target, current, MAX_DPOS, MAX_DROT, frame_rot=RZ90)
    np.testing.assert_allclose(action, [0.0, -0.2, 0.0, 0.0, -0.2, 0.0], atol=1e-12)
    goal = delta_action_to_pose(action, current, MAX_DPOS, MAX_DROT, frame_rot=RZ90)
    np.testing.assert_allclose(goal, target, atol=1e-12)


def test_delta_action_round_trip_random():
    rng = np.random.default_rng(5)
    for _ in range(20):
        current, frame = random_pose(rng), random_rotations(rng, 1)[0]
        action = rng.uniform(-0.95, 0.95, 6)
        goal = delta_action_to_pose(action, current, MAX_DPOS, MAX_DROT, frame_rot=frame)
        back = pose_to_delta_action(goal, current, MAX_DPOS, MAX_DROT, frame_rot=frame)
        np.testing.assert_allclose(back, action, atol=1e-10)


def test_delta_action_per_axis_limits():
    max_dpos, max_drot = [0.05, 0.1, 0.02], [0.5, 0.25, 1.0]
    target = make_pose([0.025, 0.05, 0.01], rot_z(0.5))
    action = pose_to_delta_action(target, np.eye(4), max_dpos, max_drot)
    np.testing.assert_allclose(action, [0.5, 0.5, 0.5, 0.0, 0.0, 0.5], atol=1e-12)
    np.testing.assert_allclose(
        delta_action_to_pose(action, np.eye(4), max_dpos, max_drot), target, atol=1e-12
    )
    with pytest.raises(ValueError, match="max_dpos"):
        pose_to_delta_action(target, np.eye(4), 0.0, max_drot)


# ---------------------------------------------------------------- add_action_noise


def test_add_action_noise_arm_only_deterministic_clipped():
    actions = np.zeros((50, 7))
    actions[:, :3] = 0.99  # noise pushes these past 1: must be clipped
    actions[:, 6] = np.where(np.arange(50) % 2 == 0, -1.0, 1.0)
    noisy_a = add_action_noise(actions, 0.05, np.random.default_rng(7))
    noisy_b = add_action_noise(actions, 0.05, np.random.default_rng(7))
    noisy_c = add_action_noise(actions, 0.05, np.random.default_rng(8))

    np.testing.assert_array_equal(noisy_a, noisy_b)
    assert not np.array_equal(noisy_a, noisy_c)
    np.testing.assert_array_equal(noisy_a[:, 6], actions[:, 6])  # gripper untouched
    assert np.all(np.abs(noisy_a) <= 1.0)
    assert np.any(noisy_a[:, :3] == 1.0)  # some clipping happened
    assert 0.02 < np.std(noisy_a[:, 3:6]) < 0.08  # noise has roughly the asked-for scale
    np.testing.assert_array_equal(actions[:, :3], 0.99)  # input not modified


def test_add_action_noise_custom_dims_and_bad_args():
    actions = np.full((4, 3), 0.5)
    noisy = add_action_noise(actions, 0.1, np.random.default_rng(0), noise_dims=slice(1, 2))
    np.testing.assert_array_equal(noisy[:, [0, 2]], actions[:, [0, 2]])
    assert not np.array_equal(noisy[:, 1], actions[:, 1])
    with pytest.raises(TypeError, match="Generator"):
        add_action_noise(actions, 0.1, np.random)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="scale"):
        add_action_noise(actions, -0.1, np.random.default_rng(0))


def _yaw(angle: float, pos=(0.0, 0.0, 0.0)) -> np.ndarray:
    pose = np.eye(4)
    pose[:2, :2] = [[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]]
    pose[:3, 3] = pos
    return pose


def test_symmetric_frame_picks_the_quarter_turn_nearest_the_hand():
    # The demo grasped a cube at yaw 0 with the hand at yaw 0; the cube now sits at yaw 100 degrees.
    # Without symmetry the hand must turn 100 degrees; a cube is the same after a quarter turn,
    # so the frame at 100 - 90 = 10 degrees is equivalent and needs a 10 degree turn.
    src_obj, src_eef, hand = _yaw(0.0), _yaw(0.0, (0, 0, 0.1)), _yaw(0.0, (0.3, 0, 0.2))
    cur = _yaw(np.radians(100), (0.1, 0.2, 0.0))
    assert np.allclose(symmetric_frame(cur, src_obj, src_eef, hand, 1), cur)
    frame = symmetric_frame(cur, src_obj, src_eef, hand, 4)
    assert np.allclose(frame, _yaw(np.radians(10), (0.1, 0.2, 0.0)))
    half = symmetric_frame(cur, src_obj, src_eef, hand, 2)  # half turns only: 100 or -80 degrees
    assert np.allclose(half, _yaw(np.radians(-80), (0.1, 0.2, 0.0)))


def test_symmetric_frame_under_any_yaw_lines_up_with_the_hand():
    cur = _yaw(np.radians(137), (0.1, 0.0, 0.0))
    frame = symmetric_frame(cur, _yaw(0.0), _yaw(0.0), _yaw(0.0), 0)
    assert np.allclose(frame[:3, 3], cur[:3, 3])
    angle = np.degrees(np.arctan2(frame[1, 0], frame[0, 0]))
    assert abs(angle) <= 360 / CONTINUOUS_SYMMETRY_STEPS / 2 + 1e-9


def test_transit_over_rises_crosses_and_descends():
    start, end = _yaw(0.0, (0.0, 0.0, 0.90)), _yaw(np.pi / 2, (0.30, 0.0, 0.85))
    poses = transit_over(start, end, clearance=0.1, speed=0.02)
    z = poses[:, 2, 3]
    top = 0.90 + 0.1
    up = int(np.argmax(np.isclose(z, top)))
    assert up == 4  # 0.10 m at 0.02 m a step
    crossing = poses[np.isclose(z, top)]
    assert np.allclose(crossing[-1][:3, 3], [0.30, 0.0, top])  # across at the clearance height
    assert len(crossing) == 1 + 15  # 0.30 m at 0.02 m a step
    assert np.all(np.diff(z[up:][len(crossing) - 1 :]) < 0)  # then only down
    assert np.array_equal(poses[-1], end)
    assert np.all(poses[:, 0, 3] >= -1e-12) and np.all(z >= 0.85 - 1e-12)


def test_disturbed_names_moved_or_tipped_objects_but_not_the_exempt():
    from demofactory.generators.mimicgen import disturbed

    tipped = np.eye(4)
    tipped[:3, :3] = [[1, 0, 0], [0, np.cos(0.5), -np.sin(0.5)], [0, np.sin(0.5), np.cos(0.5)]]
    before = {"a": np.eye(4), "b": np.eye(4), "c": np.eye(4), "held": np.eye(4)}
    after = {
        "a": _yaw(0.0, (0.02, 0, 0)),
        "b": tipped,
        "c": _yaw(0.0, (0.005, 0, 0)),
        "held": _yaw(0.0, (0.3, 0, 0)),
    }
    assert disturbed(before, after, exempt={"held"}) == ["a", "b"]
