"""Another robot than the one that recorded the seed demos: grasp frames, the robot check, and a
real generation on UR5e from the Panda's Lift demo (demofactory.seeds.cross_robot)."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
from demofactory.errors import SpecError
from demofactory.generators.poses import make_pose
from demofactory.robots.support import check_robot, robot_problem, supported_robots
from demofactory.seeds.demos import load_seed_demos
from demofactory.simulation.grasp_frame import grasp_frame, nearer_half_turn, retarget_eef

from tests.cli.test_cli_errors import DEMOS, REPO, assert_user_error, factory, write_spec


def _turn_z(angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


# --- grasp frame math (pure) -------------------------------------------------------------


def test_grasp_frame_sits_at_the_finger_ends_closing_along_x():
    # A hand at the world origin, looking down +z: pads 4 cm apart along y, 10 cm out; the
    # fingers reach 12 cm; the root 2 cm behind the origin.
    eef = np.eye(4)
    left, right = np.array([[0.0, 0.02, 0.1]]), np.array([[0.0, -0.02, 0.1]])
    tips = np.array([[0.0, 0.02, 0.12], [0.0, -0.02, 0.05]])
    frame = grasp_frame(eef, left, right, np.array([0.0, 0.0, -0.02]), tips)
    np.testing.assert_allclose(frame[:3, 3], [0.0, 0.0, 0.12], atol=1e-12)
    np.testing.assert_allclose(frame[:3, 0], [0.0, -1.0, 0.0], atol=1e-12)  # left -> right
    np.testing.assert_allclose(frame[:3, 2], [0.0, 0.0, 1.0], atol=1e-12)  # approach
    np.testing.assert_allclose(frame[:3, 1], [1.0, 0.0, 0.0], atol=1e-12)  # z x x
    # Expressed in the grip site: moving the whole hand leaves it unchanged.
    moved = make_pose([0.3, -0.1, 0.9], _turn_z(0.7) @ np.diag([1.0, -1.0, -1.0]))
    world = lambda p: p @ moved[:3, :3].T + moved[:3, 3]  # noqa: E731
    again = grasp_frame(
        moved, world(left), world(right), world(np.array([0, 0, -0.02])), world(tips)
    )
    np.testing.assert_allclose(again, frame, atol=1e-12)


def test_coinciding_pads_have_no_grasp_frame():
    pad = np.array([[0.0, 0.0, 0.1]])
    with pytest.raises(ValueError, match="coincide"):
        grasp_frame(np.eye(4), pad, pad, np.zeros(3), pad)


def test_retargeting_puts_the_target_grasp_frame_where_the_source_one_was():
    source = make_pose([0.0, 0.0, 0.01], np.eye(3))  # source fingers end 1 cm past its site
    target = make_pose([0.0, 0.0, 0.05], _turn_z(np.pi / 2))  # 5 cm, closing along its y
    poses = np.stack([make_pose([0.1, 0.2, 0.9], np.diag([1.0, -1.0, -1.0]))] * 2)
    out = retarget_eef(poses, source, target)
    np.testing.assert_allclose(out @ target, poses @ source, atol=1e-12)
    # by hand: the site 4 cm further back along the approach (world +z, the hand looks down),
    # turned a quarter turn about it
    np.testing.assert_allclose(out[0][:3, 3], [0.1, 0.2, 0.94], atol=1e-12)
    np.testing.assert_allclose(out[0][:3, :3], np.diag([1.0, -1.0, -1.0]) @ _turn_z(-np.pi / 2))


def test_a_half_turn_keeps_the_target_wrist_near_home():
    home = make_pose([0.5, 0.0, 1.0], np.diag([1.0, -1.0, -1.0]))
    source = np.eye(4)
    reversed_target = make_pose([0.0, 0.0, 0.0], _turn_z(np.pi))  # fingers close along -x
    chosen = nearer_half_turn(home, home, source, reversed_target)
    np.testing.assert_allclose(chosen, np.eye(4), atol=1e-12)
    assert nearer_half_turn(home, home, source, source) is source


# --- which robots ------------------------------------------------------------------------


def test_supported_robots_come_from_robosuite():
    robots = supported_robots()
    assert {"Panda", "Sawyer", "IIWA", "UR5e", "Kinova3", "Jaco"} <= set(robots)
    assert "bimanual" in robot_problem("Baxter")
    assert "fixed-base" in robot_problem("PandaOmron")
    assert "dexterous" in robot_problem("PandaDexRH")
    assert "fingerpad" in robot_problem("XArm7")  # its model names pads it does not have
    with pytest.raises(SpecError, match=r"task\.robot: 'Robby': robosuite has no such robot"):
        check_robot("spec.yaml", "Robby")


@pytest.mark.sim
@pytest.mark.parametrize(("robot", "why"), [("Robby", "no such robot"), ("XArm7", "fingerpad")])
def test_a_robot_that_cannot_be_used_is_one_line(tmp_path, robot, why):
    spec = write_spec(tmp_path, "lift_lowdim", mutate=lambda raw: raw["task"].update(robot=robot))
    line = assert_user_error(factory(REPO, "validate", spec), "task.robot", robot, why, "Sawyer")
    assert str(spec) in line


def test_the_recording_robot_is_read_from_the_file(tmp_path):
    for attrs, robot in (
        ({"env_info": json.dumps({"robots": ["Sawyer"]})}, "Sawyer"),
        ({"env_args": json.dumps({"env_name": "Lift", "env_kwargs": {"robots": "IIWA"}})}, "IIWA"),
        ({"env": "Lift"}, "Panda"),  # files older than env_info
    ):
        path = tmp_path / f"{robot}.hdf5"
        with h5py.File(path, "w") as f:
            data = f.create_group("data")
            data.attrs.update(attrs)
            data.create_dataset("demo_1/states", data=np.zeros((3, 5)))
            data.create_dataset("demo_1/actions", data=np.zeros((3, 7)))
        assert load_seed_demos(path)[0].robot == robot


# --- a real generation on another robot ---------------------------------------------------


@pytest.mark.sim
def test_ur5e_generates_lift_from_a_panda_demo():
    from demofactory.generators.mimicgen import AttemptPlan, attempt_seed, generate_attempt
    from demofactory.seeds.resolve import resolve_spec
    from demofactory.specs.spec import load_spec

    one_demo = str(DEMOS / "lift_panda_1demo_robosuite100.hdf5")
    spec = load_spec(
        REPO / "scene_specs/lift_lowdim.yaml", {"task.robot": "UR5e", "seed_demos": [one_demo]}
    )
    resolved = resolve_spec(spec)
    demo, scene = resolved.demos[0], resolved.scene
    assert demo.demo.robot == "Panda"
    # The cameras a spec names are the Panda's: robosuite names each robot's alike, so a dataset
    # keeps its image keys whichever robot made it.
    assert {"agentview", "robot0_eye_in_hand"} <= set(scene.camera_names())
    # The start is UR5e's own model state (6 arm joints to the Panda's 7): its arm at home, the
    # cube where the Panda demo had it.
    assert demo.start_state.shape == (scene.state_size,)
    arm = scene.env.robots[0]
    assert len(arm.init_qpos) == 6
    np.testing.assert_allclose(demo.start_state[1:7], arm.init_qpos)
    panda_cube = demo.demo.states[0][1 + 9 : 1 + 16]  # Panda: 7 arm + 2 finger joints, then cube
    np.testing.assert_allclose(
        demo.start_state[1 + scene.model.nq - 7 : 1 + scene.model.nq], panda_cube
    )
    # One attempt (cube moved and turned by its seed): the Panda's grasp, carried over by the
    # grasp frames, lifts the cube with UR5e's Robotiq 85, repaired
    # (demofactory.robots.gripper_fixes) and
    # stepped by the fast loop (100 of 100 in benchmarks/).
    assert scene.fast_control, scene.fast_control_note
    attempt = generate_attempt(
        scene, resolved.demos, AttemptPlan(0, 0, attempt_seed(0, 0, 0)), resolved.params
    )
    assert attempt.success, attempt.reason
