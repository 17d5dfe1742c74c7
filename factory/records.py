"""Plain records exchanged between stages: see `generators.records`.

The generators produce and consume them, and a library imports nothing of `factory`, so they
live in `generators/`; the names stay importable from here.
"""

from __future__ import annotations

from generators.records import AnnotatedDemo, Attempt, SeedDemo

__all__ = ["AnnotatedDemo", "Attempt", "SeedDemo"]
