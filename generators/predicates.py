"""Predicates that end subtasks and decide success, written in specs as text.

    grasped(cubeA)            both finger pads touch the object (and, in a demo, the gripper
                              is closing)
    lifted(cube, 0.04)        the object is at least 0.04 m above where the episode started it
    on_top(cubeA, cubeB)      a rests on b: a is above b, they touch, a is not held
    near(a, b, 0.05)          the object centres are closer than 0.05 m
    contact(a, b)             any collision geom of a touches one of b
    touching(hand, handle)    a collision geom of one is within 3 mm of one of the other (or
                              in contact); either may be `hand`, the robot's gripper (palm, fingers,
                              pads): a push, a press, a hook, with no grasp
    inside(a, bin)            a's centre is in the container's cavity: above its floor, within
                              its walls
    on_peg(nut, peg, 0.03)    a's centre is within 0.03 m of the peg's axis and below the peg's top
    opened(door, 0.3)         the object's joint has moved at least 0.3 (rad or m) from where
                              it started: the "joint moved by" predicate (a door swung, a lever
                              pressed, a drawer pulled), whatever moved it
    joint(handle, 0.5, 3.2)   the object's joint position lies in [0.5, 3.2] (rad or m)
    success                   the task's success check (the spec's `task.success`, else robosuite's)
    all(p, q, ...)            every one of the predicates holds
    any(p, q, ...)            at least one holds
    not(p)                    p does not hold

`hand` is a reserved name, not a spec object: only `touching` takes it, and a spec may not name
an object `hand`.

Parsing is pure; evaluation belongs to the scene (`demofactory.generators.scene_api.Scene.holds`;
the
robosuite one is `demofactory.simulation.scene.Scene`), which owns the simulator.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

HAND = "hand"  # the robot's gripper, as an argument of `touching`


@dataclass(frozen=True)
class PredicateKind:
    objects: int  # how many object arguments
    params: tuple[tuple[str, float], ...]  # (name, default) of numeric arguments, in order
    required: int = 0  # how many of the numeric arguments must be given (no default used)
    hand: bool = False  # whether an object argument may be HAND, the robot's gripper


PREDICATE_KINDS: dict[str, PredicateKind] = {
    "grasped": PredicateKind(1, ()),
    "lifted": PredicateKind(1, (("height", 0.04),)),
    "on_top": PredicateKind(2, ()),
    "near": PredicateKind(2, (("distance", 0.05),)),
    "contact": PredicateKind(2, ()),
    "touching": PredicateKind(2, (), hand=True),
    "inside": PredicateKind(2, ()),
    "on_peg": PredicateKind(2, (("radius", 0.03),)),
    "opened": PredicateKind(1, (("amount", 0.3),)),
    "joint": PredicateKind(1, (("low", 0.0), ("high", 0.0)), required=2),
    "success": PredicateKind(0, ()),
}
# Compositions take predicates, not objects: all(p, ...) and any(p, ...) one or more, not(p) one.
COMBINATORS: dict[str, tuple[int, int | None]] = {"all": (1, None), "any": (1, None), "not": (1, 1)}

# The reserved object name of `touching`: the robot's gripper, not a spec object.
HAND = "hand"

_CALL = re.compile(r"^\s*([a-z_]+)\s*(?:\((.*)\))?\s*$", re.DOTALL)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Predicate:
    """A parsed predicate: `name(objects..., params...)`, or a composition `all/any/not(args...)`.

    Objects are spec object names; `args` holds the operands of a composition.
    """

    name: str
    objects: tuple[str, ...]
    params: tuple[float, ...]
    args: tuple[Predicate, ...] = ()

    def __str__(self) -> str:
        if self.name in COMBINATORS:
            return f"{self.name}({', '.join(str(a) for a in self.args)})"
        args = [*self.objects, *(f"{p:g}" for p in self.params)]
        return f"{self.name}({', '.join(args)})" if args else self.name

    def leaves(self) -> Iterator[Predicate]:
        """The simple predicates inside this one (itself when it is not a composition)."""
        if self.name in COMBINATORS:
            for arg in self.args:
                yield from arg.leaves()
        else:
            yield self

    def evaluate(self, leaf: Callable[[Predicate], bool]) -> bool:
        """Whether this predicate holds, `leaf` deciding each simple predicate inside it (a
        composition's operands in order, stopping as Python's all/any do)."""
        if self.name == "all":
            return all(arg.evaluate(leaf) for arg in self.args)
        if self.name == "any":
            return any(arg.evaluate(leaf) for arg in self.args)
        if self.name == "not":
            return not self.args[0].evaluate(leaf)
        return leaf(self)

    def all_objects(self) -> set[str]:
        """Every spec object name this predicate refers to, compositions included (not HAND:
        the robot's gripper is no spec object)."""
        return {obj for leaf in self.leaves() for obj in leaf.objects if obj != HAND}

    def mentions(self, kind: str) -> bool:
        return any(leaf.name == kind for leaf in self.leaves())


MAX_NESTING = 32  # parentheses deep: far past any real task, far inside Python's recursion limit


def parse_predicate(text: str) -> Predicate:
    """Parse `grasped(cubeA)`-style text; raise ValueError saying what was expected."""
    deepest = _nesting(text) if isinstance(text, str) else 0
    if deepest > MAX_NESTING:  # checked before the (recursive) parse: a RecursionError otherwise
        raise ValueError(
            f"nested {deepest} parentheses deep; expected at most {MAX_NESTING} "
            "(e.g. and(grasped(cube), not(lifted(cube))))"
        )
    return _parse(text)


def _nesting(text: str) -> int:
    depth = deepest = 0
    for char in text:
        depth += (char == "(") - (char == ")")
        deepest = max(deepest, depth)
    return deepest


def _parse(text: str) -> Predicate:
    match = _CALL.match(text or "")
    if not match:
        raise ValueError(f"expected a predicate like 'grasped(cubeA)', got {text!r}")
    name, arg_text = match.group(1), match.group(2)
    if name in COMBINATORS:
        return _parse_combination(name, arg_text, text)
    if name not in PREDICATE_KINDS:
        known = [*PREDICATE_KINDS, *COMBINATORS]
        raise ValueError(f"unknown predicate {name!r} (expected one of: {', '.join(known)})")
    kind = PREDICATE_KINDS[name]
    args = [a.strip() for a in arg_text.split(",")] if arg_text and arg_text.strip() else []
    usage = _usage(name, kind)
    if not kind.objects + kind.required <= len(args) <= kind.objects + len(kind.params):
        raise ValueError(f"{name} takes {usage}, got {text.strip()!r}")
    objects = tuple(args[: kind.objects])
    try:
        given = [float(a) for a in args[kind.objects :]]
    except ValueError:
        raise ValueError(f"{name} takes {usage}, got {text.strip()!r}") from None
    # An object must be a name and a parameter a finite number: `grasped(a)(b)` or
    # `lifted(cube, nan)` would otherwise parse and then never hold.
    if not all(_NAME.match(o) for o in objects) or not all(math.isfinite(g) for g in given):
        raise ValueError(f"{name} takes {usage}, got {text.strip()!r}")
    defaults = [default for _, default in kind.params]
    params = tuple(given + defaults[len(given) :])
    if HAND in objects and not kind.hand:
        takers = ", ".join(n for n, k in PREDICATE_KINDS.items() if k.hand)
        raise ValueError(
            f"{name} takes {usage}, got {text.strip()!r}: {HAND!r} (the robot's gripper) is an "
            f"argument of {takers} only, e.g. touching(hand, handle)"
        )
    if kind.hand and len(set(objects)) < len(objects):
        raise ValueError(f"{name} takes two different things, got {text.strip()!r}")
    if name == "joint" and params[0] > params[1]:
        raise ValueError(
            f"joint takes joint(object, low, high) with low <= high, got {text.strip()!r}"
        )
    return Predicate(name, objects, params)


def _parse_combination(name: str, arg_text: str | None, text: str) -> Predicate:
    lowest, highest = COMBINATORS[name]
    parts = _split_top_level(arg_text or "")
    usage = f"{name}(predicate)" if highest == 1 else f"{name}(predicate, predicate, ...)"
    if parts is None or not lowest <= len(parts) <= (highest or len(parts)):
        raise ValueError(f"{name} takes {usage}, got {text.strip()!r}")
    return Predicate(name, (), (), tuple(_parse(part) for part in parts))


def _split_top_level(text: str) -> list[str] | None:
    """Split at commas outside parentheses; None when the parentheses do not balance."""
    parts, depth, current = [], 0, []
    for char in text:
        depth += (char == "(") - (char == ")")
        if depth < 0:
            return None
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth != 0:
        return None
    parts.append("".join(current))
    return [p for p in (p.strip() for p in parts) if p] if any(p.strip() for p in parts) else []


def _usage(name: str, kind: PredicateKind) -> str:
    params = [p if i < kind.required else f"{p}={d:g}" for i, (p, d) in enumerate(kind.params)]
    either = f" or {HAND}" if kind.hand else ""
    args = [f"object{i + 1}{either}" for i in range(kind.objects)] + params
    return f"{name}({', '.join(args)})" if args else name
