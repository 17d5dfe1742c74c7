"""Annotation of two-arm seed demos: each arm's segments found on its own.

seed demo [T, N] states, [T, A] actions (each arm's part, right first: 7 wide, 6 without a
gripper)
  ──► check: a two-arm file (robots a pair), 6 or 7 action columns per arm before the env is
      built, then exactly the scene's per-arm widths, states of this model
  ──► replay each state in the `TwoArmScene`: per arm its grip-site pose and gripper
      command (none without a gripper), the spec objects' poses, and each subtask's end
      predicate with its own arm as the hand (grasped(pot) for the right arm: the right
      hand's pads on the pot)
  ──► per arm, in spec order: a segment starts where the arm's previous one ended and ends
      one past the first step from which its predicate holds MIN_RUN steps in a row (the
      arm's last: at the demo's end)
  ──► a coordinated pair (one per arm, by rank) gets one window: its start the later of the
      two (the earlier arm's previous segment runs on to it), its end the later of the two
"""

from __future__ import annotations

import numpy as np
from demofactory.errors import SpecError, UserError
from demofactory.generators.predicates import parse_predicate
from demofactory.generators.records import BimanualDemo, SeedDemo
from demofactory.seeds.annotate import MIN_RUN
from demofactory.seeds.demos import load_seed_demos, recorded_env_configuration
from demofactory.simulation.bimanual import arm_action_layout
from demofactory.specs.arms import arm_names, robot_list, subtask_arm
from demofactory.specs.spec import SceneSpec


def load_two_arm_demos(spec: SceneSpec) -> list[SeedDemo]:
    """Every seed demo of a two-arm spec, checked to be two-arm (before any env is built)."""
    demos = []
    for i, rel in enumerate(spec.seed_demos):
        path = spec.resolve_path(rel)
        if not path.is_file():
            raise SpecError(spec.path, f"seed_demos[{i}]", f"file not found: {path}")
        file_demos = load_seed_demos(
            path, arms=len(arm_names(spec.task)), robots=len(robot_list(spec.task))
        )
        check_recorded_like_spec(spec, i, path, file_demos[0])
        for demo in file_demos:
            check_two_arm_actions(spec, demo)
            demos.append(demo)
    return demos


def check_recorded_like_spec(spec: SceneSpec, index: int, path, demo: SeedDemo) -> None:
    """A SpecError unless seed file `index` was recorded in the spec's env, with its robot pair
    in its layout, where the file says: a state restored into another layout or robot has
    the arms elsewhere, and every subtask would fail to be found for no visible reason."""
    task, field = spec.task, f"seed_demos[{index}]"
    configuration = recorded_env_configuration(path)
    for name, recorded, expected in (
        ("task.env", demo.env_name, task.env),
        ("task.robot", demo.robot, task.robot),
        ("task.two_arm.configuration", configuration, task.two_arm.configuration),
    ):
        if recorded and recorded != expected:
            raise SpecError(
                spec.path,
                field,
                f"{path.name} was recorded with {recorded!r} where the spec's {name} is "
                f"{expected!r}; expected seed demos recorded as the spec says (record them "
                "again with factory script or factory collect)",
            )


ARM_WITHOUT_GRIPPER = sum(n for _, n in arm_action_layout(False))  # 6


def check_two_arm_actions(spec: SceneSpec, demo: SeedDemo, widths: dict | None = None) -> None:
    """A UserError unless `demo` has each arm's action columns: `widths` (arm -> columns, the
    scene's); None (before any env is built): 7 per arm, or 6 per arm (arms without grippers)."""
    arms = arm_names(spec.task)
    if widths is None:
        from demofactory.robots.embodiments import gripper_dof

        hand = gripper_dof(spec.task.robot)
        allowed = ((ARM_WITHOUT_GRIPPER + hand) * len(arms), ARM_WITHOUT_GRIPPER * len(arms))
        what = (
            f"{ARM_WITHOUT_GRIPPER + hand} per arm, or {ARM_WITHOUT_GRIPPER} for arms without "
            "grippers"
        )
    else:
        allowed = (sum(widths.values()),)
        what = ", ".join(f"{arm} {widths[arm]}" for arm in arms)
    if demo.actions.shape[1] not in allowed:
        expected = " or ".join(str(w) for w in allowed)
        raise UserError(
            f"{demo.source}: data/{demo.name}: actions are {demo.actions.shape[1]} wide, expected "
            f"{expected} ({what}: {', '.join(arms)}) for the two-arm {spec.task.env} of "
            f"{spec.path.name}; a one-arm demo given to a two-arm spec?"
        )


def annotate_two_arm_demos(scene, demos: list[SeedDemo]) -> list[BimanualDemo]:
    """Each of `demos` annotated in `scene` (a `TwoArmScene`)."""
    return [annotate_two_arm_demo(scene, demo) for demo in demos]


def check_two_arm_demo(scene, demo: SeedDemo) -> None:
    """A UserError unless `demo` has the scene's action columns per arm and its state size."""
    spec = scene.spec
    check_two_arm_actions(spec, demo, {arm: scene.action_width_of(arm) for arm in scene.arms})
    if demo.states.shape[1] != scene.state_size:
        raise UserError(
            f"{demo.source}: data/{demo.name}: state size {demo.states.shape[1]} does not match "
            f"the {spec.task.env} model built from {spec.path.name} ({scene.state_size}); "
            "is this a demo of another task?"
        )


def annotate_two_arm_demo(scene, demo: SeedDemo) -> BimanualDemo:
    """Replay `demo` in `scene` and cut each arm's subtasks out of it."""
    check_two_arm_demo(scene, demo)
    spec, count = scene.spec, demo.length
    subtasks = list(spec.subtasks)
    predicates = [parse_predicate(s.ends_when) if s.ends_when else None for s in subtasks]
    eef = {arm: np.empty((count, 4, 4)) for arm in scene.arms}
    # each arm's gripper command [T, columns]: 1 column for a parallel gripper, one per
    # actuated finger DoF for a hand (GR-1's: 6), none for an arm without a gripper
    grips = {arm: demo.actions[:, scene.grip_columns(arm)].copy() for arm in scene.arms}
    objects = {name: np.empty((count, 4, 4)) for name in spec.objects}
    holds = np.zeros((count, len(subtasks)), dtype=bool)
    scene.reset(demo.fixture_poses)
    scene.set_state(demo.states[0])
    scene.mark_start()  # lifted(X, h) counts from the demo's first state
    for t in range(count):
        scene.set_state(demo.states[t])
        for arm in scene.arms:
            if scene.has_gripper_of(arm):
                scene._closed[arm] = bool(grips[arm][t].mean() * scene.gripper_sign > 0)
            eef[arm][t] = scene.eef_pose_of(arm)
        for name in spec.objects:
            objects[name][t] = scene.object_pose(name)
        for j, predicate in enumerate(predicates):
            arm = subtask_arm(spec.task, subtasks[j])
            holds[t, j] = predicate is not None and scene.holds_for(arm, predicate)
    segments, reasons = _segments(spec, holds, count, demo, eef)
    return BimanualDemo(
        demo=demo,
        eef_poses=eef,
        gripper=grips,
        object_poses=objects,
        segments=segments,
        end_reasons=reasons,
        fixture_poses=demo.fixture_poses,
    )


def _segments(spec: SceneSpec, holds: np.ndarray, count: int, demo: SeedDemo, eef):
    """Per subtask (spec index) its [start, end) and why it ends there.

    In spec order, which puts an arm's previous subtask and a sequential subtask's `after`
    before it (`load_spec` checks the latter)."""
    subtasks = list(spec.subtasks)
    bounds: dict[int, list[int]] = {}
    reasons: dict[int, str] = {}
    per_arm: dict[str, list[int]] = {}
    for j, sub in enumerate(subtasks):
        per_arm.setdefault(subtask_arm(spec.task, sub), []).append(j)
    named = {sub.name: j for j, sub in enumerate(subtasks) if sub.name is not None}
    for j, sub in enumerate(subtasks):
        arm = subtask_arm(spec.task, sub)
        queue = per_arm[arm]
        k = queue.index(j)
        start = bounds[queue[k - 1]][1] if k else 0
        if sub.coordination == "sequential":
            # The arm holding still in the demo until the subtask it waits for ended is not
            # replayed: generation holds it still for as long as that takes instead.
            until = bounds[named[sub.after]][1]
            still = _still_until(eef[arm], start, until)
            settled = _still_since(eef[arm], start, until)
            if still == start and k and settled < until:
                # The hand moved on a little (settling at the end of its previous segment)
                # before it waited: those steps close the previous segment, the wait is skipped.
                bounds[queue[k - 1]][1] = settled
                still = until
            start = still
        if sub.ends_when is None or j == queue[-1]:
            end, why = count, "the demo's end (the task's success)"
        else:
            first = _first_run(holds[start:, j])
            if first is None:
                raise UserError(
                    f"{demo.source}: data/{demo.name}: subtask {j} ({arm} arm): "
                    f"{sub.ends_when} never holds for {MIN_RUN} steps after step "
                    f"{start}; expected the {arm} hand to do it in every seed demo"
                )
            end, why = start + first + 1, f"{sub.ends_when} holds"
        bounds[j], reasons[j] = [start, end], why
    _align_coordinated(subtasks, per_arm, bounds)
    return (
        tuple((bounds[j][0], bounds[j][1]) for j in range(len(subtasks))),
        tuple(reasons[j] for j in range(len(subtasks))),
    )


def _still_until(poses: np.ndarray, start: int, until: int) -> int:
    """The last step in [start, until] up to which the hand stayed within STILL m of where it
    was at `start` (`start` itself when it moved at once)."""
    moved = np.linalg.norm(poses[start : until + 1, :3, 3] - poses[start, :3, 3], axis=1) > STILL
    return start + (int(np.argmax(moved)) - 1 if moved.any() else len(moved) - 1)


def _still_since(poses: np.ndarray, start: int, until: int) -> int:
    """The first step in [start, until] from which the hand stayed within STILL m of where it
    was at `until` (`until` itself when it was still moving then)."""
    moved = np.linalg.norm(poses[start : until + 1, :3, 3] - poses[until, :3, 3], axis=1) > STILL
    return min(start + (int(len(moved) - np.argmax(moved[::-1])) if moved.any() else 0), until)


STILL = 0.005  # metres: a hand that moved less was holding still


def _align_coordinated(subtasks, per_arm: dict[str, list[int]], bounds) -> None:
    """One window per coordinated pair: both start at the later start, end at the later end;
    each arm's neighbouring segments stretch to meet it."""
    ranks = [
        [j for j in queue if subtasks[j].coordination == "coordinated"]
        for queue in per_arm.values()
    ]
    for group in zip(*ranks, strict=True):
        start = max(bounds[j][0] for j in group)
        end = max(bounds[j][1] for j in group)
        for queue in per_arm.values():
            for k, j in enumerate(queue):
                if j not in group:
                    continue
                if k > 0:
                    bounds[queue[k - 1]][1] = start
                if k + 1 < len(queue):
                    bounds[queue[k + 1]][0] = end
                bounds[j][:] = [start, end]


def _first_run(column: np.ndarray) -> int | None:
    """The first index from which `column` holds MIN_RUN steps in a row (or to its end)."""
    run = 0
    for t, value in enumerate(column):
        run = run + 1 if value else 0
        if run >= MIN_RUN or (value and t == len(column) - 1):
            return t - run + 1
    return None


def arm_timelines(spec: SceneSpec, demo: BimanualDemo) -> dict[str, list[dict]]:
    """Per arm (right first), its segments in order: what `factory annotate` shows."""
    out: dict[str, list[dict]] = {arm: [] for arm in arm_names(spec.task)}
    for j, sub in enumerate(spec.subtasks):
        start, end = demo.segments[j]
        out[subtask_arm(spec.task, sub)].append(
            {
                "subtask": j,
                "name": sub.name,
                "object": sub.object,
                "coordination": sub.coordination,
                "after": sub.after,
                "start": start,
                "end": end,
                "reason": demo.end_reasons[j] if demo.end_reasons else "",
            }
        )
    return out


def format_timelines(label: str, length: int, arms: dict[str, list[dict]]) -> str:
    """`arm_timelines` as text: a line per segment, arm by arm."""
    lines = [f"{label}  ({length} steps)"]
    for arm, rows in arms.items():
        for row in rows:
            wait = f" after {row['after']}" if row["after"] else ""
            lines.append(
                f"  {arm:<5} subtask {row['subtask']} {row['name'] or '':<12} "
                f"{row['object']:<10} steps {row['start']:>5} .. {row['end']:<5} "
                f"{row['coordination']}{wait}  ends: {row['reason']}"
            )
    return "\n".join(lines)
