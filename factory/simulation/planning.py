"""Planned free-space motion between skill windows (`generation.transit: plan`).

    goal pose (the next skill window's first target, re-targeted)
    ──► IK: arm joints that put the grip site there (damped least squares, from the current q)
    ──► the straight joint-space line, if collision-free; else OMPL's RRTConnect, simplified
    ──► grip-site poses along the joint path (forward kinematics), timed by ruckig
        (velocity, acceleration and jerk limited, in control steps)
    ──► poses the arm controller tracks, as it tracks a replayed segment

Collisions are checked in the live scene: a private MjData holding the current state, the
arm's joints set to the candidate, an object in the hand moved with it (attached at its grasp
now), then `mj_kinematics` + `mj_collision`. A contact between the robot or the held object and
anything else, deeper than PENETRATION, is a collision; the hand against what it holds, and
the robot against itself, are not. A start already in contact (fingers just off a released
object) first retreats straight up until free.

Why our own IK: `mink` solves a QP over every degree of freedom of the model (the objects' free
joints too, 33 on PickPlace where the arm has 7); the goal needs only the arm's columns of
`mj_jacSite`, and the planner checks the goal it gets (pose error and collisions) anyway.
"""

from __future__ import annotations

import math

import mujoco
import numpy as np
from demofactory.generators.poses import axis_angle_to_mat, mat_to_axis_angle

PENETRATION = 1e-3  # metres: resting contact is not a collision, deeper than this is
# Metres kept between the moving robot (and what it holds) and the rest: the arm controller
# tracks the planned poses a few centimetres behind, cutting corners. Tried in turn: a goal or
# start closer than the first to something is planned with the next.
CLEARANCES = (0.02, 0.0)
IK_TOLERANCE = (2e-3, 2e-2)  # metres, radians: a goal farther off than this is unreachable
RETREAT = (0.02, 0.04, 0.06, 0.08)  # metres straight up, tried in turn when the start touches
GOAL_RISE = (0.0, 0.01, 0.02, 0.03, 0.04, 0.05, 0.06)  # metres, tried in turn (_free_goal)
RESOLUTION = 0.02  # radians: the joint-space step at which a path is checked
ANGLE_WEIGHT = 0.05  # metres per radian: how far a turn of the hand counts, for timing


class TransitPlanner:
    """Plans for one robot arm of a `demofactory.simulation.scene.Scene` (built once per scene)."""

    def __init__(self, model: mujoco.MjModel, arm_qpos, arm_dofs, site: int, robot_geoms, hand):
        self.model = model
        self.data = mujoco.MjData(model)
        self.qpos_adr = np.asarray(arm_qpos, dtype=int)
        self.dofs = np.asarray(arm_dofs, dtype=int)
        joints = [int(np.flatnonzero(model.jnt_qposadr == a)[0]) for a in self.qpos_adr]
        limited = model.jnt_limited[joints].astype(bool)
        ranges = model.jnt_range[joints].copy()
        ranges[~limited] = (-math.pi, math.pi)
        self.low, self.high = ranges[:, 0], ranges[:, 1]
        self.site = site
        self.robot_geoms = np.zeros(model.ngeom, dtype=bool)
        self.robot_geoms[list(robot_geoms)] = True
        self.hand_geoms = np.zeros(model.ngeom, dtype=bool)
        self.hand_geoms[list(hand)] = True
        self._held: tuple[int, np.ndarray] | None = None  # (qpos address, site -> body pose)
        self._held_geoms = np.zeros(model.ngeom, dtype=bool)
        self.checks = 0  # collision checks so far (the planner's budget counts them)
        self.clearance = 0.0
        self.home: np.ndarray | None = None  # a second IK start (the arm's rest pose)

    # --- the scene as it is now -------------------------------------------------------------
    def load(self, data: mujoco.MjData, held_body: int | None) -> np.ndarray:
        """Copy the live state; attach `held_body` (free joint) to the hand. Returns q now."""
        self.data.qpos[:] = data.qpos
        self.data.qvel[:] = 0.0
        self._held = None
        self._held_geoms[:] = False
        mujoco.mj_kinematics(self.model, self.data)
        if held_body is not None:
            joint = self.model.body_jntadr[held_body]
            if joint >= 0 and self.model.jnt_type[joint] == mujoco.mjtJoint.mjJNT_FREE:
                rel = np.linalg.inv(self._site_pose()) @ _body_pose(self.data, held_body)
                self._held = (int(self.model.jnt_qposadr[joint]), rel)
                self._held_geoms[self.model.geom_bodyid == held_body] = True
        return self.data.qpos[self.qpos_adr].copy()

    def _site_pose(self) -> np.ndarray:
        pose = np.eye(4)
        pose[:3, :3] = self.data.site_xmat[self.site].reshape(3, 3)
        pose[:3, 3] = self.data.site_xpos[self.site]
        return pose

    def _pose_at(self, q: np.ndarray) -> np.ndarray:
        """Grip-site pose with the arm at `q` (the held object moved with it)."""
        self.data.qpos[self.qpos_adr] = q
        mujoco.mj_kinematics(self.model, self.data)
        site = self._site_pose()
        if self._held is not None:
            adr, rel = self._held
            body = site @ rel
            self.data.qpos[adr : adr + 3] = body[:3, 3]
            quat = np.empty(4)
            mujoco.mju_mat2Quat(quat, body[:3, :3].flatten())
            self.data.qpos[adr + 3 : adr + 7] = quat
            mujoco.mj_kinematics(self.model, self.data)
        return site

    def free(self, q: np.ndarray) -> bool:
        """Whether the arm at `q` (and what it holds) touches nothing it should not."""
        self.checks += 1
        self._pose_at(q)
        mujoco.mj_collision(self.model, self.data)
        n = self.data.ncon
        if n == 0:
            return True
        contact = self.data.contact
        deep = contact.dist[:n] < (self.clearance if self.clearance > 0 else -PENETRATION)
        g1, g2 = contact.geom1[:n], contact.geom2[:n]
        moving1 = self.robot_geoms[g1] | self._held_geoms[g1]
        moving2 = self.robot_geoms[g2] | self._held_geoms[g2]
        robot_pair = self.robot_geoms[g1] & self.robot_geoms[g2]
        grip_pair = (self.hand_geoms[g1] & self._held_geoms[g2]) | (
            self._held_geoms[g1] & self.hand_geoms[g2]
        )
        bad = deep & (moving1 | moving2) & ~robot_pair & ~grip_pair
        return not bool(bad.any())

    # --- inverse kinematics -------------------------------------------------------------------
    def ik(self, goal: np.ndarray, q0: np.ndarray) -> np.ndarray | None:
        """Arm joints putting the grip site at `goal` [4, 4], from `q0`, else from the arm's rest
        pose or the middle of its range (damped least squares stalls at a joint limit); None
        when no start reaches it."""
        middle = (self.low + self.high) / 2
        for start in (q0, self.home, middle):
            if start is not None:
                q = self._ik_from(goal, np.asarray(start, dtype=np.float64))
                if q is not None:
                    return q
        return None

    def _ik_from(self, goal: np.ndarray, q0: np.ndarray, iterations: int = 150):
        q = q0.copy()
        jac_pos, jac_rot = np.zeros((3, self.model.nv)), np.zeros((3, self.model.nv))
        damping = 1e-4
        for _ in range(iterations):
            self.data.qpos[self.qpos_adr] = q
            mujoco.mj_kinematics(self.model, self.data)
            mujoco.mj_comPos(self.model, self.data)
            site = self._site_pose()
            err_pos = goal[:3, 3] - site[:3, 3]
            err_rot = _rotation_error(goal[:3, :3], site[:3, :3])
            if np.linalg.norm(err_pos) < IK_TOLERANCE[0] / 4 and np.linalg.norm(err_rot) < (
                IK_TOLERANCE[1] / 4
            ):
                break
            mujoco.mj_jacSite(self.model, self.data, jac_pos, jac_rot, self.site)
            jac = np.vstack([jac_pos[:, self.dofs], jac_rot[:, self.dofs]])
            err = np.concatenate([err_pos, err_rot])
            step = jac.T @ np.linalg.solve(jac @ jac.T + damping * np.eye(6), err)
            scale = min(1.0, 0.2 / max(np.abs(step).max(), 1e-12))
            q = np.clip(q + scale * step, self.low, self.high)
        site = self._pose_at(q)
        off_pos = np.linalg.norm(goal[:3, 3] - site[:3, 3])
        off_rot = np.linalg.norm(_rotation_error(goal[:3, :3], site[:3, :3]))
        if off_pos > IK_TOLERANCE[0] or off_rot > IK_TOLERANCE[1]:
            return None
        return q

    # --- planning -------------------------------------------------------------------------------
    def segment_free(self, a: np.ndarray, b: np.ndarray) -> bool:
        steps = max(1, int(np.ceil(np.abs(b - a).max() / RESOLUTION)))
        return all(self.free(a + (b - a) * (i / steps)) for i in range(1, steps + 1))

    def joint_path(self, start: np.ndarray, goal: np.ndarray, checks: int, seed: int):
        """Collision-free joint waypoints [K, 7] from start to goal, or None.

        RRTConnect stops after `checks` collision checks, not after a time: with its seed set,
        the same call plans the same path on any machine and under any load.
        """
        if self.segment_free(start, goal):
            return np.stack([start, goal])
        from ompl import base as ob
        from ompl import geometric as og
        from ompl import util as ou

        ou.setLogLevel(ou.LogLevel.LOG_NONE)
        ou.RNG.setSeed(int(seed) % (2**31 - 1) + 1)
        dim = len(start)
        space = ob.RealVectorStateSpace(dim)
        bounds = ob.RealVectorBounds(dim)
        for i in range(dim):
            bounds.setLow(i, float(self.low[i]))
            bounds.setHigh(i, float(self.high[i]))
        space.setBounds(bounds)
        setup = og.SimpleSetup(space)
        setup.setStateValidityChecker(lambda s: self.free(np.array([s[i] for i in range(dim)])))
        extent = float(np.linalg.norm(self.high - self.low))
        setup.getSpaceInformation().setStateValidityCheckingResolution(RESOLUTION / extent)
        a, b = space.allocState(), space.allocState()
        for i in range(dim):
            a[i], b[i] = float(start[i]), float(goal[i])
        setup.setStartAndGoalStates(a, b)
        setup.setPlanner(og.RRTConnect(setup.getSpaceInformation()))
        budget = self.checks + checks
        stop = ob.PlannerTerminationCondition(lambda: self.checks >= budget)
        if not setup.solve(stop) or not setup.haveExactSolutionPath():
            return None
        setup.simplifySolution()
        path = setup.getSolutionPath()
        return np.array(
            [[path.getState(k)[i] for i in range(dim)] for k in range(path.getStateCount())]
        )

    def plan(
        self,
        data: mujoco.MjData,
        goal: np.ndarray,
        held_body: int | None,
        speed: float,
        checks: int,
        seed: int,
    ) -> tuple[np.ndarray | None, str]:
        """Grip-site poses [K, 4, 4] from now to `goal`, one per control step, or (None, why).

        Planned with CLEARANCES[0] around the moving geoms, else with the next (a goal close to
        what the skill works on); the model's own margins are restored after.
        """
        saved = self.model.geom_margin.copy()
        why = ""
        try:
            for clearance in CLEARANCES:
                self.clearance = clearance
                moving = self.robot_geoms | self._held_geoms_of(held_body)
                self.model.geom_margin[moving] = np.maximum(saved[moving], clearance)
                way, why = self._plan(data, goal, held_body, speed, checks, seed)
                self.model.geom_margin[:] = saved
                if way is not None:
                    return way, ""
        finally:
            self.model.geom_margin[:] = saved
            self.clearance = 0.0
        return None, why

    def _held_geoms_of(self, body: int | None) -> np.ndarray:
        mask = np.zeros(self.model.ngeom, dtype=bool)
        if body is not None:
            mask[self.model.geom_bodyid == body] = True
        return mask

    def _plan(self, data, goal, held_body, speed, checks, seed):
        q0 = self.load(data, held_body)
        prefix: list[np.ndarray] = []
        if not self.free(q0):
            here = self._pose_at(q0)
            for rise in RETREAT:
                up = here.copy()
                up[2, 3] += rise
                q_up = self.ik(up, q0)
                if q_up is not None and self.free(q_up):
                    prefix, q0 = [q0], q_up
                    break
            else:
                return None, "the start touches the scene and no retreat up is free"
        q_goal, goal = self._free_goal(goal, q0, held_body is not None)
        if q_goal is None:
            return None, goal
        path = self.joint_path(q0, q_goal, checks, seed)
        if path is None:
            return None, f"no collision-free path found in {checks} collision checks"
        if prefix:
            path = np.concatenate([np.stack(prefix), path])
        return self.timed_poses(path, speed), ""

    def _free_goal(self, goal: np.ndarray, q0: np.ndarray, holding: bool):
        """(arm joints at a collision-free goal, that goal), or (None, why).

        An object in the hand may not fit where the person held it: the 2020 PickPlace demo's
        cereal box is taller in today's model, and over the bin, where the person let go, it
        sinks into the floor. Holding something, a goal in collision rises by GOAL_RISE steps
        (the generator raises the rest of the skill window as far).
        """
        rises = GOAL_RISE if holding else (0.0,)
        reached = False
        for rise in rises:
            target = goal.copy()
            target[2, 3] += rise
            q = self.ik(target, q0)
            if q is None:
                continue
            reached = True
            if self.free(q):
                return q, target
        if not reached:
            return None, "the goal is out of the arm's reach (no IK solution)"
        return None, "the goal is in collision"

    def timed_poses(self, path: np.ndarray, speed: float) -> np.ndarray:
        """Grip-site poses along a joint path, one per control step, timed by ruckig."""
        dense = [path[0]]
        for a, b in zip(path[:-1], path[1:], strict=True):
            steps = max(1, int(np.ceil(np.abs(b - a).max() / RESOLUTION)))
            dense += [a + (b - a) * (i / steps) for i in range(1, steps + 1)]
        poses = np.stack([self._pose_at(q) for q in dense])
        gaps = [
            np.linalg.norm(b[:3, 3] - a[:3, 3])
            + ANGLE_WEIGHT * np.linalg.norm(_rotation_error(b[:3, :3], a[:3, :3]))
            for a, b in zip(poses[:-1], poses[1:], strict=True)
        ]
        along = np.concatenate([[0.0], np.cumsum(gaps)])
        stations = _ruckig_profile(float(along[-1]), speed)
        out = []
        for s in stations:
            k = min(int(np.searchsorted(along, s, side="right")) - 1, len(poses) - 2)
            span = along[k + 1] - along[k]
            out.append(_blend(poses[k], poses[k + 1], 0.0 if span <= 0 else (s - along[k]) / span))
        out[-1] = poses[-1]
        return np.stack(out)


def _ruckig_profile(length: float, speed: float) -> np.ndarray:
    """Stations along a path of `length` (path units), one per control step: start and end at
    rest, velocity at most `speed` per step, acceleration speed/4 per step, jerk speed/8."""
    if length <= 1e-9:
        return np.array([length])
    from ruckig import InputParameter, OutputParameter, Result, Ruckig

    otg = Ruckig(1, 1.0)  # one degree of freedom (the path parameter), one control step a cycle
    inp, out = InputParameter(1), OutputParameter(1)
    inp.current_position, inp.target_position = [0.0], [length]
    inp.current_velocity, inp.target_velocity = [0.0], [0.0]
    inp.max_velocity, inp.max_acceleration, inp.max_jerk = [speed], [speed / 4], [speed / 8]
    stations = []
    while True:
        result = otg.update(inp, out)
        stations.append(out.new_position[0])
        out.pass_to_input(inp)
        if result != Result.Working:
            break
    return np.array(stations)


def _blend(a: np.ndarray, b: np.ndarray, w: float) -> np.ndarray:
    """The pose a fraction `w` of the way from a to b (straight position, geodesic rotation)."""
    pose = np.eye(4)
    pose[:3, 3] = a[:3, 3] + w * (b[:3, 3] - a[:3, 3])
    pose[:3, :3] = a[:3, :3] @ axis_angle_to_mat(w * mat_to_axis_angle(a[:3, :3].T @ b[:3, :3]))
    return pose


def _rotation_error(goal: np.ndarray, now: np.ndarray) -> np.ndarray:
    """Axis-angle [3] (world frame) turning `now` onto `goal`."""
    return mat_to_axis_angle(goal @ now.T)


def _body_pose(data: mujoco.MjData, body: int) -> np.ndarray:
    pose = np.eye(4)
    pose[:3, :3] = data.xmat[body].reshape(3, 3)
    pose[:3, 3] = data.xpos[body]
    return pose
