"""Writes mug.obj (the visual mesh) and mug_hull.obj (its convex collision hull) beside this file.

    python scene_specs/assets/make_mug.py

A mug 6 cm across and 8 cm tall with a 4 mm wall, a floor and a handle on +x, origin at its
centre (so a grasp "at the object" holds it at mid height). Units: metres. The hull is the body's
closed cylinder: MuJoCo collides meshes as convex hulls, so the opening and the handle are looks.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

RADIUS, HEIGHT, WALL, SIDES = 0.03, 0.08, 0.004, 32
HANDLE_RADIUS, HANDLE_TUBE, HANDLE_STEPS, TUBE_SIDES = 0.022, 0.005, 16, 8


def _ring(radius: float, z: float, sides: int = SIDES) -> np.ndarray:
    angles = np.linspace(0.0, 2 * np.pi, sides, endpoint=False)
    return np.stack([radius * np.cos(angles), radius * np.sin(angles), np.full(sides, z)], axis=1)


def _band(faces: list, a: int, b: int, n: int) -> None:
    """Quads (as two triangles) between ring a and ring b of n vertices each (1-based offsets)."""
    for i in range(n):
        j = (i + 1) % n
        faces.append((a + i, a + j, b + j))
        faces.append((a + i, b + j, b + i))


def mug() -> tuple[np.ndarray, list]:
    lo, hi = -HEIGHT / 2, HEIGHT / 2
    rings = [
        _ring(RADIUS, lo),  # outer bottom
        _ring(RADIUS, hi),  # outer top
        _ring(RADIUS - WALL, hi),  # inner top (rim)
        _ring(RADIUS - WALL, lo + WALL),  # inner floor
    ]
    verts = list(np.concatenate(rings))
    faces: list = []
    for k in range(3):
        _band(faces, 1 + k * SIDES, 1 + (k + 1) * SIDES, SIDES)
    centres = {"bottom": len(verts) + 1, "floor": len(verts) + 2}
    verts += [np.array([0.0, 0.0, lo]), np.array([0.0, 0.0, lo + WALL])]
    for i in range(SIDES):
        j = (i + 1) % SIDES
        faces.append((centres["bottom"], 1 + j, 1 + i))
        faces.append((centres["floor"], 1 + 3 * SIDES + i, 1 + 3 * SIDES + j))
    # The handle: half a torus in the x-z plane, its ends in the mug's wall on +x.
    start = len(verts) + 1
    for step in range(HANDLE_STEPS + 1):
        phi = -np.pi / 2 + np.pi * step / HANDLE_STEPS
        centre = np.array(
            [RADIUS - 0.004 + HANDLE_RADIUS * np.cos(phi), 0.0, HANDLE_RADIUS * np.sin(phi)]
        )
        normal = np.array([np.cos(phi), 0.0, np.sin(phi)])
        for t in range(TUBE_SIDES):
            theta = 2 * np.pi * t / TUBE_SIDES
            verts.append(
                centre
                + HANDLE_TUBE * (np.cos(theta) * normal + np.sin(theta) * np.array([0, 1.0, 0]))
            )
    for step in range(HANDLE_STEPS):
        _band(faces, start + step * TUBE_SIDES, start + (step + 1) * TUBE_SIDES, TUBE_SIDES)
    return np.array(verts), faces


def hull() -> tuple[np.ndarray, list]:
    verts = np.concatenate([_ring(RADIUS, -HEIGHT / 2, 16), _ring(RADIUS, HEIGHT / 2, 16)])
    faces: list = []
    _band(faces, 1, 17, 16)
    for i in range(1, 15):
        faces.append((1, 1 + i + 1, 1 + i))
        faces.append((17, 17 + i, 17 + i + 1))
    return verts, faces


def write_obj(path: Path, verts: np.ndarray, faces: list) -> None:
    lines = [f"# {path.name}: written by make_mug.py"]
    lines += [f"v {x:.5f} {y:.5f} {z:.5f}" for x, y, z in verts]
    lines += [f"f {a} {b} {c}" for a, b, c in faces]
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    here = Path(__file__).parent
    write_obj(here / "mug.obj", *mug())
    write_obj(here / "mug_hull.obj", *hull())
