"""`factory annotate --suggest`: objects, subtasks and placement proposed from the demos alone.

    SPEC (task, seed demos; objects optional) or DEMO.hdf5 (the env from data.attrs["env"])
      ──► a scene whose objects are every candidate body
      (`demofactory.seeds.suggest.candidate_bodies`),
          built with the demos' robot
      ──► per demo: trace, interactions, subtasks (`demofactory.seeds.suggest`)
      ──► merged over demos: the subtasks every demo shows, in the first demo's order
      ──► placement: small offsets for the free objects named
      ──► checked: the spec with the fragment pasted in is annotated as `factory annotate`
          does (`resolve_spec`), and each demo's order must come out as suggested
      ──► Suggestion ──► `fragment_text`: YAML with comments saying what was seen, and where

What is suggested is what the demos show, by the predicates of `demofactory.generators.predicates`;
the
names are the bodies' (Milk_main: milk), or the spec's own where it names the body already.
"""

from __future__ import annotations

import math
import textwrap
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from demofactory.errors import SpecError, UserError
from demofactory.generators.predicates import parse_predicate
from demofactory.generators.records import SeedDemo
from demofactory.seeds.demos import load_seed_demos
from demofactory.seeds.resolve import resolve_spec
from demofactory.seeds.suggest import (
    Candidates,
    DemoSubtask,
    candidate_bodies,
    demo_subtasks,
    interactions,
    trace_demo,
)
from demofactory.simulation.scene import Scene, make_env
from demofactory.specs.scene import SCENE_ENV, fill_from_scene
from demofactory.specs.spec import SceneSpec, TaskSpec, load_raw_spec, validate_raw_spec
from pydantic import ValidationError

DEMO_SUFFIXES = (".hdf5", ".h5")
# Placement offsets (metres, radians) by what the demos do with an object: a grasped one ±3 cm,
# ±0.3 rad (NutAssembly's: 96 %); a pushed one less, a push's contact turns with the object
# (measured on a scripted push to a pad: 73 % at ±2 cm, ±0.1 rad, 37 % at ±3 cm, ±0.3 rad); a
# jointed fixture (a door, a lever) ±1 cm, ±0.1 rad (Door's: robosuite re-draws it about as much).
PLACEMENT = {"free": (0.03, 0.3), "pushed": (0.02, 0.1), "jointed": (0.01, 0.1)}
SEPARATION = 0.08  # metres at most between placed objects' centres (Stack's, PickPlace's)
PLACEHOLDER = "do the task the seed demos show"  # the demo form's instruction, to be rewritten


@dataclass(frozen=True)
class SuggestedSubtask:
    object: str
    ends_when: str | None
    end_offset: tuple[int, int]
    seen: tuple[str, ...]  # per demo: "demo_1: what it shows"


@dataclass
class Suggestion:
    """What `--suggest` proposes, and how it was found and checked."""

    source: Path  # the spec or demo file given
    raw: dict  # the spec as given (the demo form: one made from the file)
    demo_form: bool
    objects: dict[str, str]  # name -> body
    notes: dict[str, str]  # name -> what it is (free body, fixture, ...)
    subtasks: list[SuggestedSubtask]
    placement: dict  # raw YAML data: objects: {name: {x, y, yaw}}, min_separation
    demos: list[str] = field(default_factory=list)  # demo labels
    orders: dict[str, list[str]] = field(default_factory=dict)  # demo -> objects, as annotated
    left_out: list[str] = field(default_factory=list)  # what was left out, and why
    # Generation knobs for demos as people record them: the skill windows replayed and the way
    # between them planned, one retry per subtask (from the human demos here: Stack 100 % against
    # 93 % with the direct bridge, PickPlace's only possible way; NutAssembly 93 % with the retry).
    generation: dict = field(default_factory=lambda: {"transit": "plan", "subtask_retries": 1})
    # Where the check failed: `factory annotate` refuses the spec with the fragment pasted in,
    # or cuts a demo in another order than suggested. Empty: the fragment passed.
    problems: list[str] = field(default_factory=list)

    def spec_data(self) -> dict:
        """The spec as given with the fragment pasted in (raw YAML data)."""
        raw = {k: v for k, v in self.raw.items() if k not in ("objects", "subtasks", "placement")}
        raw["objects"] = dict(self.objects)
        raw["subtasks"] = [
            {"object": s.object, **({"ends_when": s.ends_when} if s.ends_when else {})}
            | ({"end_offset": list(s.end_offset)} if s.end_offset != (0, 0) else {})
            for s in self.subtasks
        ]
        raw["placement"] = self.placement
        raw["generation"] = {**self.raw.get("generation", {}), **self.generation}
        return raw


def suggest(path: Path) -> Suggestion:
    """Suggest objects, subtasks and placement for the spec (or demo file) at `path`."""
    path = Path(path)
    demo_form = path.suffix.lower() in DEMO_SUFFIXES
    raw = _demo_spec(path) if demo_form else _given_spec(path)
    demos = _seed_demos(raw, path)
    scene, candidates = _discovery_scene(raw, path, demos)
    per_demo, pushed = [], set()
    for demo in demos:
        if demo.states.shape[1] != scene.state_size:
            raise UserError(
                f"{demo.source}: data/{demo.name}: state size {demo.states.shape[1]} does not "
                f"match the {scene.spec.task.env} model ({scene.state_size}); is this a demo of "
                "another task?"
            )
        trace = trace_demo(scene, demo, candidates)
        found = interactions(trace, candidates)
        if not found:
            raise UserError(
                f"{demo.source}: data/{demo.name}: the hand never grasps, pushes or turns "
                "anything (no object moves with it); nothing to suggest"
            )
        per_demo.append((demo, demo_subtasks(scene, trace, candidates, found)))
        pushed |= {i.object for i in found if i.kind == "push"}
    subtasks, dropped = _merge(per_demo)
    used = _used_objects(subtasks, raw)
    objects = {n: candidates.names[n] for n in used}
    suggestion = Suggestion(
        source=path,
        raw=raw,
        demo_form=demo_form,
        objects=objects,
        notes={n: _note(n, candidates) for n in objects},
        subtasks=subtasks,
        placement=_placement(scene, demos[0], candidates, objects, pushed),
        demos=[d.label for d in demos],
        left_out=dropped,
    )
    _check(suggestion, per_demo, path)
    return suggestion


def _demo_spec(path: Path) -> dict:
    """A starting spec for a demo file alone: its env and robot, a horizon with room."""
    demos = load_seed_demos(path)
    env = demos[0].env_name
    if not env:
        raise UserError(
            f"{path}: data.attrs has no 'env' (nor robomimic's env_args): cannot tell the task; "
            "expected a spec naming task.env, e.g. factory annotate --suggest my_spec.yaml"
        )
    longest = max(d.length for d in demos)
    name = "".join(c if c.isalnum() or c in "_.-" else "_" for c in path.stem) or "suggested"
    return {
        "name": name,
        "seed": 0,
        "task": {
            "env": env,
            "robot": demos[0].robot,
            "controller": "OSC_POSE",
            "control_freq": 20,
            "horizon": int(math.ceil(longest * 1.5 / 100) * 100),
        },
        "seed_demos": [str(path)],
    }


def _given_spec(path: Path) -> dict:
    raw = fill_from_scene(load_raw_spec(path))  # a scene: section names task.env and objects
    try:
        TaskSpec.model_validate(raw.get("task"))
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in ("task", *first["loc"]))
        raise SpecError(path, where, first["msg"]) from None
    if not raw.get("seed_demos"):
        raise SpecError(path, "seed_demos", "no seed demos: --suggest reads them")
    return raw


def _seed_demos(raw: dict, path: Path) -> list[SeedDemo]:
    base = Path.cwd() if path.suffix.lower() in DEMO_SUFFIXES else path.resolve().parent
    demos = []
    for i, rel in enumerate(raw["seed_demos"]):
        file = (base / rel).resolve()
        if not file.is_file():
            raise SpecError(path, f"seed_demos[{i}]", f"file not found: {file}")
        demos += load_seed_demos(file)
    robots = sorted({d.robot for d in demos})
    if len(robots) > 1:
        raise UserError(
            f"{path}: the seed demos were recorded by {', '.join(robots)}; --suggest reads "
            "one robot's demos: give it a spec (or file) of one robot's"
        )
    return demos


def _discovery_scene(raw: dict, path: Path, demos: list[SeedDemo]):
    """A Scene naming every candidate body, built with the demos' robot (it never steps)."""
    from demofactory.simulation.scene_build import (
        env_kwargs,  # robosuite: only when a scene is built
    )

    task = {**raw["task"], "robot": demos[0].robot, "fast_control": False}
    task.pop("robots", None)
    base = {
        "name": raw.get("name", "suggested"),
        "seed": raw.get("seed", 0),
        "task": {k: v for k, v in task.items() if k != "success"},
        "instructions": [PLACEHOLDER],
        **({"scene": raw["scene"]} if "scene" in raw else {}),
    }
    named = dict(raw.get("objects") or {})
    if "scene" in raw:  # the scene names its objects: the probe is valid but for subtasks
        filled = fill_from_scene({**base, **({"objects": named} if named else {})})
        first = next(iter(filled.get("objects") or {"_": ""}))
        # A scene needs a success predicate; this one only builds the env, and any will do.
        task = {**filled["task"], "success": f"near({first}, {first}, 0)"}
        probe = _validated({**filled, "task": task, "subtasks": [{"object": first}]}, path)
        named = dict(probe.objects)
        env = make_env(probe.task, model_seed=probe.seed, **env_kwargs(probe))
    else:
        _check_env(task["env"], path)
        env = make_env(TaskSpec.model_validate(base["task"]), model_seed=base["seed"])
    candidates = candidate_bodies(env.sim.model._model, named)
    if not candidates.movable:
        raise UserError(f"{path}: the {task['env']} model has nothing the hand could move")
    success = raw["task"].get("success")
    if success:  # kept when every object it names is a candidate
        if parse_predicate(success).all_objects() <= set(candidates.names):
            base["task"]["success"] = success
    first = candidates.movable[0]
    spec = _validated({**base, "objects": candidates.names, "subtasks": [{"object": first}]}, path)
    return Scene(spec, env=env), candidates


def _check_env(env: str, path: Path) -> None:
    import robosuite

    if env == SCENE_ENV:
        raise UserError(
            f"{path}: recorded in a scene described by a spec (task.env {SCENE_ENV}); "
            "expected that spec: factory annotate --suggest SPEC"
        )
    if env not in robosuite.ALL_ENVIRONMENTS:
        known = ", ".join(sorted(robosuite.ALL_ENVIRONMENTS))
        raise SpecError(
            path, "task.env", f"unknown robosuite env {env!r} (expected one of: {known})"
        )


def _validated(raw: dict, path: Path) -> SceneSpec:
    """`raw` validated as `load_spec` does, its relative files taken from `path`'s folder."""
    return validate_raw_spec(raw, path)


def _merge(per_demo: list[tuple[SeedDemo, list[DemoSubtask]]]):
    """The subtasks every demo shows (by object and end), in the first demo's order, and one
    that ends at the task's success: relative to the object most demos finish at."""
    keyed = [(demo, _keys(subs), subs) for demo, subs in per_demo]
    ending = [{k for k in keys if k[0][1] is not None} for _, keys, _ in keyed]
    common = set.intersection(*ending)  # those ending at the task's success are merged below
    merged, dropped = [], []
    for key in keyed[0][1]:
        if key in common:
            merged.append(_joined(key[0], [(d, subs[keys.index(key)]) for d, keys, subs in keyed]))
    finals = [(d, subs[-1]) for d, _, subs in keyed if subs[-1].ends_when is None]
    if len(finals) == len(keyed):
        votes = Counter(sub.object for _, sub in finals)
        reference = max(votes, key=lambda o: (votes[o], -[s.object for _, s in finals].index(o)))
        merged.append(_joined((reference, None), finals))
        for demo, sub in finals:
            if sub.object != reference:
                dropped.append(
                    f"{demo.label}: finishes at {sub.object}, most demos at {reference}: {sub.seen}"
                )
    elif finals:
        dropped.append(
            "no subtask ends at the task's success: it holds after the last handling in "
            f"{len(finals)} of {len(keyed)} demos"
        )
    for demo, keys, subs in keyed:
        for key, sub in zip(keys, subs, strict=True):
            if key[0][1] is not None and key not in common:
                dropped.append(
                    f"{demo.label}: left out, not in every demo: {sub.object} "
                    f"({sub.ends_when}): {sub.seen}"
                )
    return merged, dropped


def _keys(subs: list[DemoSubtask]) -> list[tuple[tuple[str, str | None], int]]:
    """(object, ends_when) and how many times it came before in this demo."""
    seen: Counter = Counter()
    out = []
    for sub in subs:
        key = (sub.object, sub.ends_when)
        out.append((key, seen[key]))
        seen[key] += 1
    return out


def _joined(key: tuple[str, str | None], found: list[tuple[SeedDemo, DemoSubtask]]):
    first = found[0][1]
    seen = tuple(f"{demo.name}: {sub.seen}" for demo, sub in found)
    return SuggestedSubtask(key[0], key[1], first.end_offset, seen)


def _used_objects(subtasks: list[SuggestedSubtask], raw: dict) -> list[str]:
    """The objects the subtasks name, in the order they first do; then the spec's others."""
    used = []
    for sub in subtasks:
        names = [sub.object]
        if sub.ends_when:
            names += sorted(parse_predicate(sub.ends_when).all_objects())
        used += [n for n in names if n not in used]
    return used + [n for n in raw.get("objects") or {} if n not in used]


def _note(name: str, candidates: Candidates) -> str:
    if name in candidates.free:
        return "free body"
    if name in candidates.articulated:
        return f"on a {candidates.joint_kind[name]} joint"
    return "fixture"


def _placement(
    scene, demo: SeedDemo, candidates: Candidates, objects: dict[str, str], pushed: set[str]
) -> dict:
    """Offsets around the first demo's start (`PLACEMENT`): for each free object the fragment
    names, and for each jointed fixture (moved by its outermost named part); static fixtures
    (a bin, a peg) stay where the env puts them."""
    free = [n for n in objects if n in candidates.free]
    roots = {}
    for name in (n for n in objects if n in candidates.articulated):
        root, depth = _root(scene, name), len(candidates.carriers[name])
        if root not in roots or depth < len(candidates.carriers[roots[root]]):
            roots[root] = name  # one per fixture: each entry moves the whole fixture
    if not free and not roots:
        return {}
    kinds = {n: "pushed" if n in pushed else "free" for n in free}
    kinds.update({n: "jointed" for n in roots.values()})
    placement: dict = {"objects": {}}
    for name, kind in kinds.items():
        xy, yaw = PLACEMENT[kind]
        placement["objects"][name] = {"x": [-xy, xy], "y": [-xy, xy], "yaw": [-yaw, yaw]}
    if len(free) > 1:
        scene.set_state(demo.states[0])
        start = {n: scene.data.xpos[scene.bodies[n]][:2].copy() for n in free}
        nearest = min(
            float(np.linalg.norm(start[a] - start[b]))
            for i, a in enumerate(free)
            for b in free[i + 1 :]
        )
        placement["min_separation"] = round(min(SEPARATION, 0.9 * nearest), 3)
    return placement


def _root(scene, name: str) -> int:
    body = scene.bodies[name]
    while scene.model.body_parentid[body] != 0:
        body = int(scene.model.body_parentid[body])
    return body


def _check(suggestion: Suggestion, per_demo, path: Path) -> None:
    """Annotate the spec with the fragment pasted in, as `factory annotate` would; each demo's
    order must be the one suggested (a mismatch or an error becomes a warning)."""
    raw = suggestion.spec_data()
    for section in ("symmetry", "script", "physics", "appearance"):  # may name old objects
        raw.pop(section, None)
    raw["task"] = {**raw["task"], "fast_control": False}  # annotation never steps
    raw.setdefault("instructions", [PLACEHOLDER])
    if suggestion.demo_form:
        raw["seed_demos"] = [str(Path(d).resolve()) for d in raw["seed_demos"]]
    try:
        spec = _validated(raw, path)
        resolved = resolve_spec(spec)
    except UserError as err:
        suggestion.problems.append(f"factory annotate refuses the fragment: {err}")
        return
    keys = [(s.object, s.ends_when) for s in suggestion.subtasks]
    for annotated, (demo, subs) in zip(resolved.demos, per_demo, strict=True):
        got = [spec.subtasks[i].object for i in annotated.order]
        suggestion.orders[demo.label] = got
        expected = [s.object for s in subs if (s.object, s.ends_when) in keys]
        if got != expected:
            suggestion.problems.append(
                f"{demo.label}: factory annotate orders the subtasks {got}, not {expected}"
            )


def fragment_text(s: Suggestion, command: str) -> str:
    """The suggestion as YAML with comments: a fragment to paste, or a whole spec (demo form)."""
    head = f"Suggested by `{command}` from {len(s.demos)} demo(s): {', '.join(s.demos)}."
    lines = textwrap.wrap(head, 98, initial_indent="# ", subsequent_indent="#   ")
    if s.demo_form:
        lines.append("# A starting spec: rewrite the instructions, check it with factory annotate.")
    else:
        lines.append(
            "# Paste over the spec's objects:, subtasks: and placement: (merge generation:), then "
            "run factory annotate."
        )
    for text in (*(f"problem: {p}" for p in s.problems), *(f"note: {n}" for n in s.left_out)):
        lines += textwrap.wrap(text, 98, initial_indent="# ", subsequent_indent="#     ")
    if s.demo_form:
        task = s.raw["task"]
        lines += [
            f"name: {s.raw['name']}",
            "seed: 0",
            "task:",
            *(f"  {k}: {v}" for k, v in task.items()),
            f"seed_demos: [{s.raw['seed_demos'][0]}]   # as given: make it relative to this file",
        ]
    width = max(len(n) for n in s.objects) + 2
    lines.append("objects:")
    lines += [f"  {n + ':':<{width}} {b}   # {s.notes[n]}" for n, b in s.objects.items()]
    lines.append("subtasks:")
    for sub in s.subtasks:
        for seen in sub.seen:
            lines += textwrap.wrap(seen, 96, initial_indent="  # ", subsequent_indent="  #     ")
        lines.append(f"  - object: {sub.object}")
        if sub.ends_when:
            lines.append(f"    ends_when: {sub.ends_when}")
        else:
            lines.append("    # no ends_when: it ends at the task's success")
        if sub.end_offset != (0, 0):
            firm = "grasp" if (sub.ends_when or "").startswith("grasped") else "contact"
            offset = f"    end_offset: {list(sub.end_offset)}"
            lines.append(f"{offset}   # a few steps more: firm {firm}")
    if s.placement:
        lines.append("placement:")
        lines.append("  objects:   # offsets from where each starts in the first demo: m, m, rad")
        for name, box in s.placement["objects"].items():
            cells = ", ".join(f"{axis}: [{lo:g}, {hi:g}]" for axis, (lo, hi) in box.items())
            moves = "   # moves the fixture it is part of" if s.notes[name] != "free body" else ""
            lines.append(f"    {name}: {{{cells}}}{moves}")
        if "min_separation" in s.placement:
            lines.append(
                f"  min_separation: {s.placement['min_separation']:g}"
                "   # metres between their centres: they never start touching"
            )
    lines += [
        "generation:   # merge into the spec's generation: if it has one",
        f"  transit: {s.generation['transit']}   # replay the skill windows, plan the way between",
        f"  subtask_retries: {s.generation['subtask_retries']}   # a failed subtask tried again",
    ]
    if s.demo_form:
        lines += ["instructions:", f"  - {PLACEHOLDER}   # say what the demos do"]
    return "\n".join(lines) + "\n"
