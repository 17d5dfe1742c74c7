"""Two arms in one robosuite env: `TwoArmScene`, a `Scene` whose hand-side lookups switch arm.

robosuite 1.5's two-arm tasks (TwoArmLift, TwoArmHandover, ...) with a pair of one-arm robots
("parallel" or "opposed") hold two robots, each with one arm named "right"; the spec names them
right (robots[0]) and left (robots[1]) (`demofactory.specs.sections.TWO_ARMS`).

    action [14] = right [7: delta pos 3, delta axis-angle 3, gripper 1] + left [7]
    proprio [18] = right [9: eef pos 3, eef quat xyzw 4, gripper qpos 2] + left [9]

Everything `Scene` measures at "the hand" (eef pose, grasped, touching(hand, X), controller
limits) is measured at the arm chosen by `use_arm`; `Scene` itself keeps robot 0 in that role,
so the one-arm code path is untouched. Stepping takes
`demofactory.simulation.fast_step.PairStepper` (both robots' OSC and grippers, adopted once a
few steps of it land where env.step's do), else robosuite's env.step (`fast_control_note` says
why).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import mujoco
import numpy as np
from demofactory.generators.poses import mat_to_quat
from demofactory.generators.predicates import Predicate
from demofactory.simulation.scene import ACTION_LAYOUT, PROPRIO_LAYOUT, Scene
from demofactory.specs.arms import arm_names
from demofactory.specs.spec import SceneSpec

ARM_ACTION = sum(n for _, n in ACTION_LAYOUT)  # 7 per arm
ARM_PROPRIO = sum(n for _, n in PROPRIO_LAYOUT)  # 9 per arm


def arm_layout(layout, arms) -> list[list]:
    """A one-arm (name, size) layout repeated per arm, names prefixed: right_eef_pos, ..."""
    return [[f"{arm}_{name}", size] for arm in arms for name, size in layout]


@dataclass(frozen=True)
class _ArmParts:
    """One arm's handles in the model (what `Scene` keeps for its single arm)."""

    controller: object  # robosuite's arm part controller (limits, frame)
    gripper: object  # robosuite's gripper model (geom groups, command state)
    eef_site: int
    gripper_qpos: np.ndarray
    hand: frozenset[int]
    pads: list[set[int]]


class TwoArmScene(Scene):
    """A `Scene` of a two-arm task (`task.two_arm`): per-arm poses, predicates and actions."""

    def __init__(self, spec: SceneSpec, env=None):
        if spec.task.two_arm is None:
            raise ValueError("TwoArmScene needs a spec with task.two_arm")
        super().__init__(spec, env)
        self.arms = arm_names(spec.task)
        self._parts = {arm: self._arm_parts(i) for i, arm in enumerate(self.arms)}
        self._closed: dict[str, bool | None] = dict.fromkeys(self.arms)
        self.current_arm = self.arms[0]

    def _arm_parts(self, index: int) -> _ArmParts:
        robot = self.env.robots[index]
        side = robot.arms[0]
        gripper = robot.gripper[side]
        root = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, gripper.root_body)
        pads = [
            {
                mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_GEOM, g)
                for g in gripper.important_geoms[group]
            }
            for group in ("left_fingerpad", "right_fingerpad")
        ]
        return _ArmParts(
            controller=robot.part_controllers[side],
            gripper=gripper,
            eef_site=int(robot.eef_site_id[side]),
            gripper_qpos=np.asarray(robot._ref_gripper_joint_pos_indexes[side]),
            hand=self._collision_geoms_under(root),
            pads=pads,
        )

    # --- which arm "the hand" is -------------------------------------------------------
    def use_arm(self, arm: str) -> None:
        """Make `arm` the hand of eef_pose, controller_limits, grasped and touching(hand, X)."""
        parts = self._parts[arm]
        self._arm, self._gripper, self._eef_site = parts.controller, parts.gripper, parts.eef_site
        self._gripper_qpos, self._hand, self._pads = parts.gripper_qpos, parts.hand, parts.pads
        self.gripper_closed = self._closed[arm]
        self.current_arm = arm

    @contextmanager
    def arm(self, arm: str):
        """`use_arm(arm)` for a block, the previous arm afterwards."""
        before = self.current_arm
        self.use_arm(arm)
        try:
            yield self
        finally:
            self.use_arm(before)

    def base_rotation_of(self, arm: str) -> np.ndarray:
        """[3, 3] world rotation of the base of the robot carrying `arm` (identity for robots
        facing +x; robosuite's `opposed` pair faces +y and -y)."""
        robot = self.env.robots[self.arms.index(arm)]
        body = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, robot.robot_model.root_body)
        return self.data.xmat[body].reshape(3, 3).copy()

    def eef_pose_of(self, arm: str) -> np.ndarray:
        with self.arm(arm):
            return self.eef_pose()

    def holds_for(self, arm: str, predicate: Predicate | str) -> bool:
        """A predicate with `arm` as the hand (grasped(pot): this arm's pads on the pot)."""
        with self.arm(arm):
            return self.holds(predicate)

    def controller_limits_of(self, arm: str):
        with self.arm(arm):
            return self.controller_limits()

    def camera_mounts(self, names) -> dict[str, dict]:
        """The cameras among `names` that a robot carries, by the model's body tree: name ->
        {"robot": index, "arm": its arm, "wrist": whether on the arm's hand (robosuite's
        robot0_eye_in_hand), not elsewhere on the robot (robot0_robotview)}. Scene cameras
        (agentview) are left out."""
        roots, hands = {}, {}
        for i, robot in enumerate(self.env.robots):
            model = robot.robot_model
            roots[self._body(model.root_body)] = i
            for side in robot.arms:
                hands[self._body(model.eef_name[side])] = i
        out = {}
        for name in names:
            cam = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_CAMERA, name)
            if cam < 0:
                continue
            chain, body = [], int(self.model.cam_bodyid[cam])
            while body > 0:  # up to the world body
                chain.append(body)
                body = int(self.model.body_parentid[body])
            robot = next((roots[b] for b in chain if b in roots), None)
            if robot is not None:
                wrist = any(hands.get(b) == robot for b in chain)
                out[name] = {"robot": robot, "arm": self.arms[robot], "wrist": wrist}
        return out

    def _body(self, name: str) -> int:
        return mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, name)

    # --- per-arm vectors ---------------------------------------------------------------
    def proprio(self) -> np.ndarray:
        """[9 * arms] float32: per arm (right first) eef position, quaternion xyzw, gripper."""
        parts = []
        for arm in self.arms:
            p = self._parts[arm]
            rot = self.data.site_xmat[p.eef_site].reshape(3, 3)
            parts += [self.data.site_xpos[p.eef_site], mat_to_quat(rot)]
            parts.append(self.data.qpos[p.gripper_qpos])
        return np.concatenate(parts).astype(np.float32)

    def step(self, action: np.ndarray) -> None:
        """One control step of both arms: [7 * arms] (right first). A [7] command goes to every
        arm (`demofactory.robots.gripper_sign`'s probe closes both hands alike)."""
        action = np.asarray(action)
        if action.shape[-1] == ARM_ACTION:
            action = np.tile(action, len(self.env.robots))
        if self._fast is not None:
            self._fast.step(action)
        else:
            self.env.step(action)
        if getattr(self, "_parts", None) is None:  # the probe, while Scene.__init__ runs
            return
        self.note_grippers(action)

    def note_grippers(self, action: np.ndarray) -> None:
        """Take each arm's gripper command in a [7 * arms] action as stepped (by `step`, or by
        robosuite's env.step under teleoperation): whether each hand is commanded closed."""
        for i, arm in enumerate(self.arms):
            self._closed[arm] = bool(action[(i + 1) * ARM_ACTION - 1] * self.gripper_sign > 0)
        self.gripper_closed = self._closed[self.current_arm]

    def reset(self, fixtures=None) -> None:
        super().reset(fixtures)
        if getattr(self, "_parts", None):
            self.rebind_arms()

    def rebind_arms(self) -> None:
        """After robosuite's env.reset (which rebuilds the arm controllers): each arm's handles
        again, no gripper command known."""
        self._parts = {arm: self._arm_parts(i) for i, arm in enumerate(self.arms)}
        self._closed = dict.fromkeys(self.arms)
        self.use_arm(self.current_arm)

    @property
    def action_dim(self) -> int:
        return ARM_ACTION * len(self.arms)
