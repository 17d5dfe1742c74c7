"""The lean control loop against robosuite's own env.step, on real envs with random actions."""

from __future__ import annotations

import numpy as np
import pytest
from demofactory.simulation.fast_step import FastStepper, Unsupported
from demofactory.simulation.scene import Scene
from demofactory.specs.spec import load_spec

from tests.conftest import SPECS

pytestmark = pytest.mark.sim


def both_ways(scene, fast, actions):
    """From the scene's state now: `actions` through env.step, then again from the same start
    through `fast`. Returns (start snapshot, env.step states, fast states, env.step's gripper
    action at the end)."""
    start = scene.snapshot()
    reference = []
    for action in actions:
        scene.env.step(action)
        reference.append(scene.get_state())
    reference_grip = scene.snapshot().gripper_action
    scene.restore(start)
    ours = []
    for action in actions:
        fast.step(action)
        ours.append(scene.get_state())
    return start, np.array(reference), np.array(ours), reference_grip


@pytest.mark.parametrize(
    "spec_name",
    [
        "lift.yaml",
        "stack.yaml",
        "pick_place_can.yaml",
        "nut_assembly.yaml",
        "door.yaml",
        "cube_bowl.yaml",
    ],
)
def test_fast_steps_follow_env_step(spec_name):
    scene = Scene(load_spec(SPECS / spec_name))
    fast = FastStepper(scene.env)
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, (23, 7))
    actions[:, 6] = np.sign(actions[:, 6])
    scene.env.reset()
    for action in actions[
        :3
    ]:  # past the first step after a reset, where robosuite uses cached dynamics
        scene.env.step(action)
    start, reference, ours, reference_grip = both_ways(scene, fast, actions[3:])
    # Same operations up to BLAS summation order: 1e-14 per step, grown a little by contacts.
    np.testing.assert_allclose(np.array(ours), np.array(reference), rtol=0, atol=1e-9)
    assert not np.array_equal(ours[0], start.state)  # it moved
    # the gripper command went through the same speed limit
    assert np.array_equal(scene.snapshot().gripper_action, reference_grip)


def test_a_controller_it_cannot_reproduce_is_refused():
    import robosuite
    from robosuite.controllers import load_composite_controller_config

    config = load_composite_controller_config(controller="BASIC", robot="Panda")
    config["body_parts"]["right"]["input_ref_frame"] = "world"
    env = robosuite.make(
        "Lift",
        robots="Panda",
        controller_configs=config,
        has_renderer=False,
        has_offscreen_renderer=False,
        use_camera_obs=False,
    )
    with pytest.raises(Unsupported, match="base reference frame"):
        FastStepper(env)


def test_scenes_use_it_unless_the_spec_says_otherwise():
    assert Scene(load_spec(SPECS / "lift.yaml")).fast_control
    assert not Scene(load_spec(SPECS / "lift.yaml", {"task.fast_control": False})).fast_control


@pytest.mark.parametrize("robot", ["Sawyer", "IIWA", "UR5e", "Kinova3", "Jaco"])
def test_every_robot_steps_fast(robot):
    # demofactory.robots.support.supported_robots() but the Panda (above): each arm's controller and
    # gripper.
    # Every one takes the fast path since the factory repairs the Robotiq 85 (UR5e, Kinova3;
    # demofactory.robots.gripper_fixes) and IIWA's controller frame (demofactory.robots.arm_fixes).
    scene = Scene(load_spec(SPECS / "lift_lowdim.yaml", {"task.robot": robot}))
    assert scene.fast_control and scene.fast_control_note == "", scene.fast_control_note
    fast = FastStepper(scene.env)
    rng = np.random.default_rng(1)
    actions = rng.uniform(-1, 1, (6, 7))
    # The hand closes, then opens (the Robotiq 85 of UR5e and Kinova3 did not survive that
    # before demofactory.robots.gripper_fixes closed its linkage).
    actions[:, 6] = 1.0
    actions[4:, 6] = -1.0
    for action in actions[:2]:  # past robosuite's cached first step after a reset
        scene.env.step(action)
    start, reference, ours, _ = both_ways(scene, fast, actions[2:])
    np.testing.assert_allclose(np.array(ours), np.array(reference), rtol=0, atol=1e-9)
    assert not np.array_equal(ours[0], start.state)


def test_the_compiled_substeps_are_the_python_loop_bit_for_bit(monkeypatch):
    from demofactory.simulation import fast_step

    assert fast_step._c_api() is not None  # the mujoco wheel ships the library it loaded
    scene = Scene(load_spec(SPECS / "stack_lowdim.yaml"))
    fast = FastStepper(scene.env)
    rng = np.random.default_rng(2)
    actions = rng.uniform(-1, 1, (12, 7))
    actions[:, 6] = np.sign(actions[:, 6])
    scene.reset()
    start = scene.snapshot()
    runs = {}
    for compiled in (True, False):
        scene.restore(start)
        fast.compiled = compiled
        runs[compiled] = []
        for action in actions:
            fast.step(action)
            runs[compiled].append(scene.get_state())
    np.testing.assert_array_equal(np.array(runs[True]), np.array(runs[False]))
    assert not np.array_equal(runs[True][0], start.state)

    # Without ARENA_HEADROOM times the arena used so far, the Python loop steps instead.
    def compiled_loop(*args):
        raise AssertionError("the compiled loop ran without headroom")

    monkeypatch.setattr(fast_step, "_substeps", compiled_loop)
    monkeypatch.setattr(fast_step, "ARENA_HEADROOM", 2 * scene.data.narena)
    fast.compiled = True
    scene.restore(start)
    fast.step(actions[0])
    np.testing.assert_array_equal(scene.get_state(), runs[True][0])


def test_the_compiled_goal_is_robosuites():
    """`arm_goal` against robosuite's own helpers (scale_action, axisangle2quat, quat2mat) and
    its frames, on random actions, sites and base frames; its quat2mat bit for bit."""
    from demofactory.simulation.fast_step import _quat_to_mat32, arm_goal
    from robosuite.utils import transform_utils as T

    rng = np.random.default_rng(4)
    for q in rng.standard_normal((500, 4)) * rng.choice([1e-4, 1.0, 30.0], (500, 1)):
        np.testing.assert_array_equal(_quat_to_mat32(q), T.quat2mat(q))
    scene = Scene(load_spec(SPECS / "lift_lowdim.yaml"))
    arm = scene.env.robots[0].part_controllers["right"]
    arm.scale_action(np.zeros(6))
    constants = [
        np.asarray(v, dtype=np.float64) * np.ones(6)
        for v in (
            arm.input_min,
            arm.input_max,
            arm.action_input_transform,
            arm.action_scale,
            arm.action_output_transform,
        )
    ]
    for _ in range(200):
        action = rng.uniform(-1.5, 1.5, 6)  # beyond the input range too: clipped
        action[3:] *= rng.choice([0.0, 1.0])  # no rotation at all, sometimes
        origin_ori, ref_ori = T.quat2mat(rng.standard_normal(4)), T.quat2mat(rng.standard_normal(4))
        origin_pos, ref_pos = rng.uniform(-1, 1, 3), rng.uniform(-1, 1, 3)
        pos, ori = arm_goal(action, *constants, origin_pos, origin_ori, ref_pos, ref_ori)
        scaled = arm.scale_action(action)
        to_base = origin_ori.T
        goal_pos = to_base @ (ref_pos - origin_pos) + scaled[:3]
        goal_ori = T.quat2mat(T.axisangle2quat(scaled[3:])) @ (to_base @ ref_ori)
        np.testing.assert_allclose(pos, origin_pos + origin_ori @ goal_pos, rtol=0, atol=1e-15)
        np.testing.assert_allclose(ori, origin_ori @ goal_ori, rtol=0, atol=1e-15)


def test_absolute_osc_goals_step_as_env_step_does():
    # `factory export --actions abs_eef` replays through robosuite's absolute OSC_POSE: the fast
    # loop takes the action as the goal (base frame, rotation vector), as robosuite's set_goal
    from demofactory.build.action_spaces import arm_controller
    from demofactory.simulation.scene import make_env
    from demofactory.simulation.scene_build import env_kwargs

    spec = load_spec(SPECS / "lift_lowdim.yaml")
    env = make_env(spec.task, spec.seed, arm=arm_controller("abs_eef"), **env_kwargs(spec))
    scene = Scene(spec, env)
    assert scene.fast_control, scene.fast_control_note  # adopted: a few steps matched env.step
    fast = FastStepper(scene.env)
    assert fast.absolute
    scene.env.reset()
    scene.env.step(np.zeros(7))  # past robosuite's cached first step after a reset
    arm = scene.env.robots[0].part_controllers["right"]
    here = arm.goal_origin_to_eef_pose()  # the hand's pose in the base frame, 4x4
    from scipy.spatial.transform import Rotation

    rng = np.random.default_rng(2)
    goals = here[:3, 3] + rng.uniform(-0.05, 0.05, (12, 3))
    turns = Rotation.from_matrix(here[:3, :3]) * Rotation.from_rotvec(
        rng.uniform(-0.2, 0.2, (12, 3))
    )
    actions = np.concatenate([goals, turns.as_rotvec(), np.sign(rng.uniform(-1, 1, (12, 1)))], 1)
    start, reference, ours, reference_grip = both_ways(scene, fast, actions)
    np.testing.assert_allclose(ours, reference, rtol=0, atol=1e-9)
    assert np.abs(ours[-1] - start.state).max() > 1e-3  # it moved towards the goals
    assert np.array_equal(scene.snapshot().gripper_action, reference_grip)


def test_joint_position_targets_step_as_env_step_does():
    # `factory export --actions joint_pos` replays through robosuite's JOINT_POSITION controller
    # (absolute targets, the factory's gains): the fast loop runs its torque law per substep
    from demofactory.build.action_spaces import arm_controller
    from demofactory.simulation.scene import make_env
    from demofactory.simulation.scene_build import env_kwargs

    spec = load_spec(SPECS / "lift_lowdim.yaml")
    env = make_env(spec.task, spec.seed, arm=arm_controller("joint_pos"), **env_kwargs(spec))
    scene = Scene(spec, env)
    assert scene.fast_control, scene.fast_control_note
    fast = FastStepper(scene.env)
    assert fast.joint
    scene.env.reset()
    robot = scene.env.robots[0]
    here = np.array(scene.env.sim.data.qpos[robot._ref_joint_pos_indexes])
    scene.env.step(np.concatenate([here, [0.0]]))  # past robosuite's cached first step
    rng = np.random.default_rng(3)
    targets = here + np.cumsum(rng.uniform(-0.03, 0.03, (12, len(here))), axis=0)
    actions = np.concatenate([targets, np.sign(rng.uniform(-1, 1, (12, 1)))], 1)
    start, reference, ours, reference_grip = both_ways(scene, fast, actions)
    np.testing.assert_allclose(ours, reference, rtol=0, atol=1e-9)
    assert np.abs(ours[-1] - start.state).max() > 1e-3
    assert np.array_equal(scene.snapshot().gripper_action, reference_grip)


TWO_ARM_LIFT = SPECS / "two_arm_lift.yaml"


def _two_arm_both_ways(scene, fast, actions):
    """`both_ways` for a robot pair: every hand's gripper command state restored with the
    MuJoCo state (`Scene.snapshot` keeps robot 0's). Returns (start state, env.step states,
    fast states, whether each hand's command state ended the same)."""
    grippers = [robot.gripper[robot.arms[0]] for robot in scene.env.robots]
    start, held = scene.snapshot(), [np.array(g.current_action, copy=True) for g in grippers]
    reference = []
    for action in actions:
        scene.env.step(action)
        reference.append(scene.get_state())
    reference_held = [np.array(g.current_action, copy=True) for g in grippers]
    scene.restore(start)
    for gripper, action in zip(grippers, held, strict=True):
        gripper.current_action = action.copy()
    ours = []
    for action in actions:
        fast.step(action)
        ours.append(scene.get_state())
    same = [
        np.array_equal(g.current_action, a) for g, a in zip(grippers, reference_held, strict=True)
    ]
    return start.state, np.array(reference), np.array(ours), same


@pytest.fixture(scope="module", params=["parallel", "opposed"])
def two_arm_scene(request):
    from demofactory.simulation.bimanual import TwoArmScene

    spec = load_spec(TWO_ARM_LIFT, {"task.two_arm.configuration": request.param})
    return TwoArmScene(spec)


def test_two_arm_fast_steps_follow_env_step(two_arm_scene):
    from demofactory.simulation.fast_step import PairStepper

    scene = two_arm_scene
    # adopted: its check against env.step passed on this pair
    assert scene.fast_control and scene.fast_control_note == "", scene.fast_control_note
    assert isinstance(scene._fast, PairStepper)
    fast = PairStepper(scene.env)
    rng = np.random.default_rng(3)
    actions = rng.uniform(-1, 1, (23, 14))
    actions[:, [6, 13]] = np.sign(actions[:, [6, 13]])
    scene.env.reset()
    for action in actions[:3]:  # past robosuite's cached first step after a reset
        scene.env.step(action)
    start, reference, ours, same_grip = _two_arm_both_ways(scene, fast, actions[3:])
    np.testing.assert_allclose(ours, reference, rtol=0, atol=1e-9)
    assert not np.array_equal(ours[0], start)  # it moved
    assert same_grip == [True, True]  # both hands' commands through robosuite's speed limit
    # both arms moved (robot 1's half of the action is not dropped)
    for robot in scene.env.robots:
        joints = np.asarray(robot._ref_joint_pos_indexes)
        assert np.abs(ours[-1][1 + joints] - start[1 + joints]).max() > 1e-3


def test_two_arm_compiled_substeps_are_the_python_loop_bit_for_bit(two_arm_scene):
    from demofactory.simulation.fast_step import PairStepper

    scene = two_arm_scene
    fast = PairStepper(scene.env)
    rng = np.random.default_rng(4)
    actions = rng.uniform(-1, 1, (10, 14))
    actions[:, [6, 13]] = np.sign(actions[:, [6, 13]])
    scene.reset()
    start = scene.snapshot()
    grippers = [robot.gripper[robot.arms[0]] for robot in scene.env.robots]
    held = [np.array(g.current_action, copy=True) for g in grippers]
    runs = {}
    for compiled in (True, False):
        scene.restore(start)
        for gripper, action in zip(grippers, held, strict=True):
            gripper.current_action = action.copy()
        fast.compiled = compiled
        runs[compiled] = [fast.step(a) or scene.get_state() for a in actions]
    np.testing.assert_array_equal(np.array(runs[True]), np.array(runs[False]))


def test_a_two_arm_controller_it_cannot_reproduce_falls_back_with_the_reason():
    import robosuite
    from demofactory.simulation.fast_step import PairStepper
    from demofactory.simulation.scene import _fast_stepper
    from robosuite.controllers import load_composite_controller_config

    config = load_composite_controller_config(controller="BASIC", robot="Panda")
    config["body_parts"]["right"]["input_ref_frame"] = "world"
    env = robosuite.make(
        "TwoArmLift",
        robots=["Panda", "Panda"],
        env_configuration="parallel",
        controller_configs=config,
        has_renderer=False,
        has_offscreen_renderer=False,
        use_camera_obs=False,
    )
    with pytest.raises(Unsupported, match="base reference frame"):
        PairStepper(env)
    stepper, why = _fast_stepper(env)  # what a TwoArmScene adopts: env.step, and why
    assert stepper is None and "base reference frame" in why


TWO_ARM_PEG = SPECS / "two_arm_peg_in_hole.yaml"


def test_two_arm_fast_steps_follow_env_step_without_grippers():
    """TwoArmPegInHole's robots have bare wrists (robosuite's NullGripper): no gripper
    controller, actuator or action column; each robot's part of the action is 6 wide."""
    from demofactory.simulation.bimanual import TwoArmScene
    from demofactory.simulation.fast_step import PairStepper

    scene = TwoArmScene(load_spec(TWO_ARM_PEG))
    assert scene.fast_control and scene.fast_control_note == "", scene.fast_control_note
    fast = PairStepper(scene.env)
    assert [part.has_gripper for part in fast.parts] == [False, False]
    assert fast.action_dim == scene.action_dim == 12
    actions = np.random.default_rng(5).uniform(-1, 1, (23, 12))
    scene.env.reset()
    for action in actions[:3]:  # past robosuite's cached first step after a reset
        scene.env.step(action)
    start, reference, ours, _ = _two_arm_both_ways(scene, fast, actions[3:])
    np.testing.assert_allclose(ours, reference, rtol=0, atol=1e-9)
    for robot in scene.env.robots:  # both arms moved
        joints = np.asarray(robot._ref_joint_pos_indexes)
        assert np.abs(ours[-1][1 + joints] - start[1 + joints]).max() > 1e-3
    # the compiled substeps are the Python loop's, bit for bit
    scene.reset()
    begin = scene.snapshot()
    runs = {}
    for compiled in (True, False):
        scene.restore(begin)
        fast.compiled = compiled
        runs[compiled] = [fast.step(a) or scene.get_state() for a in actions[:8]]
    np.testing.assert_array_equal(np.array(runs[True]), np.array(runs[False]))
