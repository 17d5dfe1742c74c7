"""A lean control loop for robosuite's OSC_POSE arm + gripper: the same physics, less Python.

robosuite's `env.step` spends ~85 % of its time outside MuJoCo: at each of the 25
physics substeps of a control step it walks its robot, composite-controller and
part-controller objects, looks sites up by name, copies arrays and fills
observation buffers. Generation needs none of that. `FastStepper` does what those
objects do to the simulation, in the same order and with robosuite's formulas, and
nothing else:

    per control step, for each substep:
        mj_step1 ─► (first substep) goal from the action: OSC delta pose in the base frame,
                    gripper command through the gripper's speed limit
                 ─► OSC torques (+ gravity compensation, nullspace posture) ─► clip to ctrlrange
        mj_step2

The test suite checks it against `env.step` on random actions: states agree to
1e-9 after 20 control steps (the same formulas, evaluated in another order). Any
configuration it does not reproduce (another controller type, interpolation,
variable impedance, a mobile base) is refused at construction, and so is a robot on which
a few steps do not land where env.step's do (`check_against_env_step`: IIWA, and the
Robotiq 85 hands of UR5e and Kinova3); the Scene then falls back to `env.step` and
`factory validate` says why.
"""

from __future__ import annotations

import mujoco
import numba
import numpy as np
from robosuite.controllers.parts.arm.osc import OperationalSpaceController
from robosuite.robots import FixedBaseRobot
from robosuite.utils import transform_utils as T


class Unsupported(Exception):
    """The env's controller configuration is not one FastStepper reproduces exactly."""


class FastStepper:
    """Steps a single-arm, fixed-base robosuite env exactly like `env.step`, minus observations."""

    def __init__(self, env):
        if len(env.robots) != 1 or not env.lite_physics:
            raise Unsupported("one robot and lite_physics are required")
        robot = env.robots[0]
        if not isinstance(robot, FixedBaseRobot):
            raise Unsupported("only fixed-base robots are supported")
        arm_name = robot.arms[0]
        arm = robot.part_controllers[arm_name]
        _check_arm(arm)
        grip_name = robot.get_gripper_name(arm_name)
        self.model, self.data = env.sim.model._model, env.sim.data._data
        self.arm, self.grip = arm, robot.part_controllers[grip_name]
        self.gripper_model = robot.gripper[arm_name]
        if getattr(self.grip, "interpolator", None) is not None:
            raise Unsupported("gripper interpolation is not supported")
        comp = robot.composite_controller
        if set(comp.part_controllers) != {arm_name, grip_name}:
            raise Unsupported(f"unexpected controller parts {sorted(comp.part_controllers)}")
        self.arm_slice = slice(*comp._action_split_indexes[arm_name])
        self.grip_slice = slice(*comp._action_split_indexes[grip_name])
        self.arm_act = np.asarray(robot._ref_actuators_indexes_dict[arm_name])
        self.grip_act = np.asarray(robot._ref_actuators_indexes_dict[grip_name])
        ctrlrange = self.model.actuator_ctrlrange
        self.arm_low, self.arm_high = ctrlrange[self.arm_act, 0], ctrlrange[self.arm_act, 1]
        self.grip_low, self.grip_high = ctrlrange[self.grip_act, 0], ctrlrange[self.grip_act, 1]
        self.ref_site = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_SITE, arm.ref_name)
        center = f"{arm.naming_prefix}{arm.part_name}_center"
        self.center_site = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_SITE, center)
        self.qpos_index = np.asarray(arm.qpos_index, dtype=np.int64)
        self.qvel_index = np.asarray(arm.qvel_index, dtype=np.int64)
        self.substeps = int(round(env.control_timestep / env.model_timestep))
        self._jac = np.zeros((3, self.model.nv)), np.zeros((3, self.model.nv))
        self._mass = np.zeros((self.model.nv, self.model.nv))
        # The OSC gains under robosuite's controller's names (factory.physics scales them).
        self.kp = np.asarray(arm.kp, dtype=np.float64)
        self.kd = np.asarray(arm.kd, dtype=np.float64)
        self._initial_joint = np.asarray(arm.initial_joint, dtype=np.float64)

    def step(self, action: np.ndarray) -> None:
        """One control step: the same substeps, controls and order as robosuite's env.step."""
        model, data = self.model, self.data
        arm_act, low, high = self.arm_act, self.arm_low, self.arm_high
        for i in range(self.substeps):
            mujoco.mj_step1(model, data)
            if i == 0:
                # The arm's base is fixed: its frame (robosuite reads it every substep), hence the
                # world-frame goal, and the gripper's command hold for the whole control step;
                # computed once, they save a third of the loop's Python time (profiled, Stack).
                origin_pos, origin_ori = self._origin()
                goal_pos, goal_ori = self._set_goal(action, (origin_pos, origin_ori))
                desired = origin_pos + origin_ori @ goal_pos, origin_ori @ goal_ori
                grip = np.minimum(np.maximum(self._grip_ctrl, self.grip_low), self.grip_high)
            data.ctrl[arm_act] = np.minimum(np.maximum(self._arm_torques(*desired), low), high)
            data.ctrl[self.grip_act] = grip
            mujoco.mj_step2(model, data)

    # --- goals (first substep) -----------------------------------------------------------
    def _origin(self) -> tuple[np.ndarray, np.ndarray]:
        return np.array(self.data.site_xpos[self.center_site]), np.array(
            self.data.site_xmat[self.center_site].reshape([3, 3])
        )

    def _set_goal(
        self, action: np.ndarray, origin: tuple[np.ndarray, np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray]:
        """World-frame goal position and orientation of the arm; the gripper command."""
        origin_pos, origin_ori = origin
        ref_pos = np.array(self.data.site_xpos[self.ref_site])
        ref_ori = np.array(self.data.site_xmat[self.ref_site].reshape([3, 3]))
        scaled = self.arm.scale_action(action[self.arm_slice])
        origin_inv = T.pose_inv(T.make_pose(origin_pos, origin_ori))
        world_frame = np.eye(4)
        world_frame[:3, 3] = ref_pos
        goal_pos, _ = T.mat2pose(T.pose_in_A_to_pose_in_B(world_frame, origin_inv))
        goal_pos = goal_pos + scaled[0:3]
        current = T.pose_in_A_to_pose_in_B(T.make_pose(ref_pos, ref_ori), origin_inv)[:3, :3]
        goal_ori = np.dot(T.quat2mat(T.axisangle2quat(scaled[3:6])), current)
        # the gripper: speed-limited command, then the controller's scaling to actuator range
        formatted = self.gripper_model.format_action(action[self.grip_slice])
        goal = self.grip.scale_action(formatted) if self.grip.use_action_scaling else formatted
        if self.grip.use_action_scaling:
            bias = 0.5 * (self.grip.actuator_max + self.grip.actuator_min)
            weight = 0.5 * (self.grip.actuator_max - self.grip.actuator_min)
            self._grip_ctrl = bias + weight * np.array(goal)
        else:
            self._grip_ctrl = np.array(goal)
        return goal_pos, goal_ori

    # --- torques (every substep) ---------------------------------------------------------
    def _arm_torques(self, desired_pos: np.ndarray, desired_ori: np.ndarray) -> np.ndarray:
        """OSC torques toward a world-frame goal position [3] and orientation [3, 3]."""
        model, data = self.model, self.data
        jacp, jacr = self._jac
        mujoco.mj_jacSite(model, data, jacp, jacr, self.ref_site)
        mujoco.mj_fullM(model, self._mass, data.qM)
        return osc_torques(
            jacp,
            jacr,
            self._mass,
            data.qvel,
            data.qpos,
            data.qfrc_bias,
            self.qvel_index,
            self.qpos_index,
            desired_pos,
            desired_ori,
            data.site_xpos[self.ref_site],
            data.site_xmat[self.ref_site].reshape(3, 3),
            self.kp,
            self.kd,
            self._initial_joint,
        )


@numba.njit(cache=True)
def osc_torques(
    jacp,
    jacr,
    mass_full,
    qvel,
    qpos,
    qfrc_bias,
    vel_idx,
    pos_idx,
    desired_pos,
    desired_ori,
    ref_pos,
    ref_ori,
    kp,
    kd,
    initial_joint,
):  # pragma: no cover - compiled
    """robosuite's OSC_POSE torques (uncoupled position/orientation, gravity compensation,
    nullspace posture toward the initial joints), compiled: the fixed base has zero velocity.

    jacp, jacr: [3, nv] site Jacobians; mass_full: [nv, nv]; returns [n] arm joint torques.
    """
    n = len(vel_idx)
    j_full = np.empty((6, n))
    mass = np.empty((n, n))
    for a in range(n):
        j_full[0:3, a] = jacp[:, vel_idx[a]]
        j_full[3:6, a] = jacr[:, vel_idx[a]]
        for b in range(n):
            mass[a, b] = mass_full[vel_idx[a], vel_idx[b]]
    ref_vel = jacp @ qvel
    ref_rot_vel = jacr @ qvel
    err = np.zeros(3)  # robosuite's orientation_error: half the sum of column cross products
    for c in range(3):
        err += 0.5 * np.cross(ref_ori[:, c], desired_ori[:, c])
    force = (desired_pos - ref_pos) * kp[0:3] - ref_vel * kd[0:3]
    torque = err * kp[3:6] - ref_rot_vel * kd[3:6]
    mass_inv = np.linalg.inv(mass)
    lambda_full_inv = j_full @ mass_inv @ j_full.T
    lambda_full = np.linalg.inv(lambda_full_inv)
    wrench = np.empty(6)
    wrench[0:3] = np.linalg.solve(lambda_full_inv[0:3, 0:3], force)
    wrench[3:6] = np.linalg.solve(lambda_full_inv[3:6, 3:6], torque)
    nullspace = np.eye(n) - mass_inv @ j_full.T @ lambda_full @ j_full
    joint_pos = np.empty(n)
    joint_vel = np.empty(n)
    bias = np.empty(n)
    for a in range(n):
        joint_pos[a] = qpos[pos_idx[a]]
        joint_vel[a] = qvel[vel_idx[a]]
        bias[a] = qfrc_bias[vel_idx[a]]
    null_kp = 10.0  # robosuite's nullspace posture gains
    posture = mass @ (null_kp * (initial_joint - joint_pos) - 2.0 * np.sqrt(null_kp) * joint_vel)
    return j_full.T @ wrench + bias + nullspace.T @ posture


def _check_arm(arm) -> None:
    checks = {
        "an OSC arm controller": isinstance(arm, OperationalSpaceController),
        "fixed impedance": arm.impedance_mode == "fixed",
        "delta input": arm.input_type == "delta",
        "base reference frame": arm.input_ref_frame == "base",
        "no interpolation": arm.interpolator_pos is None and arm.interpolator_ori is None,
        "uncoupled position and orientation": bool(arm.uncoupling),
        "orientation control": bool(arm.use_ori),
        "no position limits": arm.position_limits is None,
        "goals from the achieved pose": arm._goal_update_mode == "achieved",
        "one reference site": getattr(arm, "num_ref_sites", 1) == 1,
    }
    missing = [what for what, ok in checks.items() if not ok]
    if missing:
        raise Unsupported("needs " + ", ".join(missing))


WARM_UP = np.array([[0.5, -0.5, 0.5, 0.3, -0.3, 0.3, 1.0], [-0.5, 0.5, -0.2, -0.3, 0.3, 0.0, -1.0]])
CHECK_STEPS = 6  # control steps compared with env.step when a Scene adopts a FastStepper
# State difference allowed after them. Measured from a fresh reset: 1e-6 on the Jaco hand
# (robosuite's first step after a reset uses cached dynamics), 1e-1 on IIWA (its arm torques
# differ) and on the Robotiq 85 hands (UR5e, Kinova3: their finger linkage, held together by
# contacts alone in robosuite 1.5's model, turns round-off into centimetres when it reverses).
CHECK_TOLERANCE = 1e-4


def check_against_env_step(env, stepper: FastStepper) -> None:
    """Raise Unsupported unless CHECK_STEPS steps of `stepper` land where env.step's do.

    The checks in `__init__` cover the configurations robosuite documents; a robot model can
    still add something robosuite's loop does and this one does not (measured: IIWA's arm
    torques differ), or amplify round-off (the Robotiq 85). A few steps from the state now,
    the hand closing then opening, both ways, settle it for the robot at hand; the env is left
    exactly as it was.
    """
    data = stepper.data
    original = _saved(env, stepper)
    for action in WARM_UP:  # robosuite's first steps after a reset differ (cached dynamics)
        env.step(action)
    saved = _saved(env, stepper)

    def restore():
        _restore(env, stepper, saved)

    # Full-range arm moves (fixed draws): small ones leave UR5e's difference unseen (measured).
    actions = np.random.default_rng(0).uniform(-1.0, 1.0, (CHECK_STEPS, 7))
    actions[:, -1] = 1.0
    actions[CHECK_STEPS // 2 :, -1] = -1.0  # the hand closes, then opens
    reference = []
    for action in actions:
        env.step(action)
        reference.append(np.concatenate([data.qpos, data.qvel]))
    restore()
    worst = 0.0
    for action, expected in zip(actions, reference, strict=True):
        stepper.step(action)
        worst = max(worst, float(np.abs(np.concatenate([data.qpos, data.qvel]) - expected).max()))
    restore()
    _restore(env, stepper, original)
    if worst > CHECK_TOLERANCE:
        raise Unsupported(
            f"its steps differ from robosuite's env.step on this robot by {worst:.1e} "
            f"after {CHECK_STEPS} steps"
        )


def _saved(env, stepper: FastStepper) -> tuple:
    data = stepper.data
    return (
        data.time,
        data.qpos.copy(),
        data.qvel.copy(),
        data.act.copy(),
        data.ctrl.copy(),
        data.qacc_warmstart.copy(),
        np.array(stepper.gripper_model.current_action, copy=True),
        env.timestep,
        env.cur_time,
    )


def _restore(env, stepper: FastStepper, saved: tuple) -> None:
    data = stepper.data
    data.time, data.qpos[:], data.qvel[:], data.act[:], data.ctrl[:] = saved[:5]
    data.qacc_warmstart[:] = saved[5]
    stepper.gripper_model.current_action = saved[6].copy()
    env.timestep, env.cur_time = saved[7], saved[8]
    mujoco.mj_forward(stepper.model, data)
