"""MimicGen-style trajectory generation, written from the paper (Mandlekar et al., CoRL 2023).

One attempt, for each subtask in the order the chosen source demo did them:
    pick a source demo (per episode or per subtask: random, or among the k nearest)
    ──► its segment for this subtask (end offset drawn from the spec's range)
    ──► transform each eef target by  T_obj_now · inv(T_obj_src) · T_eef_src
    ──► when an object is held and the segment is relative to another one, shift the targets
        by the held object's offset in the hand, source against now (it lands where the
        source's did: another robot's hand, or a grasp a centimetre off)
    ──► bridge from the current pose (or the last target) by interpolation + hold steps
    ──► execute as delta OSC actions (+ Gaussian noise), replaying the source's gripper commands
    ──► check the subtask's predicate (the one that ended the source's segment: a demo with
        no grasp ends `grasped(X)` at `touching(hand, X)`, see `AnnotatedDemo.ended_by`); with
        retries on, a failed subtask is restored to the state saved at its start and tried
        again with another segment, offset and noise
then keep the attempt only if the task's success check holds over its final steps.

Physics only: nothing here renders. Every random draw comes from the attempt's seed.
The scene is anything with the `demofactory.generators.scene_api.Scene` methods and the parameters
are
`demofactory.generators.params.MimicGenParams` (`demofactory.specs.adapters.mimicgen_params` maps a
spec onto them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from demofactory.generators.params import GenerationParams, MimicGenParams, PlacementParams
from demofactory.generators.poses import (
    add_action_noise,
    held_offset,
    interpolate_poses,
    mat_to_axis_angle,
    pose_to_delta_action,
    shift_in_hand,
    symmetric_frame,
    transform_segment,
    transit_over,
)
from demofactory.generators.predicates import parse_predicate
from demofactory.generators.records import AnnotatedDemo, Attempt
from demofactory.generators.scene_api import ACTION_DIM, PROPRIO_DIM, Placement, Scene
from demofactory.generators.skills import last_sign_change, straight_approach


@dataclass(frozen=True)
class AttemptPlan:
    """Which attempt to run: its global id, its shard and its seed."""

    attempt_id: int
    shard: int
    seed: int


def attempt_seed(spec_seed: int, shard: int, attempt_id: int) -> int:
    """A 63-bit seed from (spec seed, shard, attempt): independent of workers and order."""
    state = np.random.SeedSequence([spec_seed, shard, attempt_id]).generate_state(
        2, dtype=np.uint32
    )
    return int((int(state[0]) << 31) ^ int(state[1]))


def sample_placement(
    params: PlacementParams,
    start_xy: dict[str, np.ndarray],
    rng: np.random.Generator,
    max_tries: int = 200,
) -> Placement:
    """Draw offsets for the placed objects; reject draws that put objects too close."""
    for _ in range(max_tries):
        offsets = {
            name: (rng.uniform(*r.x), rng.uniform(*r.y), rng.uniform(*r.yaw))
            for name, r in params.objects.items()
        }
        if params.min_separation <= 0 or _separated(offsets, start_xy, params.min_separation):
            return Placement(offsets)
    names = list(params.objects)
    raise RuntimeError(
        f"no placement of {names} with min_separation={params.min_separation} in {max_tries} draws"
    )


def _separated(offsets, start_xy: dict[str, np.ndarray], min_sep: float) -> bool:
    xy = {name: start_xy[name] + np.array(off[:2]) for name, off in offsets.items()}
    xy.update({name: pos for name, pos in start_xy.items() if name not in xy})
    names = list(xy)
    return all(
        np.linalg.norm(xy[a] - xy[b]) >= min_sep
        for i, a in enumerate(names)
        for b in names[i + 1 :]
    )


def pose_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Position distance (m) plus rotation angle (rad) between two 4x4 poses, weighted 1:1."""
    angle = np.linalg.norm(mat_to_axis_angle(a[:3, :3].T @ b[:3, :3]))
    return float(np.linalg.norm(a[:3, 3] - b[:3, 3]) + angle)


def select_source(
    candidates: Sequence[AnnotatedDemo],
    position: int,
    scene: Scene,
    params: MimicGenParams,
    rng: np.random.Generator,
) -> AnnotatedDemo:
    """Pick the source demo for the `position`-th subtask, per `generation.source_selection`."""
    gen = params.generation
    if gen.source_selection == "random" or len(candidates) == 1:
        return candidates[int(rng.integers(len(candidates)))]
    distances = []
    for demo in candidates:
        start, _ = demo.segment(position)
        if gen.source_selection == "nearest_object":
            obj = params.subtasks[demo.order[position]].object
            distances.append(pose_distance(demo.object_poses[obj][start], scene.object_pose(obj)))
        else:
            distances.append(pose_distance(demo.eef_poses[start], scene.eef_pose()))
    nearest = np.argsort(distances, kind="stable")[: gen.nearest_k]
    return candidates[int(nearest[rng.integers(len(nearest))])]


class _Recorder:
    """The executed branch: state, proprio and action of every step, and the task's success on
    the steps where it is checked (False elsewhere)."""

    def __init__(self):
        self.states, self.proprio, self.actions, self.success = [], [], [], []

    def __len__(self) -> int:
        return len(self.actions)

    def truncate(self, length: int) -> None:
        for column in (self.states, self.proprio, self.actions, self.success):
            del column[length:]

    def arrays(self, state_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if not self.actions:
            return (
                np.zeros((0, state_size)),
                np.zeros((0, PROPRIO_DIM), np.float32),
                np.zeros((0, ACTION_DIM), np.float32),
            )
        return (
            np.stack(self.states),
            np.stack(self.proprio),
            np.stack(self.actions).astype(np.float32),
        )


@dataclass
class _Outcome:
    done: int = 0
    reason: str = ""
    failed_subtask: int | None = None
    completed: tuple[int, ...] = ()  # spec indices whose check held, in order


def attempt_placement(
    demos: Sequence[AnnotatedDemo], plan: AttemptPlan, params: MimicGenParams
) -> tuple[np.random.Generator, Placement]:
    """The attempt's generator, seeded by its plan, and its placement, the first draw from it
    (the rest of the attempt draws after; a batch of worlds places each world with it)."""
    rng = np.random.default_rng(plan.seed)
    start_xy = {name: poses[0][:2, 3] for name, poses in demos[0].object_poses.items()}
    return rng, sample_placement(params.placement, start_xy, rng)


def generate_attempt(
    scene: Scene, demos: Sequence[AnnotatedDemo], plan: AttemptPlan, params: MimicGenParams
) -> Attempt:
    """Run one attempt in `scene`; a simulator error is a failed attempt, not a crash."""
    rng, placement = attempt_placement(demos, plan, params)
    rec, outcome = _Recorder(), _Outcome()
    retries = [0] * len(params.subtasks)
    provenance: dict = {"placement": placement.to_json(), "sources": []}
    try:
        scene.reset_to(demos[0].start_state, placement, fixtures=demos[0].fixture_poses)
        if scene.has_redrawn_fixtures:
            # what a re-render or a re-simulation needs
            provenance["fixtures"] = scene.fixture_poses()
        outcome = _Rollout(scene, params, demos, rng, rec, retries, provenance).run()
    except Exception as err:  # MuJoCo instabilities and controller errors end this attempt only
        outcome.reason = f"simulator error: {type(err).__name__}: {err}"
    success = outcome.reason == "" and _held_at_end(
        rec.success, params.generation.success_hold_steps
    )
    if outcome.reason == "" and not success:
        outcome.reason = "task not done at the end"
        if outcome.failed_subtask is None:
            outcome.failed_subtask = provenance["order"][-1] if provenance.get("order") else None
    states, proprio, actions = rec.arrays(scene.state_size)
    return Attempt(
        attempt_id=plan.attempt_id,
        shard=plan.shard,
        seed=plan.seed,
        success=success,
        reason=outcome.reason,
        states=states,
        actions=actions,
        proprio=proprio,
        subtasks_done=outcome.done,
        provenance=provenance,
        failed_subtask=None if success else outcome.failed_subtask,
        retries=tuple(retries),
        reached=tuple(provenance.get("reached", ())),
        completed=outcome.completed,
    )


class _Rollout:
    """The subtask loop of one attempt (state shared by its small steps)."""

    def __init__(
        self,
        scene: Scene,
        params: MimicGenParams,
        demos,
        rng,
        rec: _Recorder,
        retries: list[int],
        provenance: dict,
    ):
        self.scene, self.params, self.rng, self.rec = scene, params, rng, rec
        self.gen: GenerationParams = params.generation
        self.retries, self.provenance = retries, provenance
        # A demo too long for the horizon can never give a success: the horizon filters sources.
        bridge = self.gen.interpolation_steps + self.gen.fixed_steps
        planned = self.gen.transit == "plan"
        fitting = [
            d for d in demos if _demo_span(d, planned) + len(d.order) * bridge <= params.horizon
        ]
        first = select_source(fitting or demos, 0, scene, self.params, rng)
        # Later picks follow the first source's subtask order: only demos with that order qualify.
        self.candidates = [d for d in demos if d.order == first.order]
        self.first, self.order = first, first.order
        self.last_target: np.ndarray | None = None
        self.held = {name: parse_predicate(f"grasped({name})") for name in self.params.objects}
        # In the hand, for a release: touched by it (a firm grasp may leave one pad off).
        self.touched = {
            name: parse_predicate(f"touching(hand, {name})") for name in self.params.objects
        }
        # Per subtask (spec index): the predicate that ended the segment executed for it, as its
        # source demo was cut (the spec's, or a push where the person never grasped).
        self.ended: dict[int, str | None] = {}
        provenance["order"] = list(first.order)
        provenance["reached"] = []

    def run(self) -> _Outcome:
        outcome = _Outcome()
        for position, index in enumerate(self.order):
            self.provenance["reached"].append(index)
            # [spec subtask index, first step]: what a frame's subtask instruction is read from
            # (a retry restarts the subtask at this same step)
            self.provenance.setdefault("subtask_starts", []).append([index, len(self.rec)])
            ok, reason = self._subtask(position, index)
            if reason:
                return _Outcome(outcome.done, reason, index, outcome.completed)
            if ok:
                outcome.done += 1
                outcome.completed += (index,)
            elif outcome.failed_subtask is None:
                outcome.failed_subtask = index  # no retries: go on, as MimicGen does, and record it
        return outcome

    def _subtask(self, position: int, index: int) -> tuple[bool, str]:
        """Execute one subtask, with retries; returns (its check held, a reason to stop)."""
        snap, mark = (
            (self.scene.snapshot(), len(self.rec)) if self.gen.subtask_retries else (None, 0)
        )
        last = position == len(self.order) - 1
        for attempt in range(self.gen.subtask_retries + 1):
            source = self._source(position, retry=attempt > 0)
            self.ended[index] = end_predicate(self.params, source, index)
            reason = self._execute_segment(source, position, index, last)
            if reason:
                return False, reason
            if self._check(index, last) or self._settle(index, last):
                return True, ""
            if attempt < self.gen.subtask_retries:
                self.retries[index] += 1
                self.scene.restore(snap)
                self.rec.truncate(mark)
        if self.gen.subtask_retries:
            what = self.ended[index] or "success"
            tries = self.gen.subtask_retries + 1
            return False, f"subtask {index} failed: {what} did not hold after {tries} tries"
        return False, ""

    def _source(self, position: int, retry: bool) -> AnnotatedDemo:
        if not retry and (position == 0 or self.gen.source_per == "episode"):
            source = self.first
        else:
            # Only sources whose segment still fits in the horizon are worth a try.
            room = (
                self.params.horizon
                - len(self.rec)
                - self.gen.interpolation_steps
                - self.gen.fixed_steps
            )
            fitting = [
                d
                for d in self.candidates
                if _segment_length(d, position, self.gen.transit == "plan") <= room
            ] or self.candidates
            source = select_source(fitting, position, self.scene, self.params, self.rng)
        self.provenance["sources"].append(source.demo.label)
        return source

    def _execute_segment(self, source: AnnotatedDemo, position: int, index: int, last: bool) -> str:
        gen = self.gen
        planned = gen.transit == "plan"
        # The last: the demo's end, or just after the task is done. Planned transits replay the
        # skill window only: the approach before it is planned in the scene as it is now.
        start, end = source.skill(position) if planned else source.segment(position)
        if not last:
            lo, hi = self.params.subtasks[index].end_offset
            end = min(end + int(self.rng.integers(lo, hi + 1)), source.demo.length)
        end = max(end, start + 1)
        steps_replayed = np.arange(start, end)
        if planned and gen.trim_pauses and source.paused is not None:
            keep = ~source.paused[start:end]
            keep[0] = True
            steps_replayed = steps_replayed[keep]
        obj = self.params.subtasks[index].object
        origin = (
            self.last_target
            if gen.start_from == "last_target" and self.last_target is not None
            else self.scene.eef_pose()
        )
        ref = reference_step(self.params, source, position, start)
        src_obj = source.object_poses[obj][ref]
        refitted = False
        if planned and ref != start:  # a grasp of the reference object: fit it to the object
            turn = self.scene.grasp_correction(obj, np.linalg.inv(src_obj) @ source.eef_poses[ref])
            refitted = not np.array_equal(turn, np.eye(4))
            if refitted:
                # Re-targeting from src_obj @ inv(turn) puts every target turned about the object.
                src_obj = src_obj @ np.linalg.inv(turn)
                self.provenance.setdefault("refitted_grasps", []).append(index)
        # Of an object's symmetric frames, the one needing the least wrist turn: from the hand
        # now for a bridge; for a planned transit, from the person's own wrist at the window's
        # start (a pose the arm is known to reach; the hand now may be anywhere).
        frame = symmetric_frame(
            self.scene.object_pose(obj),
            src_obj,
            source.eef_poses[start],
            source.eef_poses[start] if planned else origin,
            self.params.symmetry.get(obj, 1),
        )
        targets = transform_segment(source.eef_poses[steps_replayed], src_obj, frame)
        grip = source.gripper[steps_replayed]
        # A grasp re-fitted to today's object is approached straight: the person's own approach
        # was to an object of another shape. "auto" replays it otherwise (a handle's approach).
        straight = gen.grasp_approach == "straight" or (gen.grasp_approach == "auto" and refitted)
        if planned and ref != start and straight:
            targets, grip = self._straight_grasp(
                source, index, steps_replayed, (start, ref), targets, grip
            )
        held, offset = self._grip(source, start, position, obj)
        if gen.held_object_correction and held is not None:
            self.provenance.setdefault("held_offsets", []).append(
                {"subtask": index, "object": held, "offset": [round(float(v), 5) for v in offset]}
            )
            targets = shift_in_hand(targets, offset)
        if planned:
            way = self._planned_way(origin, targets[0], position, obj, index)
            rise = float(way[-1][2, 3] - targets[0][2, 3])
            if rise > 1e-9:  # what the hand holds did not fit at the window's start: all rise
                targets = targets.copy()
                targets[:, 2, 3] += rise
                self.provenance.setdefault("raised_windows", []).append(
                    {"subtask": index, "metres": round(rise, 4)}
                )
        elif gen.transit == "over" and position > 0:
            way = transit_over(origin, targets[0], gen.transit_clearance, gen.transit_speed)
        else:
            way = interpolate_poses(origin, targets[0], gen.interpolation_steps)
        bridge = np.concatenate([way, np.repeat(targets[:1], gen.fixed_steps, axis=0)])
        steps = len(bridge) + len(targets)
        if len(self.rec) + steps > self.params.horizon:
            needed = len(self.rec) + steps
            return f"horizon: {needed} steps needed, task.horizon is {self.params.horizon}"
        noise = gen.action_noise if gen.noise_during_interpolation else 0.0
        before = {name: self.scene.object_pose(name) for name in self.params.objects}
        exempt = {obj, *(name for name, pred in self.held.items() if self.scene.holds(pred))}
        if held is not None:
            exempt.add(held)  # it moves with the hand
        self._drive(bridge, np.full(len(bridge), grip[0]), noise, last)
        if planned:
            self._reach(targets[0], float(grip[0]), last)
        moved = disturbed(
            before, {name: self.scene.object_pose(name) for name in self.params.objects}, exempt
        )
        if moved:
            self.provenance.setdefault("disturbed_in_transit", []).append(
                {"subtask": index, "objects": moved}
            )
        targets = self._drive_window(targets, grip, last, index)
        self.last_target = targets[-1]
        if not np.isfinite(self.scene.get_state()).all():
            return f"simulator unstable in subtask {index}"
        return ""

    def _drive_window(self, targets: np.ndarray, grip: np.ndarray, last: bool, index: int):
        """Drive a segment's targets; returns them as driven.

        Under `release: lower`, where the hand opens on an object it holds, the object is put
        down rather than dropped: a person may drop an object into a bin, and today's model of
        it may be larger than theirs (PickPlace's cereal box lands across a divider and leans
        on it). First the hand moves sideways, at most PLACE_REACH, until what is below the
        object is one flat surface (`Scene.place_shift`); then, if it would fall further than
        RELEASE_DROP (and at most RELEASE_MAX), straight down until it is RELEASE_GAP over it.
        The rest of the window moves with it (provenance `placed`).
        """
        gen = self.gen
        lower = gen.release == "lower" or (gen.release == "auto" and gen.transit == "plan")
        k = _release_step(grip) if lower else None
        if k is None:
            self._drive(targets, grip, gen.action_noise, last)
            return targets
        self._drive(targets[:k], grip[:k], gen.action_noise, last=False)
        held = [n for n, p in self.touched.items() if self.scene.holds(p)]
        # What the hand holds: a free body (not a bin's wall it brushes); of several it touches,
        # the one not resting on anything.
        held = [n for n in held if self.scene.is_free(n)]
        if len(held) > 1:
            held = [n for n in held if not self.scene.resting(n)]
        if len(held) != 1:
            self._drive(targets[k:], grip[k:], gen.action_noise, last)
            return targets
        name, hold = held[0], grip[k - 1 : k]
        room = self.params.horizon - len(self.rec) - (len(targets) - k)
        pose = targets[k - 1].copy()
        shift = self.scene.place_shift(name, PLACE_REACH, PLACE_STEP)
        moved = np.zeros(3)
        if shift is not None and shift.any():
            steps = int(np.ceil(np.linalg.norm(shift) / APPROACH_SPEED))
            if steps <= room:
                for step in range(1, steps + 1):
                    moved[:2] = shift * step / steps
                    way = pose.copy()
                    way[:3, 3] += moved
                    self._drive(way[None], hold, 0.0, last=False)
                room -= steps
        drop = self.scene.drop_height(name)
        if drop is not None and RELEASE_DROP < drop <= RELEASE_MAX:
            steps = int(np.ceil((drop - RELEASE_GAP) / APPROACH_SPEED))
            if steps <= room:
                base = moved.copy()
                for step in range(1, steps + 1):
                    moved[2] = base[2] - (drop - RELEASE_GAP) * step / steps
                    way = pose.copy()
                    way[:3, 3] += moved
                    self._drive(way[None], hold, 0.0, last=False)
                    below = self.scene.drop_height(name)
                    if below is None or below <= RELEASE_GAP:
                        break
        if moved.any():
            self.provenance.setdefault("placed", []).append(
                {"subtask": index, "object": name, "moved": [round(float(v), 4) for v in moved]}
            )
        rest, opened = targets[k:].copy(), grip[k:]
        # Open where it was put down, then back onto the person's way out (robosuite's PickPlace
        # wants the hand 4 cm clear of every object at the end).
        back = int(np.ceil(np.linalg.norm(moved) / APPROACH_SPEED))
        pad = min(max(RELEASE_OPEN + back - len(rest), 0), max(room, 0))
        if pad:
            rest = np.concatenate([rest, np.repeat(rest[-1:], pad, axis=0)])
            opened = np.concatenate([opened, np.repeat(opened[-1:], pad)])
        weight = np.clip(1.0 - (np.arange(len(rest)) - RELEASE_OPEN) / max(back, 1), 0.0, 1.0)
        rest[:, :3, 3] += weight[:, None] * moved
        self._drive(rest, opened, gen.action_noise, last)
        return np.concatenate([targets[:k], rest])

    def _straight_grasp(self, source, index, steps_replayed, span, targets, grip):
        """The grasp's targets from where the person closed the hand on (in `span`, the window's
        start to the grasp), after a straight approach along the hand's axis to that pose, as
        far as the subtask's skill margin (gripper as it was before closing)."""
        close = last_sign_change(source.gripper, *span)
        if close is None:
            return targets, grip
        keep = steps_replayed >= close
        if not keep.any() or keep.all():
            return targets, grip
        margin = self.params.subtasks[index].skill_margin
        approach = straight_approach(targets[keep][0], margin, APPROACH_SPEED)
        opened = np.full(len(approach), source.gripper[close - 1])
        return (
            np.concatenate([approach, targets[keep]]),
            np.concatenate([opened, grip[keep]]),
        )

    def _planned_way(
        self, origin: np.ndarray, goal: np.ndarray, position: int, obj: str, index: int
    ) -> np.ndarray:
        """A collision-free way from the hand's pose to `goal` (what it holds attached), or the
        direct bridge where planning fails (counted in provenance `transit_fallbacks`)."""
        gen = self.gen
        seed = int(self.rng.integers(2**31 - 1))
        if float(np.linalg.norm(goal[:3, 3] - origin[:3, 3])) < NEAR:
            # Already there (a skill that starts in contact, the cube in the hand): no transit.
            return interpolate_poses(origin, goal, max(gen.interpolation_steps, 1))
        way, why = self.scene.plan_transit(
            goal, self._held_object(position, obj), gen.transit_speed, gen.plan_checks, seed
        )
        self.provenance["transits"] = self.provenance.get("transits", 0) + 1
        if way is not None:
            return way
        self.provenance.setdefault("transit_fallbacks", []).append({"subtask": index, "why": why})
        distance = float(np.linalg.norm(goal[:3, 3] - origin[:3, 3]))
        steps = max(gen.interpolation_steps, int(np.ceil(distance / gen.transit_speed)), 1)
        return interpolate_poses(origin, goal, steps)

    def _reach(self, goal: np.ndarray, grip: float, last: bool) -> None:
        """Hold `goal` until the hand is within REACHED m of it (at most REACH_STEPS steps): the
        controller lags its targets, and a skill window must start where it was planned to."""
        for _ in range(REACH_STEPS):
            if np.linalg.norm(self.scene.eef_pose()[:3, 3] - goal[:3, 3]) < REACHED:
                return
            self._drive(goal[None], np.array([grip]), 0.0, last=False)

    def _held_object(self, position: int, obj: str) -> str | None:
        """The one object in the hand at a segment relative to `obj` (another object), or None.

        `grasped(X)` says so, or, when it does not, the object the previous subtask ended by
        grasping: the predicate wants both finger pads within a few millimetres of the object,
        and a firm grasp can hold it with one pad 3-8 mm off (measured on Stack, a third of the
        attempts). `_grip` then checks it sits near where the source held it. A previous subtask
        whose source ended it by touching, not grasping, left nothing in the hand.
        """
        held = [n for n, p in self.held.items() if n != obj and self.scene.holds(p)]
        if held:
            return held[0] if len(held) == 1 else None
        if position == 0:
            return None
        previous = self.ended.get(self.order[position - 1])
        if previous is None:
            return None
        predicate = parse_predicate(previous)
        if predicate.name == "grasped" and predicate.objects[0] != obj:
            return predicate.objects[0]
        return None

    def _grip(
        self, source: AnnotatedDemo, start: int, position: int, obj: str
    ) -> tuple[str | None, np.ndarray | None]:
        """(the object in the hand, its offset `held_offset` from where the source held it at
        the segment's start), or (None, None): nothing held, or held too far from the source's
        grip to be the same grasp (the source was not holding it alike)."""
        name = self._held_object(position, obj)
        if name is None:
            return None, None
        offset = held_offset(
            source.eef_poses[start],
            source.object_poses[name][start],
            self.scene.eef_pose(),
            self.scene.object_pose(name),
        )
        if float(np.linalg.norm(offset)) > MAX_HELD_OFFSET:
            return None, None
        return name, offset

    def _drive(self, poses: np.ndarray, grips: np.ndarray, noise: float, last: bool) -> None:
        """Closed-loop delta actions toward each pose; success is recorded on the last subtask.

        Only the final `success_hold_steps` flags of an attempt decide it (`_held_at_end`), so
        the task's check, a fifth of a control step on Stack (profiled), runs on the last steps
        of the last subtask only; the flags before them stay False.
        """
        scene, rec = self.scene, self.rec
        max_dpos, max_drot, frame = scene.controller_limits()
        check_from = len(poses) - self.gen.success_hold_steps if last else len(poses)
        for step, (pose, grip) in enumerate(zip(poses, grips, strict=True)):
            action = np.concatenate(
                [pose_to_delta_action(pose, scene.eef_pose(), max_dpos, max_drot, frame), [grip]]
            )
            if noise > 0:
                action = add_action_noise(action[None], noise, self.rng)[0]
            # Executed as recorded (float32): replaying a dataset's actions re-simulates it exactly.
            action = action.astype(np.float32)
            rec.states.append(scene.get_state())
            rec.proprio.append(scene.proprio())
            rec.actions.append(action)
            scene.step(action)
            rec.success.append(step >= check_from and scene.success())

    def _settle(self, index: int, last: bool) -> bool:
        """Hold the last target for up to `settle_steps`, until the subtask's predicate holds."""
        # transit: plan settles too: a released object still falling into its bin is no failure
        waits = self.gen.subtask_retries or self.gen.transit == "plan"
        if last or not waits or self.last_target is None:
            return False
        grip = self.rec.actions[-1][-1] if len(self.rec) else -1.0
        for _ in range(self.gen.settle_steps):
            self._drive(self.last_target[None], np.array([grip]), 0.0, last=False)
            if self._check(index, last):
                return True
        return False

    def _check(self, index: int, last: bool) -> bool:
        if last:
            return _held_at_end(self.rec.success, self.gen.success_hold_steps)
        predicate = self.ended.get(index, self.params.subtasks[index].ends_when)
        return predicate is None or self.scene.holds(predicate)


# Metres (`_Rollout._drive_window`): a let-go that would drop the held object further than
# RELEASE_DROP lowers it first, to RELEASE_GAP over what is below; before that the hand moves it
# sideways up to PLACE_REACH (searched in PLACE_STEP rings) until it is over one flat surface.
RELEASE_DROP, RELEASE_GAP = 0.02, 0.005
RELEASE_MAX = 0.25  # metres: further down than this is no support the person meant (the floor)
PLACE_REACH, PLACE_STEP = 0.04, 0.005
RELEASE_OPEN = 10  # control steps the hand stays where it let go, opening, before it goes back
REACHED, REACH_STEPS = 0.005, 20  # metres, control steps: see _Rollout._reach
NEAR = 0.01  # metres: a planned transit's goal this close to the hand needs no planning
APPROACH_SPEED = 0.005  # metres a control step of a straight grasp approach (0.1 m/s)
# Metres: a held object further than this from where the source's sat in its hand is not held
# the same way (another face, or not yet in the source at that step): no correction.
MAX_HELD_OFFSET = 0.04
TRANSIT_MOVE, TRANSIT_TILT = 0.01, 0.2  # metres, radians: an object moved this much was disturbed


def disturbed(
    before: dict[str, np.ndarray], after: dict[str, np.ndarray], exempt: set[str]
) -> list[str]:
    """Objects (but the exempt: the reference, anything in the hand) that a bridging motion
    moved or tipped."""
    names = []
    for name, pose in before.items():
        if name in exempt:
            continue
        shift = np.linalg.norm(after[name][:3, 3] - pose[:3, 3])
        tilt = np.arccos(np.clip(after[name][:3, 2] @ pose[:3, 2], -1.0, 1.0))
        if shift > TRANSIT_MOVE or tilt > TRANSIT_TILT:
            names.append(name)
    return names


def failure_phase(attempt: Attempt) -> str:
    """ "transit" when a bridging motion disturbed an object before the attempt failed, else
    "segment"."""
    return "transit" if attempt.provenance.get("disturbed_in_transit") else "segment"


def reference_step(
    params: MimicGenParams, source: AnnotatedDemo, position: int, start: int | None = None
) -> int:
    """The demo step whose reference-object pose a segment is re-targeted from.

    MimicGen takes the segment's start. A segment that ends by grasping its own reference object
    takes the moment of the grasp instead: a person often nudges the object on the way in, and
    the grasp, not the approach, must land where the object is. A segment the source ended by
    touching instead (no grasp in that demo) keeps the start.
    """
    start = source.segment(position)[0] if start is None else start
    index = source.order[position]
    sub = params.subtasks[index]
    ended = end_predicate(params, source, index)
    if ended is not None:
        predicate = parse_predicate(ended)
        if predicate.name == "grasped" and predicate.objects == (sub.object,):
            return max(start, source.subtask_ends[index] - 1)
    return start


def end_predicate(params: MimicGenParams, source: AnnotatedDemo, index: int) -> str | None:
    """The predicate that ended subtask `index` (spec index) in `source`: the spec's `ends_when`
    (None: the task's success), or the contact annotation fell back to in a demo with no grasp."""
    return source.end_predicate(index, params.subtasks[index].ends_when)


def _release_step(grip: np.ndarray) -> int | None:
    """The first step (> 0) where the gripper command turns from closing to opening."""
    turns = np.flatnonzero((grip[:-1] > 0) & (grip[1:] <= 0))
    return int(turns[0]) + 1 if len(turns) else None


def _segment_length(demo: AnnotatedDemo, position: int, planned: bool = False) -> int:
    """Steps of the demo a segment replays: its skill window only when transits are planned."""
    start, end = demo.skill(position) if planned else demo.segment(position)
    return end - start


def _demo_span(demo: AnnotatedDemo, planned: bool = False) -> int:
    """Steps of the demo its segments replay (skipped steps and a trimmed tail do not count;
    under `transit: plan`, nor the person's approaches, which are planned instead)."""
    return sum(_segment_length(demo, p, planned) for p in range(len(demo.order)))


def _held_at_end(success: list[bool], steps: int) -> bool:
    return len(success) >= steps and all(success[-steps:])
