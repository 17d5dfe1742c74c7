"""Predicates that end subtasks and decide success: see `generators.predicates`.

The parser is pure and the generators need it, so it lives in the generators library (which
imports nothing of `factory`); the names stay importable from here.
"""

from __future__ import annotations

from generators.predicates import (
    COMBINATORS,
    HAND,
    PREDICATE_KINDS,
    Predicate,
    PredicateKind,
    parse_predicate,
)

__all__ = [
    "COMBINATORS",
    "HAND",
    "PREDICATE_KINDS",
    "Predicate",
    "PredicateKind",
    "parse_predicate",
]
