"""MimicGen-style trajectory generation, written from the paper (Mandlekar et al., CoRL 2023).

One attempt, per subtask of the spec:
    pick a source demo (per episode) ──► its segment for this subtask
    ──► transform each eef target by  T_obj_now · inv(T_obj_src) · T_eef_src
    ──► bridge from the current eef pose (interpolation + hold steps)
    ──► execute as delta OSC actions (+ Gaussian noise), replaying the source's gripper commands
then keep the attempt only if the task's success check holds over its final steps.

Physics only: nothing here renders. Every random draw comes from the attempt's seed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from factory.records import AnnotatedDemo, Attempt
from factory.sim import Placement, Scene
from factory.spec import PlacementSpec, SceneSpec
from generators.poses import (
    add_action_noise,
    interpolate_poses,
    pose_to_delta_action,
    transform_segment,
)


@dataclass(frozen=True)
class AttemptPlan:
    """Which attempt to run: its global id, its shard and its seed."""

    attempt_id: int
    shard: int
    seed: int


def attempt_seed(spec_seed: int, shard: int, attempt_id: int) -> int:
    """A 63-bit seed from (spec seed, shard, attempt): independent of workers and order."""
    state = np.random.SeedSequence([spec_seed, shard, attempt_id]).generate_state(2, dtype=np.uint32)
    return int((int(state[0]) << 31) ^ int(state[1]))


def sample_placement(
    spec: PlacementSpec, start_xy: dict[str, np.ndarray], rng: np.random.Generator, max_tries: int = 200
) -> Placement:
    """Draw offsets for the spec's objects; reject draws that put objects too close."""
    names = list(spec.objects)
    for _ in range(max_tries):
        offsets = {
            name: (rng.uniform(*r.x), rng.uniform(*r.y), rng.uniform(*r.yaw)) for name, r in spec.objects.items()
        }
        if spec.min_separation <= 0 or _separated(offsets, start_xy, spec.min_separation):
            return Placement(offsets)
    raise RuntimeError(f"no placement of {names} with min_separation={spec.min_separation} in {max_tries} draws")


def _separated(offsets, start_xy: dict[str, np.ndarray], min_sep: float) -> bool:
    xy = {name: start_xy[name] + np.array(off[:2]) for name, off in offsets.items()}
    xy.update({name: pos for name, pos in start_xy.items() if name not in xy})
    names = list(xy)
    return all(
        np.linalg.norm(xy[a] - xy[b]) >= min_sep for i, a in enumerate(names) for b in names[i + 1 :]
    )


class _Recorder:
    """Collects the state, proprio and action of every executed step."""

    def __init__(self):
        self.states, self.proprio, self.actions, self.success = [], [], [], []

    def arrays(self, state_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if not self.actions:
            return np.zeros((0, state_size)), np.zeros((0, 9), np.float32), np.zeros((0, 7), np.float32)
        return np.stack(self.states), np.stack(self.proprio), np.stack(self.actions).astype(np.float32)


def generate_attempt(scene: Scene, demos: Sequence[AnnotatedDemo], plan: AttemptPlan) -> Attempt:
    """Run one attempt in `scene`; a simulator error is a failed attempt, not a crash."""
    spec = scene.spec
    rng = np.random.default_rng(plan.seed)
    start_state = demos[0].demo.states[0]
    start_xy = {name: poses[0][:2, 3] for name, poses in demos[0].object_poses.items()}
    placement = sample_placement(spec.placement, start_xy, rng)
    source = demos[int(rng.integers(len(demos)))]
    provenance = {"source_demo": source.demo.label, "placement": placement.to_json()}
    rec = _Recorder()
    done, reason = 0, ""
    try:
        scene.reset_to(start_state, placement)
        done, reason = _run_subtasks(scene, spec, source, rng, rec)
    except Exception as err:  # MuJoCo instabilities and controller errors end this attempt only
        reason = f"simulator error: {type(err).__name__}: {err}"
    success = reason == "" and _held_at_end(rec.success, spec.generation.success_hold_steps)
    if reason == "" and not success:
        reason = "task not done at the end"
    states, proprio, actions = rec.arrays(scene.state_size)
    return Attempt(
        attempt_id=plan.attempt_id, shard=plan.shard, seed=plan.seed, success=success, reason=reason,
        states=states, actions=actions, proprio=proprio, subtasks_done=done, provenance=provenance,
    )


def _run_subtasks(scene: Scene, spec: SceneSpec, source: AnnotatedDemo, rng, rec: _Recorder) -> tuple[int, str]:
    """Execute every subtask; returns (subtasks done, failure reason or "")."""
    gen = spec.generation
    plans = _segment_bounds(spec, source, rng)
    total = sum(end - start + gen.interpolation_steps + gen.fixed_steps for start, end in plans)
    if total > spec.task.horizon:
        return 0, f"horizon: {total} steps planned, task.horizon is {spec.task.horizon}"
    check_from = total - gen.success_hold_steps
    for i, ((start, end), sub) in enumerate(zip(plans, spec.subtasks, strict=True)):
        src_obj = source.object_poses[sub.object][start]
        targets = transform_segment(source.eef_poses[start:end], src_obj, scene.object_pose(sub.object))
        bridge = interpolate_poses(scene.eef_pose(), targets[0], gen.interpolation_steps)
        hold = np.repeat(targets[:1], gen.fixed_steps, axis=0)
        poses = np.concatenate([bridge, hold, targets])
        grip = source.gripper[start:end]
        grips = np.concatenate([np.full(len(bridge) + len(hold), grip[0]), grip])
        _execute(scene, poses, grips, gen.action_noise, rng, rec, check_from)
        if not np.isfinite(scene.get_state()).all():
            return i, f"simulator unstable in subtask {i}"
    return len(plans), ""


def _segment_bounds(spec: SceneSpec, source: AnnotatedDemo, rng) -> list[tuple[int, int]]:
    """[start, end) of each subtask's segment in the source, with the spec's end offsets."""
    bounds, start = [], 0
    for sub, end in zip(spec.subtasks, source.subtask_ends, strict=True):
        lo, hi = sub.end_offset
        end = min(end + int(rng.integers(lo, hi + 1)), source.demo.length)
        end = max(end, start + 1)
        bounds.append((start, end))
        start = end
    last_start = bounds[-1][0]
    bounds[-1] = (last_start, source.demo.length)  # the last subtask runs to the end of the demo
    return bounds


def _execute(scene: Scene, poses, grips, noise: float, rng, rec: _Recorder, check_from: int) -> None:
    """Drive the eef through `poses` with closed-loop delta actions."""
    max_dpos, max_drot, frame = scene.controller_limits()
    for pose, grip in zip(poses, grips, strict=True):
        arm = pose_to_delta_action(pose, scene.eef_pose(), max_dpos, max_drot, frame)
        action = np.concatenate([arm, [grip]])[None]
        if noise > 0:
            action = add_action_noise(action, noise, rng)
        rec.states.append(scene.get_state())
        rec.proprio.append(scene.proprio())
        rec.actions.append(action[0])
        scene.step(action[0])
        rec.success.append(len(rec.actions) > check_from and scene.success())


def _held_at_end(success: list[bool], steps: int) -> bool:
    return len(success) >= steps and all(success[-steps:])
