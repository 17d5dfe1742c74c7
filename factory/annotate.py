"""Annotate seed demos: replay their states in the spec's env and record what generation needs.

    SeedDemo ──► restore state t ──► eef pose, object poses, gripper command, predicates
             ──► AnnotatedDemo (per subtask: the first step at which its predicate holds)
"""

from __future__ import annotations

import numpy as np

from factory.errors import UserError
from factory.predicates import parse_predicate
from factory.records import AnnotatedDemo, SeedDemo
from factory.sim import Scene


def annotate_demo(scene: Scene, demo: SeedDemo) -> AnnotatedDemo:
    """Replay `demo` in `scene` and find where each of the spec's subtasks ends."""
    spec = scene.spec
    if demo.states.shape[1] != scene.state_size:
        raise UserError(
            f"{demo.source}: data/{demo.name}: state size {demo.states.shape[1]} does not match "
            f"the {spec.task.env} model built from {spec.path.name} ({scene.state_size}); "
            f"is this a demo of another task?"
        )
    predicates = [parse_predicate(s.ends_when) if s.ends_when else None for s in spec.subtasks]
    count = demo.length
    eef = np.empty((count, 4, 4))
    objects = {name: np.empty((count, 4, 4)) for name in spec.objects}
    holds = np.zeros((count, len(predicates)), dtype=bool)
    scene.env.reset()
    for t, state in enumerate(demo.states):
        scene.set_state(state)
        if t == 0:
            scene.mark_start()
        eef[t] = scene.eef_pose()
        for name in objects:
            objects[name][t] = scene.object_pose(name)
        holds[t] = [p is not None and scene.holds(p) for p in predicates]
    gripper = demo.actions[:, -1].astype(np.float64)
    order, ends = subtask_order_and_ends(demo, holds, predicates, gripper)
    return AnnotatedDemo(
        demo=demo, eef_poses=eef, object_poses=objects, gripper=gripper, subtask_ends=ends, order=order
    )


def gripper_events(gripper: np.ndarray) -> np.ndarray:
    """Steps at which the gripper command flips between open (< 0) and close (> 0)."""
    closed = gripper > 0
    return np.flatnonzero(closed[1:] != closed[:-1]) + 1


def subtask_order_and_ends(demo: SeedDemo, holds: np.ndarray, predicates, gripper: np.ndarray):
    """The order in which this demo does the subtasks, and where each one ends.

    When every subtask but the last has a predicate, the order is that in which the
    predicates first hold in the demo (a person may pick the bread before the cereal).
    Otherwise subtasks keep the spec's order, and one without a predicate ends at the
    next gripper open/close event. Each subtask ends at the first step after the
    previous end at which its predicate holds; the last one runs to the demo's end.
    Returns (order: subtask indices, ends: end step per subtask index).
    """
    count = len(predicates)
    order = list(range(count))
    if all(p is not None for p in predicates[:-1]):
        first = [int(np.argmax(holds[:, i])) if holds[:, i].any() else None for i in range(count)]
        for i, t in enumerate(first[:-1]):
            if t is None:
                _never(demo, i, predicates[i], 0)
        ranked = [i for i in range(count) if predicates[i] is not None and first[i] is not None]
        if predicates[-1] is not None and first[-1] is None:
            ranked = [i for i in ranked if i != count - 1]
        ranked.sort(key=lambda i: (first[i], i))
        order = ranked + [i for i in range(count) if i not in ranked]
    events = gripper_events(gripper)
    ends, start = [0] * count, 0
    for k, i in enumerate(order):
        if k == count - 1:
            end = demo.length
        elif predicates[i] is not None:
            hits = np.flatnonzero(holds[start:, i])
            if len(hits) == 0:
                _never(demo, i, predicates[i], start)
            end = start + int(hits[0]) + 1
        else:
            later = events[events > start]
            if len(later) == 0:
                raise UserError(
                    f"{demo.source}: data/{demo.name}: subtask {i} has no ends_when and the gripper "
                    f"does not open or close after step {start}; give it a predicate"
                )
            end = int(later[0])
        ends[i] = end
        start = end
    return tuple(order), tuple(ends)


def _never(demo: SeedDemo, index: int, predicate, start: int):
    raise UserError(
        f"{demo.source}: data/{demo.name}: subtask {index} never ends: {predicate} does not hold "
        f"after step {start} of {demo.length}; check the spec's objects and subtasks"
    )
