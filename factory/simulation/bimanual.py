"""Two arms in one robosuite env: `TwoArmScene`, a `Scene` whose hand-side lookups switch arm.

robosuite 1.5's two-arm tasks (TwoArmLift, TwoArmPegInHole, ...) with a pair of one-arm robots
("parallel" or "opposed") hold two robots, each with one arm named "right"; the spec names them
right (robots[0]) and left (robots[1]) (`demofactory.specs.sections.TWO_ARMS`). "single-robot"
holds one robot with two arms of its own (GR1ArmsOnly), named right and left as robosuite names
them; its hands take several command columns each (GR-1's Fourier hands: 6), and robosuite's
action order (arms, then hands) is mapped from ours by `to_env_action`.

Each arm's part of the action and of the proprio follows its robot's gripper:

    with a gripper (TwoArmLift)        action [7: delta pos 3, delta axis-angle 3, gripper 1]
                                       proprio [9: eef pos 3, eef quat xyzw 4, gripper qpos 2]
    without one (TwoArmPegInHole: the  action [6: delta pos 3, delta axis-angle 3]
      peg and the hole sit on bare     proprio [7: eef pos 3, eef quat xyzw 4]
      wrists, robosuite's NullGripper)

    action = right's part + left's part; proprio the same (TwoArmLift: [14] and [18];
    TwoArmPegInHole: [12] and [14])

Everything `Scene` measures at "the hand" (eef pose, grasped, touching(hand, X), controller
limits) is measured at the arm chosen by `use_arm`; `Scene` itself keeps robot 0 in that role,
so the one-arm code path is untouched. Stepping takes
`demofactory.simulation.fast_step.PairStepper` (both arms' OSC and grippers, if any; adopted
once a few steps of it land where env.step's do), else robosuite's env.step
(`fast_control_note` says why).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import mujoco
import numpy as np
from demofactory.generators.poses import mat_to_quat
from demofactory.generators.predicates import HAND, Predicate, parse_predicate
from demofactory.simulation.scene import ACTION_LAYOUT, PROPRIO_LAYOUT, Scene, controller_limits
from demofactory.specs.arms import arm_names
from demofactory.specs.spec import SceneSpec

ARM_ACTION = sum(n for _, n in ACTION_LAYOUT)  # 7 per arm with a gripper
ARM_PROPRIO = sum(n for _, n in PROPRIO_LAYOUT)  # 9 per arm with a two-finger gripper


def arm_action_layout(gripper: int | bool) -> tuple[tuple[str, int], ...]:
    """One arm's action parts: delta pose, and the gripper command when it has a gripper:
    `gripper` its columns (True: 1; GR-1's hands: 6, one target per actuated finger DoF)."""
    width = int(gripper)
    return tuple(
        (name, width if name == "gripper" else size)
        for name, size in ACTION_LAYOUT
        if name != "gripper" or width
    )


def arm_proprio_layout(gripper_joints: int) -> tuple[tuple[str, int], ...]:
    """One arm's proprio parts: eef pose, and its gripper joints when it has any."""
    return tuple(
        (name, gripper_joints if name == "gripper_qpos" else size)
        for name, size in PROPRIO_LAYOUT
        if name != "gripper_qpos" or gripper_joints
    )


def arm_layout(layout, arms) -> list[list]:
    """A one-arm (name, size) layout repeated per arm, names prefixed: right_eef_pos, ...
    `layout`: one layout for every arm, or a mapping arm -> its own."""
    per_arm = layout if isinstance(layout, dict) else dict.fromkeys(arms, layout)
    return [[f"{arm}_{name}", size] for arm in arms for name, size in per_arm[arm]]


def env_has_grippers(env: str) -> bool:
    """Whether robosuite builds `env`'s robots with grippers: `make_env` passes no
    gripper_types, so the env's own default decides (TwoArmPegInHole's is None: bare wrists
    carrying the peg and the hole; it refuses any other)."""
    import inspect

    from robosuite.environments.base import REGISTERED_ENVS

    cls = REGISTERED_ENVS.get(env)
    param = inspect.signature(cls.__init__).parameters.get("gripper_types") if cls else None
    return param is None or param.default is not None


def two_arm_layouts(task) -> tuple[list[list], list[list]]:
    """(state layout, action layout) of a two-arm task, per arm prefixed, from the spec alone
    (`TwoArmScene.layouts` measures the same on the built env)."""
    from demofactory.robots.embodiments import gripper_dof, gripper_joints

    arms = arm_names(task)
    hands = env_has_grippers(task.env)
    joints = gripper_joints(task.robot) if hands else 0
    width = gripper_dof(task.robot) if hands else 0
    return (
        arm_layout(arm_proprio_layout(joints), arms),
        arm_layout(arm_action_layout(width), arms),
    )


def gripper_problem(spec: SceneSpec) -> tuple[str, str] | None:
    """(field, expected) for the first use of a gripper the spec's arms do not have: a subtask
    ending in grasped(X) or touching(hand, X), or a scripted `gripper: close`, on a two-arm task
    whose robots have none (TwoArmPegInHole). Needs robosuite's env class, not an env."""
    if spec.task.two_arm is None or env_has_grippers(spec.task.env):
        return None
    bare = f"{spec.task.env} builds its robots without grippers"
    for i, sub in enumerate(spec.subtasks):
        if sub.ends_when is None:
            continue
        for leaf in parse_predicate(sub.ends_when).leaves():
            if leaf.name == "grasped" or (leaf.name == "touching" and HAND in leaf.objects):
                return f"subtasks[{i}].ends_when", (
                    f"{bare}: {leaf.name}(...) needs the {sub.arm} arm's gripper (got "
                    f"{sub.ends_when!r}); expected a predicate on the objects, e.g. "
                    "near(peg, hole, 0.1), or none (the task's success)"
                )
    for arm, points in (spec.script.arms or {}).items() if spec.script else ():
        for j, point in enumerate(points):
            if point.gripper == "close":
                return f"script.arms.{arm}[{j}].gripper", (
                    f"{bare}: nothing to close; expected open (no gripper command is sent)"
                )
    return None


@dataclass(frozen=True)
class _ArmParts:
    """One arm's handles in the model (what `Scene` keeps for its single arm)."""

    controller: object  # robosuite's arm part controller (limits, frame)
    gripper: object  # robosuite's gripper model (geom groups, command state; NullGripper: none)
    has_gripper: bool  # False: a bare wrist (TwoArmPegInHole), no gripper command or joints
    hand_width: int  # the gripper's command columns: 1 (parallel), 6 (GR-1's hands), 0 (none)
    eef_site: int
    joint_qpos: np.ndarray  # the arm's joints in qpos
    gripper_qpos: np.ndarray  # [0] without a gripper
    hand: frozenset[int]
    pads: list[set[int]]
    # a multi-finger hand (more than one command column): the geoms of each finger but the
    # thumb (the thumb is pads[0]), for `grasped`'s count; empty for a two-finger gripper
    fingers: tuple[frozenset[int], ...] = ()


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
        # Each arm's columns of the action, right first (6 wide without a gripper, else 7)
        cuts = np.cumsum([0, *(self.action_width_of(arm) for arm in self.arms)])
        self.action_slices = {
            arm: slice(int(a), int(b))
            for arm, a, b in zip(self.arms, cuts[:-1], cuts[1:], strict=True)
        }

    def robot_and_side(self, index: int):
        """(robosuite robot, its arm's side) of arm `index` (right 0, left 1): robot `index`'s
        only arm for a pair of robots, or the one robot's arm of that side (single-robot)."""
        if len(self.env.robots) == 1:
            robot = self.env.robots[0]
            return robot, robot.arms[index]
        robot = self.env.robots[index]
        return robot, robot.arms[0]

    def _arm_parts(self, index: int) -> _ArmParts:
        robot, side = self.robot_and_side(index)
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
            has_gripper=bool(robot.has_gripper[side]),
            hand_width=int(gripper.dof) if robot.has_gripper[side] else 0,
            eef_site=int(robot.eef_site_id[side]),
            joint_qpos=np.asarray(robot.part_controllers[side].qpos_index, dtype=np.int64),
            gripper_qpos=np.asarray(
                robot._ref_gripper_joint_pos_indexes[side] or [], dtype=np.int64
            ),
            hand=self._collision_geoms_under(root),
            pads=pads,
            fingers=self._finger_groups(root, pads[1]) if gripper.dof > 1 else (),
        )

    def _finger_groups(self, root: int, geoms: set[int]) -> tuple[frozenset[int], ...]:
        """`geoms` (a hand's finger geoms, every finger but the thumb) grouped by finger: by
        the child of the palm (the bodies' lowest common ancestor) each geom's chain starts at."""
        parent = self.model.body_parentid

        def chain(body: int) -> list[int]:
            out = [body]
            while out[-1] != root and out[-1] > 0:
                out.append(int(parent[out[-1]]))
            return out[::-1]  # from the hand's root down

        chains = [chain(int(self.model.geom_bodyid[g])) for g in geoms]
        depth = 0  # the chains' common prefix ends at the palm
        while all(len(c) > depth + 1 for c in chains) and len({c[depth] for c in chains}) == 1:
            depth += 1
        groups: dict[int, set[int]] = {}
        for g, c in zip(geoms, chains, strict=True):
            groups.setdefault(c[min(depth, len(c) - 1)], set()).add(g)
        return tuple(frozenset(v) for _, v in sorted(groups.items()))

    # --- which arm "the hand" is -------------------------------------------------------
    def use_arm(self, arm: str) -> None:
        """Make `arm` the hand of eef_pose, controller_limits, grasped and touching(hand, X)."""
        parts = self._parts[arm]
        self._arm, self._gripper, self._eef_site = parts.controller, parts.gripper, parts.eef_site
        self._gripper_qpos, self._hand, self._pads = parts.gripper_qpos, parts.hand, parts.pads
        self._hand_fingers = parts.fingers
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
        robot, _ = self.robot_and_side(self.arms.index(arm))
        return self.data.xmat[self._body(robot.robot_model.root_body)].reshape(3, 3).copy()

    def eef_pose_of(self, arm: str) -> np.ndarray:
        """[4, 4] `arm`'s grip-site pose (`eef_pose` with `arm` as the hand, read directly:
        the generator asks twice a control step)."""
        site = self._parts[arm].eef_site
        # make_pose's values without its shape checks (MuJoCo's arrays have the shapes): a
        # tenth of GR-1's per-step Python went to them
        pose = np.zeros((4, 4))
        pose[:3, :3] = self.data.site_xmat[site].reshape(3, 3)
        pose[:3, 3] = self.data.site_xpos[site]
        pose[3, 3] = 1.0
        return pose

    def holds_for(self, arm: str, predicate: Predicate | str) -> bool:
        """A predicate with `arm` as the hand (grasped(pot): this arm's pads on the pot)."""
        with self.arm(arm):
            return self.holds(predicate)

    def controller_limits_of(self, arm: str):
        """`controller_limits` of `arm`'s controller."""
        return controller_limits(self._parts[arm].controller)

    def has_gripper_of(self, arm: str) -> bool:
        """Whether `arm` has a gripper (its action ends in a gripper command)."""
        return self._parts[arm].has_gripper

    def action_width_of(self, arm: str) -> int:
        """`arm`'s action columns: 6 for the arm, then its gripper's (1 for a parallel gripper,
        6 for GR-1's hands, none for a bare wrist)."""
        return sum(n for _, n in arm_action_layout(self.hand_width_of(arm)))

    def hand_width_of(self, arm: str) -> int:
        """`arm`'s gripper command columns (0 without a gripper)."""
        return self._parts[arm].hand_width

    def grip_columns(self, arm: str) -> slice:
        """`arm`'s gripper command columns in the whole action (empty without a gripper)."""
        part = self.action_slices[arm]
        return slice(part.stop - self.hand_width_of(arm), part.stop)

    def layouts(self) -> tuple[list[list], list[list]]:
        """(proprio layout, action layout), per arm prefixed (right_eef_pos, ...), measured on
        the env's robots (`two_arm_layouts` gives the same from the spec alone)."""
        proprio = {arm: arm_proprio_layout(len(p.gripper_qpos)) for arm, p in self._parts.items()}
        action = {arm: arm_action_layout(p.hand_width) for arm, p in self._parts.items()}
        return arm_layout(proprio, self.arms), arm_layout(action, self.arms)

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
                hands[self._body(model.eef_name[side])] = (i, side)
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
                hand = next((hands[b] for b in chain if b in hands), None)
                wrist = hand is not None and hand[0] == robot
                # a pair: robot i carries arm i; one two-armed robot: the hand's side says
                arm = hand[1] if wrist and len(self.env.robots) == 1 else self.arms[robot]
                out[name] = {"robot": robot, "arm": arm, "wrist": wrist}
        return out

    def _body(self, name: str) -> int:
        return mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, name)

    # --- per-arm vectors ---------------------------------------------------------------
    def proprio(self) -> np.ndarray:
        """float32, per arm (right first): eef position, quaternion xyzw, gripper joints (none
        without a gripper): [9 * arms] on Panda pairs with grippers, [7 * arms] without."""
        parts = []
        for arm in self.arms:
            p = self._parts[arm]
            rot = self.data.site_xmat[p.eef_site].reshape(3, 3)
            parts += [self.data.site_xpos[p.eef_site], mat_to_quat(rot)]
            parts.append(self.data.qpos[p.gripper_qpos])
        return np.concatenate(parts).astype(np.float32)

    def step(self, action: np.ndarray) -> None:
        """One control step of both arms: `action_dim` columns, each arm's `action_slices`
        (right first). A [7] command goes to every arm (`demofactory.robots.gripper_sign`'s
        probe closes both hands alike; it runs only on robots with grippers)."""
        action = np.asarray(action)
        parts = getattr(self, "_parts", None)
        if action.shape[-1] == ARM_ACTION:  # the probe: the same command to every arm and hand
            arms = arm_names(self.spec.task)
            if parts is None:  # while Scene.__init__ runs: robosuite's widths, per arm
                parts = {arm: self._arm_parts(i) for i, arm in enumerate(arms)}
            action = np.concatenate(
                [np.append(action[:6], np.repeat(action[6], parts[a].hand_width)) for a in arms]
            )
        env_action = self.to_env_action(action)
        if self._fast is not None:
            self._fast.step(env_action)
        else:
            self.env.step(env_action)
        if getattr(self, "_parts", None) is None:  # the probe, while Scene.__init__ runs
            return
        self.note_grippers(action)

    def from_env_action(self, env_action: np.ndarray) -> np.ndarray:
        """`to_env_action`'s inverse: robosuite's action (teleoperation's) in our order."""
        if len(self.env.robots) > 1:
            return np.asarray(env_action)
        # mapping[j]: our column at robosuite's position j (-1: a part we hold, a torso)
        ours = np.arange(1, self.action_dim + 1, dtype=np.float64)
        mapping = self.to_env_action(ours).astype(int) - 1
        used = mapping >= 0
        out = np.zeros(self.action_dim, dtype=np.asarray(env_action).dtype)
        out[mapping[used]] = np.asarray(env_action)[used]
        return out

    def to_env_action(self, action: np.ndarray) -> np.ndarray:
        """Our action (per arm: arm columns, then its gripper's; right first) in robosuite's
        order: a pair of robots takes the same (robot 0's, then robot 1's); one two-armed
        robot takes its composite controller's order (GR1ArmsOnly: right arm, left arm, right
        hand, left hand), any other part of it (a torso, a head) held with zeros."""
        if len(self.env.robots) > 1:
            return action
        width, columns = self._env_columns()
        out = np.zeros(width, dtype=np.asarray(action).dtype)
        out[columns] = action[: len(columns)]
        return out

    def _env_columns(self) -> tuple[int, np.ndarray]:
        """(robosuite's action width, the robosuite column of each of ours) of a two-armed
        robot, read off its composite controller once (robosuite's `action_dim` recomputes
        its limits at every call: 19 us, a tenth of GR-1's per-step Python)."""
        robot = self.env.robots[0]
        split = robot.composite_controller._action_split_indexes
        cached = getattr(self, "_env_cols", None)
        if cached is not None and cached[0] is split:
            return cached[1], cached[2]
        columns = []
        for i, _ in enumerate(arm_names(self.spec.task)):
            _, side = self.robot_and_side(i)
            for part in (side, f"{side}_gripper"):
                if part in split:
                    columns.extend(range(*split[part]))
        width = max(b for _, b in split.values())
        self._env_cols = (split, width, np.asarray(columns, dtype=np.int64))
        return width, self._env_cols[2]

    def note_grippers(self, action: np.ndarray) -> None:
        """Take each arm's gripper command in an action as stepped (by `step`, or by robosuite's
        env.step under teleoperation): whether each hand is commanded closed (a bare wrist has
        no command)."""
        for arm in self.arms:
            if self._parts[arm].has_gripper:
                cols = self.grip_columns(arm)  # a hand: its fingers' mean (the sum's sign)
                grip = float(np.add.reduce(action[cols])) / (cols.stop - cols.start)
                self._closed[arm] = bool(grip * self.gripper_sign > 0)
        self.gripper_closed = self._closed[self.current_arm]

    def joint_offsets(self, amount: float, rng: np.random.Generator) -> dict[str, list[float]]:
        """Per arm (right first), a uniform draw in [-amount, amount] radians per arm joint:
        robosuite's initialization noise (type uniform), drawn from `rng`."""
        return {
            arm: [float(v) for v in rng.uniform(-amount, amount, len(self._parts[arm].joint_qpos))]
            for arm in self.arms
        }

    def offset_joints(self, offsets: dict[str, list[float]]) -> None:
        """Move each arm's joints by `offsets` (`joint_offsets`) from where they are, at rest;
        the new pose is the episode's start (`mark_start`). After `reset_to`."""
        for arm, delta in offsets.items():
            self.data.qpos[self._parts[arm].joint_qpos] += np.asarray(delta, dtype=np.float64)
        self.data.qvel[:] = 0.0
        mujoco.mj_forward(self.model, self.data)
        self.mark_start()

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
        return sum(self.action_width_of(arm) for arm in self.arms)
