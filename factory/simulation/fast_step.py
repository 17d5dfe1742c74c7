"""A lean control loop for robosuite's OSC_POSE arm + gripper: the same physics, less Python.

robosuite's `env.step` spends ~85 % of its time outside MuJoCo: at each of the 25
physics substeps of a control step it walks its robot, composite-controller and
part-controller objects, looks sites up by name, copies arrays and fills
observation buffers. Generation needs none of that. `FastStepper` does what those
objects do to the simulation, in the same order and with robosuite's formulas, and
nothing else:

    per control step, for each substep:
        mj_step1 ─► (first substep) goal from the action: OSC delta pose in the base frame (or
                    an absolute one: `factory export --actions abs_eef`'s replays),
                    gripper command through the gripper's speed limit
                 ─► OSC torques (+ gravity compensation, nullspace posture) ─► clip to ctrlrange
        mj_step2

The test suite checks it against `env.step` on random actions: states agree to
1e-9 after 20 control steps (the same formulas, evaluated in another order). Any
configuration it does not reproduce (another controller type, interpolation,
variable impedance, a mobile base) is refused at construction, and so is a robot on which
a few steps do not land where env.step's do (`check_against_env_step`: robosuite's own IIWA,
whose controller frame turns with its first joint, before `demofactory.robots.arm_fixes`); the Scene
then
falls back to `env.step` and `factory validate` says why.

Two robots (robosuite's two-arm tasks): `PairStepper` drives one `FastStepper` per robot in
the order env.step runs them (per substep: mj_step1, each robot's goal at the first, its
torques and gripper, mj_step2; `_pair_substeps` compiled), and is adopted the same way:
`check_against_env_step`, else env.step with the reason (tests: TwoArmLift parallel and
opposed, 1e-9; a whole generated attempt, the same actions).

The substeps after the first run in one compiled call (`_substeps`): it calls MuJoCo's C
functions (mj_step1, mj_jacSite, mj_fullM, mj_step2) through their addresses in the mujoco
package's own library, where Python would pay a binding call and a compiled call's argument
checks (~24 arrays) per substep; the states are bit-identical (tested) and a control step
costs what bare `mj_step` does (measured, Stack). The one thing the Python bindings add is
turning MuJoCo's fatal errors into exceptions; in C the only one a step can raise, the arena
running out, would end the process. So the compiled path runs only while the arena has
`ARENA_HEADROOM` times the most the model has used so far (robosuite reserves ~1.3 GB; Stack
uses 67 kB, NutAssembly 0.5 MB), and otherwise the Python loop does.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os

import mujoco
import numba
import numpy as np
from robosuite.controllers.parts.arm.osc import OperationalSpaceController
from robosuite.robots import FixedBaseRobot
from robosuite.utils import transform_utils as T


class Unsupported(Exception):
    """The env's controller configuration is not one FastStepper reproduces exactly."""


class FastStepper:
    """Steps a single-arm, fixed-base robosuite env exactly like `env.step`, minus observations
    (or one robot of several: `PairStepper`)."""

    def __init__(self, env, robot_index: int | None = None, arm_name: str | None = None):
        """`robot_index`: the robot of a multi-robot env this drives (`PairStepper` steps them
        all); None: the env's only robot. `arm_name`: which of the robot's arms (a two-armed
        robot, GR1ArmsOnly: `PairStepper` steps both); None: its first."""
        if robot_index is None and len(env.robots) != 1:
            raise Unsupported("one robot and lite_physics are required")
        if not env.lite_physics:
            raise Unsupported("one robot and lite_physics are required")
        robot = env.robots[robot_index or 0]
        if not _fixed_base(robot, env):
            raise Unsupported("only fixed-base robots are supported")
        if arm_name is None and len(robot.arms) != 1:
            raise Unsupported(f"{len(robot.arms)} arms on one robot: PairStepper steps them")
        arm_name = arm_name or robot.arms[0]
        arm = robot.part_controllers[arm_name]
        # robosuite's joint-position controller (`factory export --actions joint_pos` replays) or
        # its OSC_POSE, delta or absolute
        self.joint = _check_arm(arm)
        grip_name = robot.get_gripper_name(arm_name)
        self.model, self.data = env.sim.model._model, env.sim.data._data
        # A robot without a gripper (TwoArmPegInHole's bare wrists: robosuite's NullGripper) has
        # no gripper controller, action column or actuator: the arm's part is all there is.
        self.has_gripper = bool(robot.has_gripper[arm_name])
        self.arm, self.grip = arm, robot.part_controllers.get(grip_name)
        self.gripper_model = robot.gripper[arm_name]
        if getattr(self.grip, "interpolator", None) is not None:
            raise Unsupported("gripper interpolation is not supported")
        comp = robot.composite_controller
        parts = set()  # every arm of the robot and its gripper: nothing else (a torso, a base)
        for side in robot.arms:
            parts |= {side, robot.get_gripper_name(side)} if robot.has_gripper[side] else {side}
        if set(comp.part_controllers) != parts:
            raise Unsupported(f"unexpected controller parts {sorted(comp.part_controllers)}")
        self.arm_slice = slice(*comp._action_split_indexes[arm_name])
        self.arm_act = np.asarray(robot._ref_actuators_indexes_dict[arm_name])
        if self.has_gripper:
            self.grip_slice = slice(*comp._action_split_indexes[grip_name])
            self.grip_act = np.asarray(robot._ref_actuators_indexes_dict[grip_name])
        else:
            self.grip_slice = slice(self.arm_slice.stop, self.arm_slice.stop)
            self.grip_act = np.zeros(0, dtype=np.int64)
        self.grip_slice_cols = self.grip_slice.stop - self.grip_slice.start  # 1; 6 on GR-1
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
        # Views into MjData, taken once: its buffers live as long as the env (hard_reset off),
        # and each property access or row index costs a new array object per substep.
        data = self.data
        self._views = (
            data.qvel,
            data.qpos,
            data.qfrc_bias,
            data.site_xpos[self.ref_site],
            data.site_xmat[self.ref_site].reshape(3, 3),
        )
        self._ctrl, self._qM = data.ctrl, data.qM
        # The compiled substep loop (`_substeps`) when MuJoCo's library is found; tests turn it
        # off to compare it with the Python loop.
        self.compiled = True
        self._arm_scale = None  # the arm's action scaling, read off robosuite on first use
        # The OSC gains under robosuite's controller's names (demofactory.simulation.physics scales
        # them).
        self.kp = np.asarray(arm.kp, dtype=np.float64)
        self.kd = np.asarray(arm.kd, dtype=np.float64)
        self._initial_joint = np.asarray(arm.initial_joint, dtype=np.float64)
        # An absolute OSC_POSE input (`factory export --actions abs_eef` replays): the action is
        # the goal itself, position and rotation vector in the base frame
        self.absolute = arm.input_type == "absolute"

    def step(self, action: np.ndarray, record: list | None = None) -> None:
        """One control step: the same substeps, controls and order as robosuite's env.step.

        `record`: a list each substep's ctrl is appended to (a copy, as mj_step2 gets it; the
        Python loop then runs, bit-identical to the compiled one): what the CPU path applies,
        replayed on MuJoCo Warp by tests/simulation/test_mjwarp_reference.py."""
        model, data = self.model, self.data
        step1, step2, jac_site, full_m = (
            mujoco.mj_step1,
            mujoco.mj_step2,
            mujoco.mj_jacSite,
            mujoco.mj_fullM,
        )
        (jacp, jacr), mass, qm, ref_site = self._jac, self._mass, self._qM, self.ref_site
        step1(model, data)
        args = self._first_substep(action)
        if self.joint:
            self._joint_substeps(np.asarray(action[self.arm_slice], dtype=np.float64))
            return
        c_api = self.compiled and record is None and _c_api()
        if c_api and data.narena >= ARENA_HEADROOM * max(data.maxuse_arena, 1):
            _substeps(*c_api, model._address, data._address, self.substeps, ref_site, qm, *args)
            return
        for i in range(self.substeps):
            if i:
                step1(model, data)
            jac_site(model, data, jacp, jacr, ref_site)
            full_m(model, mass, qm)
            osc_control(*args)
            if record is not None:
                record.append(self._ctrl.copy())
            step2(model, data)

    def _first_substep(self, action: np.ndarray) -> tuple:
        """What robosuite's `set_goal` does at a control step's first substep (mj_step1 done):
        the goal, the gripper's control written into ctrl; returns `osc_control`'s arguments.

        The arm's base is fixed: its frame (robosuite reads it every substep), hence the
        world-frame goal, and the gripper's command hold for the whole control step; computed
        once, they save a third of the loop's Python time (profiled, Stack). MuJoCo never
        writes ctrl, so the gripper's control is set once too."""
        (jacp, jacr), mass = self._jac, self._mass
        qvel, qpos, bias, ref_pos, ref_ori = self._views
        world_pos, world_ori = self._world_goal(action)
        if self.has_gripper:
            self._set_grip(action)
            grip = np.minimum(np.maximum(self._grip_ctrl, self.grip_low), self.grip_high)
            self._ctrl[self.grip_act] = grip
        return (
            *(jacp, jacr, mass, qvel, qpos, bias),
            *(self.qvel_index, self.qpos_index, self.kp, self.kd, self._initial_joint),
            *(world_pos, world_ori, ref_pos, ref_ori),
            *(self._ctrl, self.arm_act, self.arm_low, self.arm_high),
        )

    def _joint_substeps(self, goal: np.ndarray) -> None:
        """robosuite's JointPositionController, absolute input, fixed impedance, torque
        compensation, at every substep: M_arm (kp (goal - q) - kd qdot) + bias, clipped to the
        actuators' range (the same numpy operations in the same order). The first substep's
        mj_step1 has run. A Python loop: replays of relabeled exports, not generation."""
        model, data = self.model, self.data
        qvel, qpos, bias = self._views[:3]
        rows = np.ix_(self.qvel_index, self.qvel_index)
        for i in range(self.substeps):
            if i:
                mujoco.mj_step1(model, data)
            mujoco.mj_fullM(model, self._mass, self._qM)
            error = goal - qpos[self.qpos_index]
            desired = np.multiply(error, self.kp) + np.multiply(-qvel[self.qvel_index], self.kd)
            torques = np.dot(self._mass[rows], desired) + bias[self.qvel_index]
            self._ctrl[self.arm_act] = np.clip(torques, self.arm_low, self.arm_high)
            mujoco.mj_step2(model, data)

    # --- goals (first substep) -----------------------------------------------------------
    def _world_goal(self, action: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """World-frame goal position and orientation of the arm, in one compiled call: the same
        formulas as robosuite's OSC `set_goal` (its 4x4 poses as 3x3 products), a tenth of the
        time numpy and robosuite's helpers took (~0.1 ms a control step, profiled)."""
        if self.absolute:
            return self._absolute_goal(np.asarray(action[self.arm_slice], dtype=np.float64))
        if self._arm_scale is None:
            self.arm.scale_action(np.zeros(6))  # robosuite computes its scale on first use
            arm = self.arm
            self._arm_scale = tuple(
                np.array(v, dtype=np.float64)
                for v in (
                    arm.input_min * np.ones(6),
                    arm.input_max * np.ones(6),
                    arm.action_input_transform * np.ones(6),
                    arm.action_scale * np.ones(6),
                    arm.action_output_transform * np.ones(6),
                )
            )
        center = self.center_site
        return arm_goal(
            np.asarray(action[self.arm_slice], dtype=np.float64),
            *self._arm_scale,
            self.data.site_xpos[center],
            self.data.site_xmat[center].reshape(3, 3),
            self._views[3],
            self._views[4],
        )

    def _absolute_goal(self, action: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """World-frame goal of an absolute OSC_POSE action: robosuite's `set_goal` (no scaling:
        the position as given, the orientation through the same scipy call) in the base frame,
        turned into the world as its `run_controller` does."""
        from scipy.spatial.transform import Rotation

        center = self.center_site
        origin_pos = self.data.site_xpos[center]
        origin_ori = self.data.site_xmat[center].reshape(3, 3)
        goal_ori = Rotation.from_rotvec(action[3:6]).as_matrix()
        return origin_pos + np.dot(origin_ori, action[0:3]), np.dot(origin_ori, goal_ori)

    def _set_grip(self, action: np.ndarray) -> None:
        """The gripper's control: robosuite's speed-limited command (`format_action`, which
        keeps the hand's state), then the controller's scaling to the actuators' range."""
        formatted = self.gripper_model.format_action(action[self.grip_slice])
        goal = self.grip.scale_action(formatted) if self.grip.use_action_scaling else formatted
        if self.grip.use_action_scaling:
            bias = 0.5 * (self.grip.actuator_max + self.grip.actuator_min)
            weight = 0.5 * (self.grip.actuator_max - self.grip.actuator_min)
            self._grip_ctrl = bias + weight * np.array(goal)
        else:
            self._grip_ctrl = np.array(goal)


class PairStepper:
    """Steps every arm of a multi-arm env (robosuite's two-arm tasks: a pair of one-arm robots;
    or one robot with two arms, GR1ArmsOnly) exactly like `env.step`, minus observations: one
    `FastStepper` per arm.

    robosuite's `env.step` runs, at each substep, mj_step1, then each robot's `control` in
    robot order (goal at the first substep, OSC torques, gripper), then mj_step2. A robot's
    control reads the state mj_step1 left and writes only its own actuators' ctrl, which
    nothing reads before mj_step2: each robot's goal and torques here come from the same state,
    so the order among robots changes nothing. The mass matrix, the same for every robot, is
    formed once per substep. Refused (Unsupported, the Scene then takes env.step): anything a
    robot's FastStepper refuses, and joint-position controllers (their loop is one robot's).
    """

    def __init__(self, env):
        arms = [(i, side) for i, robot in enumerate(env.robots) for side in robot.arms]
        if len(arms) < 2 or not env.lite_physics:
            raise Unsupported("two arms or more and lite_physics are required")
        self.parts = [FastStepper(env, i, side) for i, side in arms]
        if any(part.joint for part in self.parts):
            raise Unsupported("joint-position controllers on several arms are not supported")
        for part in self.parts[1:]:
            part._mass = self.parts[0]._mass  # one mass matrix a substep, read by every arm
        cuts = np.cumsum([0, *(robot.action_dim for robot in env.robots)])
        robot_cut = [slice(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
        # each arm's robot's columns of env.step's action (a two-armed robot's arms share them;
        # each arm reads its own part and its gripper's within: `arm_slice`, `grip_slice`)
        self.slices = [robot_cut[i] for i, _ in arms]
        self.action_dim = int(cuts[-1])
        self.model, self.data = env.sim.model._model, env.sim.data._data
        self.substeps = self.parts[0].substeps
        self.joint, self.absolute = False, False  # per robot: see `parts`
        self.compiled = True  # `_pair_substeps` for two robots; tests turn it off

    def step(self, action: np.ndarray, record: list | None = None) -> None:
        """One control step of every robot: `action` is env.step's (robot 0's part first)."""
        model, data = self.model, self.data
        if len(action) != self.action_dim:
            raise ValueError(f"expected an action of {self.action_dim}, got {len(action)}")
        mujoco.mj_step1(model, data)
        args = [
            part._first_substep(action[cut])
            for part, cut in zip(self.parts, self.slices, strict=True)
        ]
        qm = self.parts[0]._qM
        c_api = self.compiled and record is None and len(self.parts) == 2 and _c_api()
        if c_api and data.narena >= ARENA_HEADROOM * max(data.maxuse_arena, 1):
            a, b = self.parts
            _pair_substeps(
                *c_api, model._address, data._address, self.substeps, qm, a.ref_site, b.ref_site,
                args[0], args[1],
            )  # fmt: skip
            return
        mass = self.parts[0]._mass
        for i in range(self.substeps):
            if i:
                mujoco.mj_step1(model, data)
            for part in self.parts:
                mujoco.mj_jacSite(model, data, part._jac[0], part._jac[1], part.ref_site)
            mujoco.mj_fullM(model, mass, qm)
            for part_args in args:
                osc_control(*part_args)
            if record is not None:
                record.append(data.ctrl.copy())
            mujoco.mj_step2(model, data)


@numba.njit(cache=True)
def _pair_substeps(
    step1, step2, jac_site, full_m, model, data, substeps, qm, site_a, site_b, osc_a, osc_b
):  # pragma: no cover - compiled
    """`PairStepper.step`'s substeps for two robots, mj_step1 of the first already done, with
    MuJoCo's C functions called directly (as `_substeps`). osc_a, osc_b: each robot's
    `osc_control` arguments (jacp, jacr, the shared mass matrix first)."""
    for i in range(substeps):
        if i:
            step1(model, data)
        jac_site(model, data, osc_a[0].ctypes.data, osc_a[1].ctypes.data, site_a)
        jac_site(model, data, osc_b[0].ctypes.data, osc_b[1].ctypes.data, site_b)
        full_m(model, osc_a[2].ctypes.data, qm.ctypes.data)
        osc_control(*osc_a)
        osc_control(*osc_b)
        step2(model, data)


@numba.njit(cache=True)
def arm_goal(
    action, in_min, in_max, in_shift, scale, out_shift, origin_pos, origin_ori, ref_pos, ref_ori
):  # pragma: no cover - compiled
    """(world goal position [3], world goal orientation [3, 3]) of an OSC_POSE delta action [6]
    from the reference site's pose, in robosuite's base frame (the origin site): robosuite's
    `scale_action`, `axisangle2quat` and `quat2mat` (`_quat_to_mat32`), the goal set in the
    base frame and turned back into the world."""
    scaled = np.empty(6)
    for i in range(6):
        clipped = min(max(action[i], in_min[i]), in_max[i])
        scaled[i] = (clipped - in_shift[i]) * scale[i] + out_shift[i]
    rot = scaled[3:6]
    angle = np.sqrt(rot[0] * rot[0] + rot[1] * rot[1] + rot[2] * rot[2])
    quat = np.zeros(4)
    if angle == 0.0:  # robosuite: math.isclose(angle, 0.0), true only at exactly 0
        quat[3] = 1.0
    else:
        half = np.sin(angle / 2.0)
        for i in range(3):
            quat[i] = rot[i] / angle * half
        quat[3] = np.cos(angle / 2.0)
    turn = _quat_to_mat32(quat)
    to_base = np.ascontiguousarray(origin_ori.T)
    local_pos = to_base @ (ref_pos - origin_pos) + scaled[0:3]
    local_ori = turn @ (to_base @ ref_ori)
    return origin_pos + origin_ori @ local_pos, origin_ori @ local_ori


@numba.njit(cache=True)
def _quat_to_mat32(quat):  # pragma: no cover - compiled
    """robosuite's `transform_utils.quat2mat` of an (x, y, z, w) quaternion, step for step: it
    rounds the quaternion to float32 and scales it in float32, then forms the matrix in float64
    (its own compiled version does the same; its results are matched bit for bit, tested)."""
    q = np.empty(4, dtype=np.float32)
    q[0], q[1], q[2], q[3] = quat[3], quat[0], quat[1], quat[2]
    n = np.dot(q, q)
    if n < EPS:
        return np.identity(3)
    q *= np.sqrt(2.0 / n)
    q2 = np.outer(q, q)
    out = np.empty((3, 3))
    out[0, 0] = 1.0 - q2[2, 2] - q2[3, 3]
    out[0, 1] = q2[1, 2] - q2[3, 0]
    out[0, 2] = q2[1, 3] + q2[2, 0]
    out[1, 0] = q2[1, 2] + q2[3, 0]
    out[1, 1] = 1.0 - q2[1, 1] - q2[3, 3]
    out[1, 2] = q2[2, 3] - q2[1, 0]
    out[2, 0] = q2[1, 3] - q2[2, 0]
    out[2, 1] = q2[2, 3] + q2[1, 0]
    out[2, 2] = 1.0 - q2[1, 1] - q2[2, 2]
    return out


EPS = float(T.EPS)

# The compiled path needs this many times the arena the model has used so far (see the module
# docstring): a step that ran out of arena in C would end the process.
ARENA_HEADROOM = 100


@functools.cache
def _c_api() -> tuple | None:
    """(mj_step1, mj_step2, mj_jacSite, mj_fullM) as C function pointers from the library the
    mujoco package loaded, or None when it cannot be found (the Python loop is used)."""
    folder = os.path.dirname(mujoco.__file__)
    found = sorted(
        glob.glob(os.path.join(folder, "libmujoco.so*"))
        + glob.glob(os.path.join(folder, "libmujoco*.dylib"))
        + glob.glob(os.path.join(folder, "mujoco.dll"))
    )
    if not found:
        return None
    try:
        lib = ctypes.CDLL(found[0])
    except OSError:
        return None
    ptr = ctypes.c_void_p
    step = ctypes.CFUNCTYPE(None, ptr, ptr)
    jac = ctypes.CFUNCTYPE(None, ptr, ptr, ptr, ptr, ctypes.c_int)
    full = ctypes.CFUNCTYPE(None, ptr, ptr, ptr)
    return (
        step(("mj_step1", lib)),
        step(("mj_step2", lib)),
        jac(("mj_jacSite", lib)),
        full(("mj_fullM", lib)),
    )


@numba.njit(cache=True)
def _substeps(
    step1,
    step2,
    jac_site,
    full_m,
    model,
    data,
    substeps,
    site,
    qm,
    jacp,
    jacr,
    mass,
    *osc,
):  # pragma: no cover - compiled
    """The substeps of one control step, mj_step1 of the first already done: what the Python
    loop in `FastStepper.step` does, with MuJoCo's C functions called directly. model, data:
    the mjModel and mjData addresses; osc: `osc_control`'s arguments after jacp, jacr, mass."""
    for i in range(substeps):
        if i:
            step1(model, data)
        jac_site(model, data, jacp.ctypes.data, jacr.ctypes.data, site)
        full_m(model, mass.ctypes.data, qm.ctypes.data)
        osc_control(jacp, jacr, mass, *osc)
        step2(model, data)


@numba.njit(cache=True)
def osc_control(
    jacp,
    jacr,
    mass_full,
    qvel,
    qpos,
    qfrc_bias,
    vel_idx,
    pos_idx,
    kp,
    kd,
    initial_joint,
    desired_pos,
    desired_ori,
    ref_pos,
    ref_ori,
    ctrl,
    act_idx,
    low,
    high,
):  # pragma: no cover - compiled
    """`osc_torques` clipped to the actuators' ctrlrange and written into ctrl: one compiled call
    per substep (each call's argument checks cost more than the arithmetic, measured)."""
    torques = osc_torques(
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
    )
    for a in range(len(act_idx)):
        ctrl[act_idx[a]] = min(max(torques[a], low[a]), high[a])


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

    robosuite inverts the arm's mass matrix M and the operational-space matrix J M^-1 J^T and
    multiplies them out. Both are symmetric positive definite: here each is factored once
    (Cholesky) and only the products the torques need are solved for, in plain loops (a call
    costs 6 us instead of 16 with numpy's inv/solve/matmul on 7x7 matrices, measured). The
    nullspace term uses (I - M^-1 J^T L J)^T p = p - J^T L J M^-1 p (M^-1 symmetric), with
    L = (J M^-1 J^T)^-1. Same torques up to round-off (1e-15 relative; tests: env.step).
    """
    n = len(vel_idx)
    nv = len(qvel)
    jac = np.empty((6, n))
    mass = np.empty((n, n))
    low = np.empty((n, n))
    joint_vel = np.empty(n)
    for a in range(n):
        va = vel_idx[a]
        for r in range(3):
            jac[r, a] = jacp[r, va]
            jac[3 + r, a] = jacr[r, va]
        for b in range(n):
            mass[a, b] = mass_full[va, vel_idx[b]]
            low[a, b] = mass[a, b]
        joint_vel[a] = qvel[va]
    _cholesky(low, n)
    # J M^-1 J^T, one column of M^-1 J^T at a time
    lam = np.empty((6, 6))
    column = np.empty(n)
    for c in range(6):
        for a in range(n):
            column[a] = jac[c, a]
        _cholesky_solve(low, column, n)
        for r in range(6):
            acc = 0.0
            for a in range(n):
                acc += jac[r, a] * column[a]
            lam[r, c] = acc
    # the desired wrench: PD on position and on robosuite's orientation error (half the sum
    # of the column cross products), the site's velocity from all dofs as robosuite reads it
    wrench = np.empty(6)
    for r in range(3):
        vel_p, vel_r = 0.0, 0.0
        for d in range(nv):
            vel_p += jacp[r, d] * qvel[d]
            vel_r += jacr[r, d] * qvel[d]
        k, m = (r + 1) % 3, (r + 2) % 3
        err = 0.0
        for c in range(3):
            err += 0.5 * (ref_ori[k, c] * desired_ori[m, c] - ref_ori[m, c] * desired_ori[k, c])
        wrench[r] = (desired_pos[r] - ref_pos[r]) * kp[r] - vel_p * kd[r]
        wrench[3 + r] = err * kp[3 + r] - vel_r * kd[3 + r]
    # uncoupled: each 3-vector through its own 3x3 block of J M^-1 J^T
    block = np.empty((3, 3))
    part = np.empty(3)
    for b in (0, 3):
        for r in range(3):
            part[r] = wrench[b + r]
            for c in range(3):
                block[r, c] = lam[b + r, b + c]
        _cholesky(block, 3)
        _cholesky_solve(block, part, 3)
        for r in range(3):
            wrench[b + r] = part[r]
    null_kp = 10.0  # robosuite's nullspace posture gains
    damping = 2.0 * np.sqrt(null_kp)
    goal = np.empty(n)
    for a in range(n):
        goal[a] = null_kp * (initial_joint[a] - qpos[pos_idx[a]]) - damping * joint_vel[a]
    posture = np.empty(n)
    for a in range(n):
        acc = 0.0
        for b in range(n):
            acc += mass[a, b] * goal[b]
        posture[a] = acc
    moved = posture.copy()  # L J M^-1 posture
    _cholesky_solve(low, moved, n)
    through = np.empty(6)
    for r in range(6):
        acc = 0.0
        for a in range(n):
            acc += jac[r, a] * moved[a]
        through[r] = acc
    _cholesky(lam, 6)
    _cholesky_solve(lam, through, 6)
    torques = np.empty(n)
    for a in range(n):
        acc = qfrc_bias[vel_idx[a]] + posture[a]
        for r in range(6):
            acc += jac[r, a] * (wrench[r] - through[r])
        torques[a] = acc
    return torques


@numba.njit(cache=True)
def _cholesky(a, n):  # pragma: no cover - compiled
    """Factor the symmetric positive definite a[:n, :n] = L L^T in place (L in the lower
    triangle, the upper one left as it was)."""
    for i in range(n):
        for j in range(i + 1):
            acc = a[i, j]
            for k in range(j):
                acc -= a[i, k] * a[j, k]
            a[i, j] = np.sqrt(acc) if i == j else acc / a[j, j]


@numba.njit(cache=True)
def _cholesky_solve(low, x, n):  # pragma: no cover - compiled
    """x <- (L L^T)^-1 x in place, L the lower triangle of low[:n, :n]."""
    for i in range(n):
        acc = x[i]
        for k in range(i):
            acc -= low[i, k] * x[k]
        x[i] = acc / low[i, i]
    for i in range(n - 1, -1, -1):
        acc = x[i]
        for k in range(i + 1, n):
            acc -= low[k, i] * x[k]
        x[i] = acc / low[i, i]


def _fixed_base(robot, env) -> bool:
    """Whether `robot`'s base never moves: robosuite's FixedBaseRobot, or a LeggedRobot whose
    root body is welded to the world (GR1ArmsOnly, GR1FixedLowerBody: no free joint, no leg
    or base controller; the composite controller's parts are checked apart)."""
    from robosuite.robots import LeggedRobot

    if isinstance(robot, FixedBaseRobot):
        return True
    if not isinstance(robot, LeggedRobot):
        return False
    model = env.sim.model._model
    root = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, robot.robot_model.root_body)
    chain = [root]
    while chain[-1] > 0:
        chain.append(int(model.body_parentid[chain[-1]]))
    return root >= 0 and all(model.body_jntnum[b] == 0 for b in chain)


def _check_arm(arm) -> bool:
    """Raise Unsupported unless FastStepper reproduces `arm`'s controller; True for the
    joint-position one."""
    from robosuite.controllers.parts.generic.joint_pos import JointPositionController

    if isinstance(arm, JointPositionController):
        checks = {
            "fixed impedance": arm.impedance_mode == "fixed",
            "absolute input": arm.input_type == "absolute",
            "no interpolation": arm.interpolator is None,
            "torque compensation": bool(arm.use_torque_compensation),
        }
        missing = [what for what, ok in checks.items() if not ok]
        if missing:
            raise Unsupported("a joint-position controller needs " + ", ".join(missing))
        return True
    checks = {
        "an OSC arm controller": isinstance(arm, OperationalSpaceController),
        "fixed impedance": arm.impedance_mode == "fixed",
        "delta or absolute input": arm.input_type in ("delta", "absolute"),
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
    return False


WARM_UP = np.array([[0.5, -0.5, 0.5, 0.3, -0.3, 0.3, 1.0], [-0.5, 0.5, -0.2, -0.3, 0.3, 0.0, -1.0]])
CHECK_STEPS = 6  # control steps compared with env.step when a Scene adopts a FastStepper
# State difference allowed after them. Measured from a fresh reset: 1e-6 on the Jaco hand
# (robosuite's first step after a reset uses cached dynamics), 1e-1 on robosuite's own IIWA
# (its controller frame sits on link_1 and turns within a control step; 1e-13 once
# demofactory.robots.arm_fixes puts it on the fixed base); 1e+0 on robosuite 1.5's own Robotiq 85
# (UR5e,
# Kinova3: its finger linkage, held together by contacts alone, turns round-off into
# centimetres when it reverses), 1e-12 on the repaired one the factory builds
# (demofactory.robots.gripper_fixes).
CHECK_TOLERANCE = 1e-4


def check_against_env_step(env, stepper: FastStepper | PairStepper) -> None:
    """Raise Unsupported unless CHECK_STEPS steps of `stepper` land where env.step's do.

    The checks in `__init__` cover the configurations robosuite documents; a robot model can
    still add something robosuite's loop does and this one does not (measured: robosuite's own
    IIWA, whose controller frame moves within a control step), or amplify round-off (an open
    linkage). A few steps from the state now, the hand closing then opening, both ways, settle it
    for the robot at hand; the env is left exactly as it was.
    """
    data = stepper.data
    parts = _parts(stepper)
    original = _saved(env, stepper)
    columns = _columns(stepper)
    width = int(env.action_dim)

    def env_actions(per_part: list[np.ndarray]) -> np.ndarray:
        """Each arm's inputs (its arm columns, then its gripper's) at their place in env.step's
        action (a two-armed robot: right arm, left arm, right hand, left hand)."""
        out = np.zeros((len(per_part[0]), width))
        for (arm, grip), values in zip(columns, per_part, strict=True):
            out[:, arm] = values[:, : len(arm)]
            out[:, grip] = values[:, len(arm) :]
        return out

    def with_grip(rows: np.ndarray, part: FastStepper) -> np.ndarray:
        """WARM_UP's rows for `part`: the arm's columns, its one gripper value repeated per
        gripper column (a hand's six), none without a gripper."""
        hand = np.repeat(rows[:, 6:7], part.grip_slice_cols, axis=1)
        return np.concatenate([rows[:, :6], hand], axis=1)

    warm_up = env_actions([_as_input(p, with_grip(WARM_UP, p), hold=True) for p in parts])
    for action in warm_up:  # robosuite's first steps after a reset differ (cached dynamics)
        env.step(action)
    saved = _saved(env, stepper)

    def restore():
        _restore(env, stepper, saved)

    # Full-range arm moves (fixed draws): small ones leave UR5e's difference unseen (measured).
    # Each arm's columns in turn, every hand closing then opening.
    widths = [(len(p.qpos_index) if p.joint else 6) + p.grip_slice_cols for p in parts]
    draws = np.random.default_rng(0).uniform(-1.0, 1.0, (CHECK_STEPS, sum(widths)))
    ends = np.cumsum(widths)
    for p, end in zip(parts, ends, strict=True):
        if p.has_gripper:
            grip = slice(end - p.grip_slice_cols, end)
            draws[:, grip] = 1.0
            draws[CHECK_STEPS // 2 :, grip] = -1.0  # the hand closes, then opens
    actions = env_actions(
        [
            _as_input(p, draws[:, end - w : end])
            for p, w, end in zip(parts, widths, ends, strict=True)
        ]
    )
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


def _as_input(stepper: FastStepper, draws: np.ndarray, hold: bool = False) -> np.ndarray:
    """Draws in [-1, 1] (arm columns, then the gripper's, if it has one) as the arm
    controller's input, from the state now: a delta OSC takes them as they are; an absolute
    OSC a pose up to 0.15 m and 0.5 rad from the hand's, in the base frame; a joint controller
    targets up to 0.3 rad from the joints'. `hold`: the pose or joints of now (the gripper's
    column kept)."""
    if not (stepper.joint or stepper.absolute):
        return draws
    scale = 0.0 if hold else 1.0
    data, grip = stepper.data, draws[:, draws.shape[1] - stepper.grip_slice_cols :]
    if stepper.joint:
        here = np.array(data.qpos[stepper.qpos_index])
        width = len(here)
        arm = np.zeros((len(draws), width)) if hold else draws[:, :width]
        return np.concatenate([here + 0.3 * scale * arm, grip], axis=1)
    from scipy.spatial.transform import Rotation

    center = stepper.center_site
    origin_pos, origin_ori = data.site_xpos[center], data.site_xmat[center].reshape(3, 3)
    hand_pos = origin_ori.T @ (stepper._views[3] - origin_pos)
    hand = Rotation.from_matrix(origin_ori.T @ stepper._views[4])
    turns = hand * Rotation.from_rotvec(0.5 * scale * draws[:, 3:6])
    positions = hand_pos + 0.15 * scale * draws[:, 0:3]
    return np.concatenate([positions, turns.as_rotvec(), grip], axis=1)


def _parts(stepper) -> list[FastStepper]:
    """The per-arm FastSteppers of a FastStepper or a PairStepper."""
    return list(getattr(stepper, "parts", [stepper]))


def _columns(stepper) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per arm, (its arm's columns, its gripper's columns) in env.step's whole action."""
    parts = _parts(stepper)
    cuts = getattr(stepper, "slices", [slice(0, None)] * len(parts))
    return [
        (
            np.arange(p.arm_slice.start, p.arm_slice.stop) + (cut.start or 0),
            np.arange(p.grip_slice.start, p.grip_slice.stop) + (cut.start or 0),
        )
        for p, cut in zip(parts, cuts, strict=True)
    ]


def _saved(env, stepper) -> tuple:
    data = stepper.data
    return (
        data.time,
        data.qpos.copy(),
        data.qvel.copy(),
        data.act.copy(),
        data.ctrl.copy(),
        data.qacc_warmstart.copy(),
        [np.array(p.gripper_model.current_action, copy=True) for p in _parts(stepper)],
        env.timestep,
        env.cur_time,
    )


def _restore(env, stepper, saved: tuple) -> None:
    data = stepper.data
    data.time, data.qpos[:], data.qvel[:], data.act[:], data.ctrl[:] = saved[:5]
    data.qacc_warmstart[:] = saved[5]
    for part, action in zip(_parts(stepper), saved[6], strict=True):
        part.gripper_model.current_action = action.copy()
    env.timestep, env.cur_time = saved[7], saved[8]
    mujoco.mj_forward(stepper.model, data)
