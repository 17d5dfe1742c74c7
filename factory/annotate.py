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
    ends = _subtask_ends(demo, holds, predicates)
    gripper = demo.actions[:, -1].astype(np.float64)
    return AnnotatedDemo(demo=demo, eef_poses=eef, object_poses=objects, gripper=gripper, subtask_ends=ends)


def _subtask_ends(demo: SeedDemo, holds: np.ndarray, predicates) -> tuple[int, ...]:
    """Subtasks happen in spec order: each ends at the first step after the previous end
    at which its predicate holds; a subtask without a predicate ends with the demo."""
    ends, start = [], 0
    for i, predicate in enumerate(predicates):
        if predicate is None:
            ends.append(demo.length)
            start = demo.length
            continue
        hits = np.flatnonzero(holds[start:, i])
        if len(hits) == 0:
            raise UserError(
                f"{demo.source}: data/{demo.name}: subtask {i} never ends: {predicate} does not hold "
                f"after step {start} of {demo.length}; check the spec's objects and subtasks"
            )
        start = start + int(hits[0]) + 1
        ends.append(start)
    return tuple(ends)
