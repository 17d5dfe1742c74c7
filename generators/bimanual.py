"""Two-arm generation (DexMimicGen's per-arm subtasks, written from the paper, Jiang et al. 2025).

One attempt:
    a placement (and, with placement.joint_noise, each arm joint's offset) drawn from the
    attempt's seed ──► reset to the first demo's start, placed, the joints offset
    ──► one source demo for the episode (random, by the seed)
    ──► both arms step together, one action a control step (each arm's part: 7 columns, 6
        for an arm without a gripper, `scene.action_slices`); per arm its own queue
        of subtasks (spec order), each segment waiting on its start condition:
          parallel     the arm's previous subtask has ended (no wait)
          sequential   the subtask it names (`after`, the other arm's) has ended; meanwhile
                       the arm holds its last target and gripper command (a handover's receiver)
          coordinated  every arm has reached its coordinated subtask of the same rank; then one
                       transform T = T_obj_now · inv(T_obj_src) of the first one's object is
                       taken once, and every arm of the group replays its source segment under
                       it: same start, same length, in lockstep (carrying a pot)
        a segment: targets T · T_eef_src[start:end] of its arm, bridged from the arm's pose by
        interpolation (+ fixed steps), delta OSC actions + Gaussian noise, the source's gripper
        commands replayed (an arm with a gripper)
    ──► each segment's end predicate checked for its arm when it ends (no retries: recorded)
then kept only if the task's success holds over the final `success_hold_steps` steps.

Physics only; every random draw from the attempt's seed. The scene is any object with the
`TwoArmScene` methods used here (`demofactory.simulation.bimanual`, robosuite); the parameters
are `BimanualParams` (`demofactory.specs.adapters.bimanual_params` maps a spec onto them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from demofactory.generators.mimicgen import AttemptPlan, sample_placement
from demofactory.generators.params import BimanualParams
from demofactory.generators.poses import (
    checked_delta_action,
    interpolate_poses,
    noisy_clip,
    pose_to_delta_action,
    transform_segment,
)
from demofactory.generators.predicates import parse_predicate
from demofactory.generators.records import Attempt, BimanualDemo


@dataclass
class _Segment:
    """What one arm executes next: poses [K, 4, 4] and gripper commands [K, columns] (a
    parallel gripper's 1, a hand's joint targets, none on a bare wrist), the first `bridge`
    of them the bridge from where the arm was."""

    index: int  # spec subtask index
    poses: np.ndarray
    grips: np.ndarray
    bridge: int
    step: int = 0

    @property
    def done(self) -> bool:
        return self.step >= len(self.poses)


class _Arm:
    """One arm's progress through its queue of subtasks."""

    def __init__(self, name: str, queue: list[int]):
        self.name, self.queue = name, queue
        self.position = 0  # into queue
        self.segment: _Segment | None = None
        self.hold: np.ndarray | None = None  # the last target (None: where the arm is)
        self.grip: np.ndarray | None = None  # the last gripper command (None: open)

    @property
    def finished(self) -> bool:
        return self.position >= len(self.queue) and self.segment is None

    @property
    def next_index(self) -> int | None:
        return self.queue[self.position] if self.position < len(self.queue) else None


def generate_bimanual_attempt(
    scene, demos: Sequence[BimanualDemo], plan: AttemptPlan, params: BimanualParams
) -> Attempt:
    """Run one two-arm attempt in `scene`; a simulator error is a failed attempt, not a crash."""
    rng = np.random.default_rng(plan.seed)
    start_xy = {name: poses[0][:2, 3] for name, poses in demos[0].object_poses.items()}
    placement = sample_placement(params.placement, start_xy, rng)
    noise = params.placement.joint_noise  # drawn only when asked: other specs' draws stay put
    joints = scene.joint_offsets(noise, rng) if noise else None
    source = demos[int(rng.integers(len(demos)))]
    provenance: dict = {
        "placement": placement.to_json(),
        "sources": [source.demo.label],
        "order": [],
        "reached": [],
        "subtask_starts": [],
        "arms": list(params.arms),
    }
    if joints is not None:
        provenance["joint_offsets"] = joints  # arm -> radians per arm joint, from the start
    rollout = _TwoArmRollout(scene, source, params, rng, provenance)
    reason = ""
    try:
        scene.reset_to(demos[0].start_state, placement, fixtures=demos[0].fixture_poses)
        if joints is not None:
            scene.offset_joints(joints)
        reason = rollout.run()
    except Exception as err:  # MuJoCo instabilities and controller errors end this attempt only
        reason = f"simulator error: {type(err).__name__}: {err}"
    hold = params.generation.success_hold_steps
    success = reason == "" and len(rollout.success) >= hold and all(rollout.success[-hold:])
    if reason == "" and not success:
        reason = "task not done at the end"
    failed = None if success else rollout.failed_subtask(reason)
    return Attempt(
        attempt_id=plan.attempt_id,
        shard=plan.shard,
        seed=plan.seed,
        success=success,
        reason=reason,
        states=_stack(rollout.states, (0, scene.state_size), np.float64),
        actions=_stack(rollout.actions, (0, scene.action_dim), np.float32),
        proprio=_stack(rollout.proprio, (0, len(scene.proprio())), np.float32),
        subtasks_done=len(rollout.completed),
        provenance=provenance,
        failed_subtask=failed,
        retries=(0,) * len(params.subtasks),
        reached=tuple(provenance["reached"]),
        completed=tuple(rollout.completed),
    )


def _stack(rows: list, empty: tuple[int, int], dtype) -> np.ndarray:
    return np.stack(rows).astype(dtype) if rows else np.zeros(empty, dtype)


class _TwoArmRollout:
    """The lockstep loop of one attempt: per control step, each arm's next action."""

    def __init__(self, scene, source: BimanualDemo, params: BimanualParams, rng, provenance):
        self.scene, self.source, self.params, self.rng = scene, source, params, rng
        self.gen = params.generation
        self.provenance = provenance
        self.arms = [
            _Arm(arm, [i for i, s in enumerate(params.subtasks) if s.arm == arm])
            for arm in params.arms
        ]
        self.checked: set[str] = set()  # arms whose controller limits have been checked
        scale = self.gen.action_noise  # checked once (add_action_noise's check), drawn per step
        if not np.isfinite(scale) or scale < 0:
            raise ValueError(f"scale must be finite and >= 0 (e.g. 0.05), got {scale!r}")
        self.ended: set[int] = set()  # spec indices whose segment has been executed
        self.completed: list[int] = []  # of those, the ones whose end predicate held
        self.missed: list[int] = []  # the others
        self.states, self.proprio, self.actions, self.success = [], [], [], []

    def failed_subtask(self, reason: str) -> int | None:
        if self.missed:
            return self.missed[0]
        started = self.provenance["reached"]
        return started[-1] if started else None

    def run(self) -> str:
        while not all(arm.finished for arm in self.arms):
            for arm in self.arms:
                if arm.segment is None and arm.next_index is not None:
                    self._try_start(arm)
            if len(self.actions) >= self.params.horizon:
                return f"horizon: task.horizon ({self.params.horizon}) steps without finishing"
            self._step()
        return ""

    # --- starting segments ---------------------------------------------------------------
    def _try_start(self, arm: _Arm) -> None:
        sub = self.params.subtasks[arm.next_index]
        if sub.coordination == "sequential" and sub.after not in self.ended:
            return  # hold still until the other arm's subtask has ended
        if sub.coordination == "coordinated":
            group = self._group(arm)
            if group is None:
                return  # the other arm has not reached its coordinated subtask yet
            self._start_group(group)
            return
        start, end = self._window(arm.next_index)
        transform = self._transform(sub.object, self._reference_step(sub, start))
        self._start(arm, transform, start, end)

    def _reference_step(self, sub, start: int) -> int:
        """The source step whose object pose a segment is re-targeted from: its start, or, for a
        segment that ends by grasping its own object, the grasp (as the one-arm generator's
        `reference_step`): a hammer still moving in the other hand when the segment starts must
        be taken where the source took it, not where it was on the way."""
        if sub.ends_when is not None:
            predicate = parse_predicate(sub.ends_when)
            if predicate.name == "grasped" and predicate.objects == (sub.object,):
                index = self.params.subtasks.index(sub)
                return max(start, self.source.segments[index][1] - 1)
        return start

    def _group(self, arm: _Arm) -> list[_Arm] | None:
        """The arms whose coordinated subtask of this rank is next, if every arm has reached it."""
        rank = self._coordinated_rank(arm, arm.next_index)
        group = []
        for other in self.arms:
            index = other.next_index
            if other.segment is not None or index is None:
                return None
            sub = self.params.subtasks[index]
            if sub.coordination != "coordinated" or self._coordinated_rank(other, index) != rank:
                return None
            group.append(other)
        return group

    def _coordinated_rank(self, arm: _Arm, index: int) -> int:
        earlier = arm.queue[: arm.queue.index(index)]
        return sum(self.params.subtasks[i].coordination == "coordinated" for i in earlier)

    def _start_group(self, group: list[_Arm]) -> None:
        first = group[0].next_index
        obj = self.params.subtasks[first].object
        start, end = self._window(first)
        # One transform for the whole group, taken once: the arms keep their relative poses.
        transform = self._transform(obj, start)
        self.provenance.setdefault("coordinated", []).append(
            {
                "subtasks": [arm.next_index for arm in group],
                "object": obj,
                "step": len(self.actions),
            }
        )
        for arm in group:
            self._start(arm, transform, start, end)

    def _transform(self, obj: str, start: int) -> np.ndarray:
        """T_obj_now · inv(T_obj_src[start]): the source's frame of `obj` onto the scene's."""
        return self.scene.object_pose(obj) @ np.linalg.inv(self.source.object_poses[obj][start])

    def _window(self, index: int) -> tuple[int, int]:
        """[start, end) of subtask `index` in the source, the end offset drawn (not on an arm's
        last subtask, which runs to the demo's end)."""
        start, end = self.source.segments[index]
        sub = self.params.subtasks[index]
        if sub.ends_when is not None:
            lo, hi = sub.end_offset
            end = min(end + int(self.rng.integers(lo, hi + 1)), self.source.demo.length)
        return start, max(end, start + 1)

    def _start(self, arm: _Arm, transform: np.ndarray, start: int, end: int) -> None:
        index = arm.next_index
        src_eef = self.source.eef_poses[arm.name][start:end]
        targets = transform_segment(src_eef, np.eye(4), transform)
        grips = self.source.gripper[arm.name][start:end]
        origin = self.scene.eef_pose_of(arm.name)
        bridge = interpolate_poses(origin, targets[0], max(self.gen.interpolation_steps, 1))
        if self.gen.fixed_steps:
            bridge = np.concatenate([bridge, np.repeat(bridge[-1:], self.gen.fixed_steps, 0)])
        poses = np.concatenate([bridge, targets])
        grips = np.concatenate([np.repeat(grips[:1], len(bridge), axis=0), grips])
        arm.segment = _Segment(index, poses, grips, len(bridge))
        arm.position += 1
        self.provenance["order"].append(index)
        self.provenance["reached"].append(index)
        self.provenance["subtask_starts"].append([index, len(self.actions)])

    # --- one control step of every arm -------------------------------------------------
    def _step(self) -> None:
        scene, parts = self.scene, []
        for arm in self.arms:
            seg = arm.segment
            if seg is not None:
                target, grip = seg.poses[seg.step], seg.grips[seg.step]
                noisy = self.gen.noise_during_interpolation or seg.step >= seg.bridge
            else:  # waiting or finished: hold the last target and gripper command
                if arm.hold is None:
                    arm.hold = scene.eef_pose_of(arm.name)
                grip = arm.grip
                if grip is None:  # nothing replayed yet: open (-1 in every column)
                    grip = -np.ones(scene.hand_width_of(arm.name))
                target, noisy = arm.hold, False
            max_dpos, max_drot, frame = scene.controller_limits_of(arm.name)
            now = scene.eef_pose_of(arm.name)
            if arm.name not in self.checked:  # the limits' checks once (half the call's cost)
                pose_to_delta_action(target, now, max_dpos, max_drot, frame)
                self.checked.add(arm.name)
            action = checked_delta_action(target, now, max_dpos, max_drot, frame)
            # a bare wrist (TwoArmPegInHole) has no columns; a hand one per finger DoF
            action = np.concatenate((action, np.ravel(grip)))
            if noisy and self.gen.action_noise > 0:
                # add_action_noise on the arm's 6 columns, its checks done when the attempt began
                action[:6] = noisy_clip(action[:6], self.gen.action_noise, self.rng)
            parts.append(action)
        # Executed as recorded (float32): replaying a dataset's actions re-simulates it exactly.
        action = np.concatenate(parts).astype(np.float32)
        self.states.append(scene.get_state())
        self.proprio.append(scene.proprio())
        self.actions.append(action)
        scene.step(action)
        # Only the final `success_hold_steps` values are read: once every arm is on its last
        # segment the steps left are known, and the task's check (robosuite's, in Python: half
        # the generator's time on TwoArmHandover) runs for those steps alone.
        self.success.append(self._steps_left() < self.gen.success_hold_steps and scene.success())
        for arm in self.arms:
            self._advance(arm)

    def _steps_left(self) -> int:
        """Control steps after this one until every arm has finished (a large number while an
        arm still has a segment to start)."""
        if any(arm.position < len(arm.queue) for arm in self.arms):
            return 1 << 30
        return max(
            (len(a.segment.poses) - a.segment.step - 1 for a in self.arms if a.segment), default=0
        )

    def _advance(self, arm: _Arm) -> None:
        seg = arm.segment
        if seg is None:
            return
        arm.hold, arm.grip = seg.poses[seg.step], seg.grips[seg.step]
        seg.step += 1
        if not seg.done:
            return
        arm.segment = None
        self.ended.add(seg.index)
        predicate = self.params.subtasks[seg.index].ends_when
        if predicate is None or self.scene.holds_for(arm.name, predicate):
            self.completed.append(seg.index)
        else:
            self.missed.append(seg.index)
