"""Predicates that end subtasks and decide success, written in specs as text.

    grasped(cubeA)            the gripper's finger pads both touch the object
    lifted(cube, 0.04)        the object is at least 0.04 m above where the episode started it
    on_top(cubeA, cubeB)      a rests on b: a is above b, they touch, a is not held
    near(a, b, 0.05)          the object centres are closer than 0.05 m
    contact(a, b)             any collision geom of a touches one of b
    inside(a, b)              a's centre lies within the bounding box of b's geoms (a bin, a peg)
    success                   the robosuite env's own success check

Parsing is pure; evaluation lives in `factory.sim`, which owns the simulator.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class PredicateKind:
    objects: int  # how many object arguments
    params: tuple[tuple[str, float], ...]  # (name, default) of numeric arguments, in order


PREDICATE_KINDS: dict[str, PredicateKind] = {
    "grasped": PredicateKind(1, ()),
    "lifted": PredicateKind(1, (("height", 0.04),)),
    "on_top": PredicateKind(2, ()),
    "near": PredicateKind(2, (("distance", 0.05),)),
    "contact": PredicateKind(2, ()),
    "inside": PredicateKind(2, ()),
    "success": PredicateKind(0, ()),
}

_CALL = re.compile(r"^\s*([a-z_]+)\s*(?:\((.*)\))?\s*$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Predicate:
    """A parsed predicate: `name(objects..., params...)`. Objects are spec object names."""

    name: str
    objects: tuple[str, ...]
    params: tuple[float, ...]

    def __str__(self) -> str:
        args = [*self.objects, *(f"{p:g}" for p in self.params)]
        return f"{self.name}({', '.join(args)})" if args else self.name


def parse_predicate(text: str) -> Predicate:
    """Parse `grasped(cubeA)`-style text; raise ValueError saying what was expected."""
    match = _CALL.match(text or "")
    if not match:
        raise ValueError(f"expected a predicate like 'grasped(cubeA)', got {text!r}")
    name, arg_text = match.group(1), match.group(2)
    if name not in PREDICATE_KINDS:
        raise ValueError(f"unknown predicate {name!r} (expected one of: {', '.join(PREDICATE_KINDS)})")
    kind = PREDICATE_KINDS[name]
    args = [a.strip() for a in arg_text.split(",")] if arg_text and arg_text.strip() else []
    usage = _usage(name, kind)
    if not kind.objects <= len(args) <= kind.objects + len(kind.params):
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
    return Predicate(name, objects, params)


def _usage(name: str, kind: PredicateKind) -> str:
    args = [f"object{i + 1}" for i in range(kind.objects)] + [f"{p}={d:g}" for p, d in kind.params]
    return f"{name}({', '.join(args)})" if args else name
