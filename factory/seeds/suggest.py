"""What a demo shows: the objects the hand handles, in order, and how each handling ends.

`factory annotate --suggest` (`demofactory.seeds.suggest_spec`) turns this into a spec fragment:

    a scene whose objects are the model's candidates (`candidate_bodies`): free bodies, bodies a
    non-robot hinge or slide joint moves, and every other body with collision geoms (a bin, a
    peg: where a released object may end up)
      ──► trace_demo: replay the states; per step grasped(X) and touching(hand, X) per movable
          X, body positions, joint positions, the task's success                 (DemoTrace)
      ──► interactions: a grasp (held >= MIN_RUN steps, the object moved) or a push (touched,
          never held, the object moved), in time order; brushes and nudges are dropped, and a
          re-grasp with nothing in between is one handling                     (Interaction)
      ──► demo_subtasks: per handling "reach X" (grasped / touching), then where it ended:
          the released object's resting place (inside, on_peg, on_top, else near what it was
          brought to: held at rest, and not where the handling began) or the joint it moved
          (opened); the last ends at the task's success. Every predicate proposed is evaluated
          on the replayed states (`Scene.holds`) before it is proposed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import mujoco
import numpy as np
from demofactory.generators.predicates import parse_predicate
from demofactory.generators.records import SeedDemo
from demofactory.robots.support import ROBOT_PARTS
from demofactory.seeds.annotate import MIN_RUN, run_starts
from demofactory.simulation.fixtures import infer_fixture_poses
from demofactory.simulation.scene import Scene

GRASP_TRAVEL = 0.01  # metres: a held object moved this far was handled (not pinched in place)
PUSH_TRAVEL = 0.02  # metres: a touched, unheld object moved this far was pushed (not brushed)
JOINT_TRAVEL = {"hinge": 0.05, "slide": 0.01}  # rad, m: a joint moved this far was worked
WALLS = 0.01  # metres: walls rising this far above a floor make a container (a bin, a bowl)
OPENED_SHARE = 0.8  # an intermediate joint end: opened(X, this share of how far it went)
RESTING = ("inside", "on_peg", "on_top")  # where a released object may be, most telling first
# near(X, Y, d), when none of those holds: X ended within NEAR_MAX m of Y, NEAR_GAIN m nearer
# than where the handling began; d leaves NEAR_MARGIN m to spare over the demo's distance
NEAR_MAX, NEAR_GAIN, NEAR_MARGIN = 0.12, 0.05, 0.02


@dataclass(frozen=True)
class Candidates:
    """The model's bodies a suggestion may name, by object name (`names`: -> body name)."""

    names: dict[str, str]
    free: tuple[str, ...]  # free-joint bodies: things to grasp, push, stack
    articulated: tuple[str, ...]  # moved by a hinge or slide joint (a door, its handle, a lever)
    # articulated -> the articulated objects whose joints move it, its own first, then outward
    carriers: dict[str, tuple[str, ...]] = field(default_factory=dict)
    joint_kind: dict[str, str] = field(default_factory=dict)  # articulated -> hinge or slide

    @property
    def movable(self) -> tuple[str, ...]:
        return (*self.free, *self.articulated)


def candidate_bodies(model: mujoco.MjModel, named: dict[str, str]) -> Candidates:
    """Every non-robot body with collision geoms, named (`named`: the spec's own names first)."""
    by_body = {body: name for name, body in named.items()}
    names, free, articulated, kinds, joints = dict(named), [], [], {}, {}
    for b in range(1, model.nbody):
        body = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, b) or ""
        if _root_name(model, b).startswith(ROBOT_PARTS) or not _has_collision(model, b):
            continue
        name = by_body.get(body) or _unique(object_name(body), names, body)
        names[name] = body
        joint = _moving_joint(model, b)
        if joint is None:
            continue
        if model.jnt_type[joint] == mujoco.mjtJoint.mjJNT_FREE:
            free.append(name)
        else:
            articulated.append(name)
            hinge = model.jnt_type[joint] == mujoco.mjtJoint.mjJNT_HINGE
            kinds[name], joints[name] = ("hinge" if hinge else "slide"), joint
    carriers = {}
    for name in articulated:  # the joints above it: its own, then its ancestors' (dedup'd)
        b = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, names[name])
        chain = []
        while (joint := _moving_joint(model, b)) is not None:
            owner = next((n for n in articulated if joints[n] == joint), None)
            if owner is not None and owner not in chain:
                chain.append(owner)
            b = int(model.body_parentid[model.jnt_bodyid[joint]])
        carriers[name] = tuple(chain)
    return Candidates(names, tuple(free), tuple(articulated), carriers, kinds)


def object_name(body: str) -> str:
    """A spec object name for a body: Milk_main -> milk, SquareNut_main -> square_nut,
    cubeA_main -> cubeA, Door_latch -> latch, Door_door -> door, bin2 -> bin2."""
    prefix, _, part = body.partition("_")
    if part in ("", "main", "root"):
        return _snake(prefix or body)
    if _snake(part) == _snake(prefix):
        return _snake(prefix)
    return _snake(part)


def _snake(text: str) -> str:
    # Only a capitalised name is CamelCase (SquareNut); cubeA keeps its spelling.
    text = re.sub(r"[^A-Za-z0-9_]", "_", text)
    if text[:1].isupper():
        text = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", text).lower()
    return text if re.match(r"^[A-Za-z_]", text) else f"body_{text}"


def _unique(name: str, taken: dict[str, str], body: str) -> str:
    if name not in taken and name != "hand":  # `hand` is touching's gripper
        return name
    fallback = _snake(body)
    return fallback if fallback not in taken and fallback != "hand" else f"{fallback}_{len(taken)}"


def _root_name(model: mujoco.MjModel, body: int) -> str:
    while model.body_parentid[body] != 0:
        body = int(model.body_parentid[body])
    return mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, body) or ""


def _has_collision(model: mujoco.MjModel, body: int) -> bool:
    geoms = np.flatnonzero(model.geom_bodyid == body)
    return any(model.geom_contype[g] or model.geom_conaffinity[g] for g in geoms)


def _moving_joint(model: mujoco.MjModel, body: int) -> int | None:
    """The joint that moves `body`: its own or its nearest ancestor's (None: static)."""
    while body > 0:
        if model.body_jntnum[body]:
            return int(model.body_jntadr[body])
        body = int(model.body_parentid[body])
    return None


@dataclass(frozen=True)
class DemoTrace:
    """One demo replayed: per step [T] what the suggestion reads (names: `Candidates`)."""

    demo: SeedDemo
    grasped: dict[str, np.ndarray]  # movable -> [T] bool, grasped(X)
    touched: dict[str, np.ndarray]  # movable -> [T] bool, touching(hand, X)
    position: dict[str, np.ndarray]  # every candidate -> [T, 3] body position, world, m
    joint: dict[str, np.ndarray]  # articulated -> [T] joint position, rad or m
    success: np.ndarray  # [T] bool, the task's success


def trace_demo(scene: Scene, demo: SeedDemo, candidates: Candidates) -> DemoTrace:
    """Replay `demo`'s states in `scene` (whose objects are `candidates.names`)."""
    start_scene(scene, demo)
    movable = candidates.movable
    grasp = [parse_predicate(f"grasped({n})") for n in movable]
    touch = [parse_predicate(f"touching(hand, {n})") for n in movable]
    count = demo.length
    held, touched = np.zeros((count, len(movable)), bool), np.zeros((count, len(movable)), bool)
    position = {n: np.empty((count, 3)) for n in candidates.names}
    joint = {n: np.empty(count) for n in candidates.articulated}
    success = np.zeros(count, bool)
    for t in range(count):
        set_step(scene, demo, t)
        held[t] = [scene.holds(p) for p in grasp]
        touched[t] = [scene.holds(p) for p in touch]
        for name, bid in scene.bodies.items():
            position[name][t] = scene.data.xpos[bid]
        for name in joint:
            joint[name][t] = scene.joint_position(name)
        success[t] = scene.success()
    scene.gripper_closed = None
    return DemoTrace(
        demo=demo,
        grasped={n: held[:, i] for i, n in enumerate(movable)},
        touched={n: touched[:, i] for i, n in enumerate(movable)},
        position=position,
        joint=joint,
        success=success,
    )


def start_scene(scene: Scene, demo: SeedDemo) -> None:
    """Reset for `demo` as annotation does: fixtures as recorded, or inferred from the hand."""
    scene.reset(demo.fixture_poses)
    if demo.fixture_poses is None and scene.has_redrawn_fixtures:
        infer_fixture_poses(scene, demo)


def set_step(scene: Scene, demo: SeedDemo, t: int) -> None:
    """Restore step `t` of `demo` with its gripper command; step 0 is the start (`opened`)."""
    scene.set_state(demo.states[t])
    scene.gripper_closed = bool(demo.actions[t, -1] * scene.gripper_sign > 0)
    if t == 0:
        scene.mark_start()


@dataclass(frozen=True)
class Interaction:
    """The hand handling one object: grasping (and carrying) it, or pushing it."""

    object: str
    kind: str  # "grasp" or "push"
    start: int  # first step held or touched
    end: int  # one past the last step held or touched
    settled: int  # one past the last step that counts: the next handling's start, or the end
    released: int  # one past the last step held (a push: `end`)
    travel: float  # metres the object moved from where it was at `start` (free objects)
    joints: dict[str, float] = field(default_factory=dict)  # carrier -> joint travel, rad or m


def interactions(trace: DemoTrace, candidates: Candidates) -> list[Interaction]:
    """The demo's handlings in time order (see the module docstring)."""
    runs = []  # (start, end, object, held)
    for name in candidates.movable:
        for held, column in ((True, trace.grasped[name]), (False, trace.touched[name])):
            runs += [(s, e, name, held) for s, e in _runs(column)]
    done = run_starts(trace.success)
    if done.size:  # what the hand touches once the task is done is not part of it
        runs = [r for r in runs if r[0] < done[0]]
    runs.sort()
    groups: list[list] = []  # consecutive runs on one object
    for run in runs:
        if groups and groups[-1][0][2] == run[2]:
            groups[-1].append(run)
        else:
            groups.append([run])
    length = trace.demo.length
    held = [(r[0], r[1], r[2]) for r in runs if r[3]]
    kept = []
    for i, group in enumerate(groups):
        until = groups[i + 1][0][0] if i + 1 < len(groups) else length
        item = _measure(group, until, trace, candidates)
        if item.kind == "push" and _while_holding(item, held):
            continue  # knocked with something in hand: a bump on the way, not a push
        if _worked(item, candidates):
            kept.append(group)
    merged: list[list] = []  # a brush dropped between two handlings of one object: one handling
    for group in kept:
        if merged and merged[-1][0][2] == group[0][2]:
            merged[-1] = merged[-1] + group
        else:
            merged.append(group)
    return [
        _measure(g, merged[i + 1][0][0] if i + 1 < len(merged) else length, trace, candidates)
        for i, g in enumerate(merged)
    ]


def _while_holding(item: Interaction, held: list[tuple[int, int, str]]) -> bool:
    """The hand held another object during some of `item`."""
    return any(s < item.end and item.start < e and name != item.object for s, e, name in held)


def _runs(held: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) of each stretch of `held` at least MIN_RUN steps long (or at the end)."""
    padded = np.concatenate([[False], held, [False]])
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    return [
        (int(s), int(e))
        for s, e in zip(edges[::2], edges[1::2], strict=True)
        if e - s >= MIN_RUN or e == len(held)
    ]


def _measure(group: list, until: int, trace: DemoTrace, candidates: Candidates) -> Interaction:
    """How far the object (or the joints it hangs on) moved from the group's start until
    `until`: a pushed object slides on, a released one falls, until the next handling."""
    name = group[0][2]
    start, end = group[0][0], max(r[1] for r in group)
    kind = "grasp" if any(r[3] for r in group) else "push"
    path = trace.position[name][start:until]
    travel = float(np.linalg.norm(path - path[0], axis=1).max())
    joints = {}
    for carrier in candidates.carriers.get(name, ()):
        q = trace.joint[carrier][start:until]
        joints[carrier] = float(q[np.argmax(np.abs(q - q[0]))] - q[0])
    released = max((r[1] for r in group if r[3]), default=end)
    return Interaction(name, kind, start, end, until, released, travel, joints)


def _worked(item: Interaction, candidates: Candidates) -> bool:
    if any(abs(v) >= JOINT_TRAVEL[candidates.joint_kind[j]] for j, v in item.joints.items()):
        return True
    if item.object in candidates.articulated:
        return False  # a body on a joint travels with it: only its joints say it was worked
    return item.travel >= (GRASP_TRAVEL if item.kind == "grasp" else PUSH_TRAVEL)


@dataclass(frozen=True)
class DemoSubtask:
    """A subtask as one demo shows it: the spec entry, what was seen, and where."""

    object: str
    ends_when: str | None  # None: the task's success
    end_offset: tuple[int, int]
    seen: str  # what the demo shows, with steps, for the fragment's comments
    step: int  # where its end first holds (for the task's success: where that does)


def demo_subtasks(
    scene: Scene, trace: DemoTrace, candidates: Candidates, found: list[Interaction]
) -> list[DemoSubtask]:
    """Two subtasks per handling: reach it (ends grasped / touching), then finish it (ends where
    the object ended up, or at the task's success for the last one)."""
    out: list[DemoSubtask] = []
    done = run_starts(trace.success)
    for k, item in enumerate(found):
        out.append(_reach(item, trace))
        last = k == len(found) - 1
        finish = [t for t in done if t > item.start]
        resting = _resting_place(scene, trace, candidates, item) if not _on_joint(item) else None
        reference = resting[1] if resting else _moved_carrier(item, candidates) or item.object
        what = _what_moved(item, resting, candidates)
        if last and finish:
            seen = f"{what}; the task's success from step {finish[0]}"
            out.append(DemoSubtask(reference, None, (0, 0), seen, int(finish[0])))
            break
        ends, step, why = _finish(scene, trace, candidates, item, resting)
        if last:
            why += "; the task's success never holds after it: is the demo done?"
        seen = f"{what}; {why.removeprefix('; ')}" if why.strip("; ") else what
        out.append(DemoSubtask(reference, ends, (0, 0), seen, step))
    return out


def _reach(item: Interaction, trace: DemoTrace) -> DemoSubtask:
    name = item.object
    if item.kind == "grasp":
        column = trace.grasped[name][item.start : item.end]
        first = item.start + int(run_starts(column)[0])
        seen = f"reach {name} and grasp it (both pads on it, gripper closed) from step {first}"
        return DemoSubtask(name, f"grasped({name})", (0, 3), seen, first)
    column = trace.touched[name][item.start : item.end]
    first = item.start + int(run_starts(column)[0])
    seen = f"reach {name}: the hand touches it from step {first}, never grasping it"
    return DemoSubtask(name, f"touching(hand, {name})", (0, 3), seen, first)


def _on_joint(item: Interaction) -> bool:
    return bool(item.joints)


def _moved_carrier(item: Interaction, candidates: Candidates) -> str | None:
    """The outermost joint-carried object that the handling moved (a door, turned by its
    handle), else None."""
    moved = [j for j, v in item.joints.items() if abs(v) >= JOINT_TRAVEL[candidates.joint_kind[j]]]
    return moved[-1] if moved else None


def _what_moved(
    item: Interaction, resting: tuple[str, str, int] | None, candidates: Candidates
) -> str:
    verb = "carry" if item.kind == "grasp" else "push"
    if item.joints:
        units = {"hinge": "rad", "slide": "m"}
        parts = [
            f"{j}'s {candidates.joint_kind[j]} moves {v:+.2f} {units[candidates.joint_kind[j]]}"
            for j, v in item.joints.items()
        ]
    else:
        parts = [f"{verb} {item.object} (it moves {item.travel:.2f} m)"]
    if item.kind == "grasp" and item.released >= item.settled:
        parts.append("held to the end")
    elif item.kind == "grasp":
        parts.append(f"let go at step {item.released}")
    else:
        parts.append(f"the hand leaves it at step {item.end}")
    if resting is not None:
        parts.append(f"{resting[0]} from step {resting[2]}")
    return ", ".join(parts)


def _finish(
    scene: Scene,
    trace: DemoTrace,
    candidates: Candidates,
    item: Interaction,
    resting: tuple[str, str, int] | None,
) -> tuple[str, int, str]:
    """(ends_when, the step it first holds, why) for a handling that is not the task's end."""
    name = item.object
    let_go = f"not(grasped({name}))" if item.kind == "grasp" else f"not(touching(hand, {name}))"
    if resting is not None:
        relation, _, step = resting
        text = f"all({relation}, {let_go})" if item.kind == "grasp" else relation
        return text, step, ""
    carrier = _moved_carrier(item, candidates)
    if carrier is not None:
        amount = math.floor(abs(item.joints[carrier]) * OPENED_SHARE * 100) / 100
        text = f"opened({carrier}, {amount:g})"
        step = _first_run(scene, trace, text, item.start, item.settled)
        if step is not None:
            return text, step, f"{text} from step {step}"
    step = _first_run(scene, trace, let_go, item.released - 1, item.settled)
    if step is None:
        step = item.released
    return let_go, step, f"nothing found under or around it: it ends once let go ({let_go})"


def _first_run(scene: Scene, trace: DemoTrace, text: str, lo: int, hi: int) -> int | None:
    """The first step in [lo, hi) from which `text` holds MIN_RUN steps (Scene.holds)."""
    predicate = parse_predicate(text)
    set_step(scene, trace.demo, 0)
    held = np.zeros(max(hi - lo, 0), bool)
    for i, t in enumerate(range(lo, hi)):
        set_step(scene, trace.demo, t)
        held[i] = scene.holds(predicate)
    scene.gripper_closed = None
    starts = run_starts(held)
    return lo + int(starts[0]) if starts.size else None


def _resting_place(
    scene: Scene, trace: DemoTrace, candidates: Candidates, item: Interaction
) -> tuple[str, str, int] | None:
    """(relation, other object, first step) where the released object came to rest: inside a
    container, on a peg, on top of another object, else near what it was brought to; held
    MIN_RUN steps once let go, and not where the handling began (it made it so). None: on the
    table, or nowhere a predicate names."""
    name = item.object
    options = [
        (kind, other)
        for other in candidates.names
        if other != name and not _below(scene, other, name)
        for kind in RESTING
        if kind != "inside" or scene.cavity_depth(other) >= WALLS
    ]
    predicates = [parse_predicate(f"{kind}({name}, {other})") for kind, other in options]
    first = item.released if item.kind == "grasp" else item.start
    steps = range(first, item.settled)
    if not steps:
        return None
    set_step(scene, trace.demo, 0)
    set_step(scene, trace.demo, item.start)
    # What it stood on or in when the hand came (the table, the bin it started in) is no
    # destination, and a relation that held already is not the handling's doing.
    resting_on = {
        other
        for other in candidates.names
        if other != name and scene.holds(f"contact({name}, {other})")
    }
    before = np.array(
        [
            other in resting_on or scene.holds(p)
            for p, (_, other) in zip(predicates, options, strict=True)
        ],
        bool,
    )
    holds = np.zeros((len(steps), len(predicates)), bool)
    for i, t in enumerate(steps):
        set_step(scene, trace.demo, t)
        holds[i] = [not b and scene.holds(p) for p, b in zip(predicates, before, strict=True)]
    scene.gripper_closed = None
    best = None
    for j, (kind, other) in enumerate(options):
        starts = run_starts(holds[:, j])
        if not starts.size:
            continue
        rank = (not holds[-1, j], RESTING.index(kind), _distance(trace, name, other, steps[-1]))
        if best is None or rank < best[0]:
            best = (rank, (f"{kind}({name}, {other})", other, first + int(starts[0])))
    if best is not None:
        return best[1]
    return _near(scene, trace, candidates, item, resting_on, steps)


def _near(scene, trace, candidates, item: Interaction, resting_on: set[str], steps: range):
    """(near(X, other, d), other, first step): `other` is what the object was brought to (a
    goal it was pushed to), when nothing holds it in or on anything; d spares NEAR_MARGIN."""
    name, last = item.object, steps[-1]
    found = []
    for other in candidates.names:
        if other == name or other in resting_on or _below(scene, other, name):
            continue
        before, after = (_distance(trace, name, other, t) for t in (item.start, last))
        if after < NEAR_MAX and before - after > NEAR_GAIN:
            found.append((after, other))
    if not found:
        return None
    after, other = min(found)
    radius = math.ceil((after + NEAR_MARGIN) * 100) / 100
    relation = f"near({name}, {other}, {radius:g})"
    step = _first_run(scene, trace, relation, steps[0], last + 1)
    return None if step is None else (relation, other, step)


def _below(scene: Scene, other: str, name: str) -> bool:
    """`other` is `name`'s own body or hangs below it (a part of the same object)."""
    body, root = scene.bodies[other], scene.bodies[name]
    while body > 0 and body != root:
        body = int(scene.model.body_parentid[body])
    return body == root


def _distance(trace: DemoTrace, a: str, b: str, t: int) -> float:
    return float(np.linalg.norm(trace.position[a][t] - trace.position[b][t]))
