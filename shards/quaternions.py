"""Quaternion parts of a state layout, as the exports write them.

    a layout part named ``*quat*`` of size 4 (e.g. ``eef_quat_xyzw`` [3, 7))   quaternion_parts
    [T, D] values -> each quaternion flipped to the hemisphere of its predecessor
                     (q and -q are one rotation; a flip is a jump of ~2 a model must not see)
                                                                               make_continuous
    [T, D] values, layout -> the ``*_xyzw`` parts reordered scalar-first, renamed ``*_wxyz``
                     (GR00T's rotation transforms read quaternions scalar-first)  to_scalar_first

Hand-written (a few lines of numpy): no library at hand does the hemisphere walk on a layout.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Layout = Sequence[tuple[str, int]]


def quaternion_parts(layout: Layout) -> list[tuple[str, int, int]]:
    """(name, start, end) of each 4-wide part whose name says quaternion (``quat``)."""
    parts, start = [], 0
    for name, size in layout:
        if "quat" in name and size == 4:
            parts.append((name, start, start + size))
        start += size
    return parts


def make_continuous(values: np.ndarray, layout: Layout) -> np.ndarray:
    """A copy of [T, D] `values` whose quaternion parts never jump q -> -q between steps: each
    row is negated where its dot product with the (already fixed) row before is negative. The
    first row is kept; the rotations are unchanged."""
    out = np.array(values, copy=True)
    for _, start, end in quaternion_parts(layout):
        q = out[:, start:end]
        for t in range(1, len(q)):
            if float(np.dot(q[t], q[t - 1])) < 0.0:
                q[t] = -q[t]
    return out


def sign_flips(values: np.ndarray, layout: Layout) -> int:
    """Steps at which some quaternion part turns to the opposite hemisphere (dot < 0)."""
    flips = 0
    for _, start, end in quaternion_parts(layout):
        q = np.asarray(values[:, start:end], dtype=np.float64)
        flips += int(np.count_nonzero(np.einsum("ij,ij->i", q[1:], q[:-1]) < 0.0))
    return flips


def to_scalar_first(values: np.ndarray, layout: Layout) -> tuple[np.ndarray, list[list]]:
    """[T, D] `values` with each ``*xyzw`` quaternion part reordered to w, x, y, z, and the
    layout with those parts renamed ``*wxyz``; other parts as they are."""
    out = np.array(values, copy=True)
    renamed = []
    for name, size in layout:
        renamed.append([name, size])
    for name, start, end in quaternion_parts(layout):
        if name.endswith("xyzw"):
            out[:, start:end] = values[:, [start + 3, start, start + 1, start + 2]]
            for part in renamed:
                if part[0] == name:
                    part[0] = name[: -len("xyzw")] + "wxyz"
    return out, renamed
