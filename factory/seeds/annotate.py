"""Annotate seed demos: replay their states in the spec's env and record what generation needs.

    SeedDemo ──► fixtures as recorded ──► restore state t (gripper command t) ──► eef pose,
             object poses, each subtask's end predicate  ──► holds [T, K]
             ──► segment_demo: this demo's subtask order, and where each subtask ends
             ──► AnnotatedDemo

How a demo is cut (`segment_demo`), for people who do things in their own order:
    1. A predicate "happens" where it starts to hold for at least MIN_RUN steps in a row
       (a finger brushing a handle for one step is not a grasp).
    2. From the current segment start, the subtask whose predicate happens first is next;
       the subtask that ends at the task's success (no `ends_when`, or `success`) is last,
       whatever the others do, and runs to the end of the demo.
    3. A subtask ends at the LAST time its predicate happens before the next subtask ends:
       a person who drops the cube and grasps it again ends the grasp at the second grasp,
       so the carry that follows starts with the cube in hand.
    4. A subtask that ends on `grasped(X)` whose grasp never happens in a demo, where the hand
       does touch X for MIN_RUN steps, ends on `touching(hand, X)` instead (`grasp_fallbacks`):
       a person opens a door by pressing the lever with an open hand. The reason says so, and
       `AnnotatedDemo.ended_by` records it, so that generation replays the segment as recorded
       (gripper open) and treats nothing in it as held.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from demofactory.errors import SpecError, UserError
from demofactory.generators.predicates import HAND, Predicate, parse_predicate
from demofactory.generators.records import AnnotatedDemo, SeedDemo
from demofactory.generators.skills import event_steps, paused_steps, relative_positions, skill_start
from demofactory.simulation.fixtures import infer_fixture_poses
from demofactory.simulation.scene import Scene
from demofactory.specs.adapters import SKILL_MARGIN

MIN_RUN = 3  # steps a predicate must hold in a row to count (20 Hz: 0.15 s)
FINISH_TAIL = 15  # steps kept after the task is first done (the hand lets go and clears)
OTHER_TRAVEL = 0.02  # metres: an unrelated body moved this far was being handled, not nudged


def annotate_demo(scene: Scene, demo: SeedDemo) -> AnnotatedDemo:
    """Replay `demo` in `scene` and find the order of its subtasks and where each one ends."""
    spec = scene.spec
    if demo.states.shape[1] != scene.state_size:
        raise UserError(
            f"{demo.source}: data/{demo.name}: state size {demo.states.shape[1]} does not match "
            f"the {spec.task.env} model built from {spec.path.name} ({scene.state_size}); "
            f"is this a demo of another task?"
        )
    predicates = subtask_predicates(spec.subtasks)
    count = demo.length
    eef = np.empty((count, 4, 4))
    objects = {name: np.empty((count, 4, 4)) for name in spec.objects}
    holds = np.zeros((count, len(predicates)), dtype=bool)
    free = np.empty((count, len(scene.free_bodies), 3))
    touch = np.zeros((count, len(spec.subtasks)), dtype=bool)  # hand (or what it holds) on ref
    fingers = np.empty((count, len(scene._gripper_qpos)))
    scene.reset(demo.fixture_poses)
    if demo.fixture_poses is None and scene.has_redrawn_fixtures:
        # a human demo of a Door-like task: the hand tells where it was
        infer_fixture_poses(scene, demo)
    fixtures = scene.fixture_poses()
    for t, state in enumerate(demo.states):
        scene.set_state(state)
        scene.gripper_closed = bool(demo.actions[t, -1] * scene.gripper_sign > 0)
        if t == 0:
            scene.mark_start()
        eef[t] = scene.eef_pose()
        for name in objects:
            objects[name][t] = scene.object_pose(name)
        holds[t] = [scene.holds(p) for p in predicates]
        free[t] = scene.data.xpos[scene.free_bodies]
        touch[t] = hand_contacts(scene, [s.object for s in spec.subtasks])
        fingers[t] = scene.data.qpos[scene._gripper_qpos]
    scene.gripper_closed = None
    ended_by = grasp_fallbacks(scene, demo, predicates, holds)
    labels = [text or str(p) for text, p in zip(ended_by, predicates, strict=True)]
    try:
        order, ends, reasons = segment_demo(demo, holds, labels, finishing_index(spec.subtasks))
    except UserError as err:
        if demo.env_name and not spec.task.env.startswith(demo.env_name):
            raise UserError(
                f"{err} (the demo was recorded in {demo.env_name}, "
                f"the spec's env is {spec.task.env})"
            ) from None
        raise
    reasons = tuple(
        f"{p} never holds: the hand pushes it; ends where {reason}" if text else reason
        for text, p, reason in zip(ended_by, predicates, reasons, strict=True)
    )
    involved = [
        {scene.bodies[o] for o in (s.object, *predicates[i].all_objects())}
        for i, s in enumerate(spec.subtasks)
    ]
    starts = segment_starts(order, ends, involved, scene.free_bodies, free)
    gripper = demo.actions[:, -1].astype(np.float64)
    skills, skill_reasons = skill_windows(
        spec, demo, order, starts, ends, eef, objects, touch, gripper
    )
    skill_ends = tuple(
        s.skill.window[1] if s.skill and s.skill.window else 0 for s in spec.subtasks
    )
    paused = paused_steps(eef, gripper, fingers, free)
    return AnnotatedDemo(
        demo=demo,
        eef_poses=eef,
        object_poses=objects,
        gripper=demo.actions[:, -1].astype(np.float64),
        subtask_ends=ends,
        order=order,
        end_reasons=reasons,
        fixture_poses=fixtures,
        holds=holds,
        subtask_starts=starts,
        skill_starts=skills,
        skill_ends=skill_ends if any(skill_ends) else (),
        skill_reasons=skill_reasons,
        paused=paused,
        ended_by=ended_by if any(ended_by) else (),
    )


def grasp_fallbacks(
    scene: Scene, demo: SeedDemo, predicates: Sequence[Predicate], holds: np.ndarray
) -> tuple[str, ...]:
    """Per subtask: `touching(hand, X)` where its `grasped(X)` never happens in this demo and
    that contact does (then `holds` takes the contact's column, in place), else "".

    A grasp needs a closed hand; a person who presses a door's lever with the open hand and
    drags the door by friction never closes it, and refusing the demo would refuse what they
    did. The demo's states are replayed again only for such subtasks (the poses as set).
    """
    ended_by = [""] * len(predicates)
    for index, predicate in enumerate(predicates):
        if predicate.name != "grasped" or run_starts(holds[:, index]).size:
            continue
        fallback = parse_predicate(f"touching({HAND}, {predicate.objects[0]})")
        touching = np.zeros(demo.length, dtype=bool)
        for t, state in enumerate(demo.states):
            scene.set_state(state)
            touching[t] = scene.holds(fallback)
        if run_starts(touching).size:
            holds[:, index] = touching
            ended_by[index] = str(fallback)
    return tuple(ended_by)


def hand_contacts(scene: Scene, names: Sequence[str]) -> list[bool]:
    """Per name: the hand touches that object (a body below it included: a door's handle), or
    touches an object that touches it (carried)."""
    n = scene.data.ncon
    g1 = scene.data.contact.geom1[:n].tolist()
    g2 = scene.data.contact.geom2[:n].tolist()
    hand = scene.hand_geoms()
    # An articulated object is worked through its parts: the door through its handle.
    geoms = {name: scene._collision_geoms_under(scene.bodies[name]) for name in set(names)}
    touched = {b for a, b in zip(g1, g2, strict=True) if a in hand}
    touched |= {a for a, b in zip(g1, g2, strict=True) if b in hand}
    carried = [g for name, gs in geoms.items() if gs & touched for g in gs]
    reach = touched | {
        o for a, b in zip(g1, g2, strict=True) for c, o in ((a, b), (b, a)) if c in carried
    }
    return [bool(geoms[name] & reach) for name in names]


def skill_windows(
    spec, demo: SeedDemo, order, starts, ends, eef, objects, touch, gripper
) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """Per subtask (spec index): where its skill window opens, and why
    (`demofactory.generators.skills`).

    A window given in the spec (`subtasks[i].skill.window`) must lie inside the segment.
    """
    skills, reasons = [0] * len(ends), [""] * len(ends)
    for position, index in enumerate(order):
        start = starts[index] if starts else (0 if position == 0 else ends[order[position - 1]])
        end = ends[index]
        sub = spec.subtasks[index]
        window = sub.skill.window if sub.skill else None
        if window is not None:
            if not start <= window[0] < end or window[1] > end:
                raise SpecError(
                    spec.path,
                    f"subtasks[{index}].skill.window",
                    f"[{window[0]}, {window[1]}) lies outside the subtask's segment "
                    f"[{start}, {end}) in {demo.label} (expected a window inside it; "
                    "factory annotate shows the segments)",
                )
            skills[index], reasons[index] = window[0], "given in the spec"
            continue
        margin = sub.skill.margin if sub.skill else SKILL_MARGIN
        rel = relative_positions(eef, objects[sub.object])
        skills[index] = skill_start(rel, touch[:, index], gripper, start, end, margin)
        events = event_steps(touch[:, index], gripper, start, end)
        what = (
            f"last contact or gripper event at step {int(events[-1])}"
            if events.size
            else ("no contact or gripper event: the segment's end")
        )
        reasons[index] = f"{what}; the hand within {margin:g} m of it from here"
    return tuple(skills), tuple(reasons)


def segment_starts(
    order: Sequence[int],
    ends: Sequence[int],
    involved: Sequence[set[int]],
    bodies: Sequence[int],
    xpos: np.ndarray,
) -> tuple[int, ...]:
    """Where each subtask's segment starts: at the previous end, or once the person is done with
    other things.

    A body of no concern to this subtask or the one before it (the other nut, in a one-nut task
    seeded by a two-nut demo) that travels more than OTHER_TRAVEL m inside the segment means the
    person was still busy with it: the segment starts once it has stopped for good, so the steps
    spent on it are not replayed relative to this subtask's object. xpos: [T, len(bodies), 3].
    """
    starts, previous_end = [0] * len(ends), 0
    for position, index in enumerate(order):
        start, end = previous_end, ends[index]
        concern = involved[index] | (involved[order[position - 1]] if position else set())
        for column, body in enumerate(bodies):
            if body in concern or end - start < 2:
                continue
            # across the table: falling or settling is not handling
            path = xpos[start:end, column, :2]
            if np.linalg.norm(path - path[0], axis=1).max() > OTHER_TRAVEL:
                moving = np.flatnonzero(np.linalg.norm(np.diff(path, axis=0), axis=1) > 1e-3)
                start = max(start, min(start + int(moving[-1]) + 1, end - 1))
        starts[index] = start
        previous_end = end
    return tuple(starts)


def subtask_predicates(subtasks) -> list[Predicate]:
    """Each subtask's end predicate; the one without `ends_when` ends at the task's success."""
    return [parse_predicate(s.ends_when or "success") for s in subtasks]


def finishing_index(subtasks) -> int | None:
    """The subtask that ends at the task's success (last in every demo), if the spec has one."""
    found = [i for i, s in enumerate(subtasks) if s.ends_when in (None, "success")]
    return found[0] if found else None


def run_starts(held: np.ndarray, min_run: int = MIN_RUN) -> np.ndarray:
    """Steps at which `held` starts to be true for at least `min_run` steps (or to the end)."""
    padded = np.concatenate([[False], held, [False]])
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    starts, stops = edges[::2], edges[1::2]
    return starts[(stops - starts >= min_run) | (stops == len(held))]


def segment_demo(
    demo: SeedDemo, holds: np.ndarray, labels: Sequence[str], finishing: int | None
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[str, ...]]:
    """This demo's subtask order, the end step of each subtask (spec index) and why it ends there.

    holds: [T, K] each subtask's predicate per step. finishing: the subtask that ends at the
    task's success (last, runs to the demo's end), or None (then the last in order does).
    """
    count = holds.shape[1]
    runs = [run_starts(holds[:, i]) for i in range(count)]
    order, firsts, start = [], [], 0
    pending = [i for i in range(count) if i != finishing]
    while pending:
        happen = {i: int(r[r > start][0]) for i in pending if (r := runs[i])[r > start].size}
        if not happen and len(pending) == 1 and finishing is None and holds[-1, pending[0]]:
            # the last one: held all along and at the end, it runs to the end
            happen = {pending[0]: demo.length}
        if not happen:
            _never(demo, pending[0], labels[pending[0]], start)
        chosen = min(pending, key=lambda i: (happen.get(i, demo.length + 1), i))
        order.append(chosen)
        firsts.append(happen[chosen])
        start = happen[chosen]
        pending.remove(chosen)
    if finishing is not None:
        if not runs[finishing].size and not holds[-1, finishing]:
            raise UserError(
                f"{demo.source}: data/{demo.name}: the task is never done in this demo "
                f"({labels[finishing]} never holds); is it a demo of this task?"
            )
        order.append(finishing)
    ends, reasons = [0] * count, [""] * count
    start = 0
    for position, index in enumerate(order):
        if position == len(order) - 1:
            after = firsts[-1] if firsts else 0
            done = (
                runs[index][runs[index] > after] if index == finishing else np.array([], dtype=int)
            )
            # the task is done: a short tail lets the hand settle; the rest is not this task
            if done.size:
                ends[index] = min(demo.length, int(done[0]) + FINISH_TAIL)
                reasons[index] = (
                    f"the task is done ({labels[index]} from step {int(done[0])}), "
                    f"then {FINISH_TAIL} steps"
                )
            else:
                ends[index] = demo.length
                reasons[index] = f"last: runs to the end of the demo ({labels[index]})"
            break
        if position + 1 < len(firsts):
            limit = firsts[position + 1]
        else:  # next is the finishing subtask: up to where the task is done, after this one
            done = runs[finishing] if finishing is not None else np.array([], dtype=int)
            later = done[done > firsts[position]]
            limit = int(later[0]) if later.size else demo.length
        candidates = runs[index][(runs[index] > start) & (runs[index] < limit)]
        # cannot happen with the limits above; a clear error if it ever does
        if not candidates.size:
            _never(demo, index, labels[index], start)
        end = int(candidates[-1]) + 1
        times = len(candidates)
        again = f", the last of {times} times before the next subtask ended" if times > 1 else ""
        reasons[index] = f"{labels[index]} holds from step {end - 1}{again}"
        ends[index] = end
        start = end
    return tuple(order), tuple(ends), tuple(reasons)


def _never(demo: SeedDemo, index: int, label: str, start: int):
    raise UserError(
        f"{demo.source}: data/{demo.name}: subtask {index} never ends: {label} does not hold "
        f"for {MIN_RUN} steps after step {start} of {demo.length}; "
        "check the spec's objects and subtasks"
    )
