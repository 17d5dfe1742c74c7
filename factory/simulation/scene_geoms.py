"""The geoms of an `mjvScene` as one numpy array, for per-frame work on every geom.

View culling and the static layer look at every geom of the scene each frame (type, object,
position, colour) and switch some off. Through MuJoCo's Python bindings each field of each geom
is a wrapper call (~0.3-1 µs; a 90-geom Stack scene cost ~0.7 ms a frame for each of the two,
a tenth of an 84 px frame). The scene's geoms are a C array of `mjvGeom`, so a numpy structured
view over that memory reads and writes them all at once.

Hand-written because the bindings offer no array access to `mjvScene.geoms`. The layout is
`mjvGeom` of MuJoCo's `mjvisualize.h` (the same from 3.3 to 3.9, the pinned range); it is
checked against the bindings, field by field, the first time a process uses it, and
`geom_view` returns None where it does not match (the callers then draw every geom, as
`render.detail: full` does).
"""

from __future__ import annotations

import ctypes

import mujoco
import numpy as np

# mjvGeom (mjvisualize.h): 8 ints, size, pos, mat, rgba, 4 floats, label, 2 floats, 1 byte;
# 233 bytes, padded to 236 (4-byte alignment)
GEOM_DTYPE = np.dtype(
    {
        "names": [
            "type",
            "dataid",
            "objtype",
            "objid",
            "category",
            "matid",
            "texcoord",
            "segid",
            "size",
            "pos",
            "mat",
            "rgba",
            "emission",
            "specular",
            "shininess",
            "reflectance",
            "label",
            "camdist",
            "modelrbound",
            "transparent",
        ],  # fmt: skip
        "formats": [
            "<i4",
            "<i4",
            "<i4",
            "<i4",
            "<i4",
            "<i4",
            "<i4",
            "<i4",
            ("<f4", 3),
            ("<f4", 3),
            ("<f4", 9),
            ("<f4", 4),
            "<f4",
            "<f4",
            "<f4",
            "<f4",
            "S100",
            "<f4",
            "<f4",
            "u1",
        ],  # fmt: skip
        "offsets": [
            0,
            4,
            8,
            12,
            16,
            20,
            24,
            28,
            32,
            44,
            56,
            92,
            108,
            112,
            116,
            120,
            124,
            224,
            228,
            232,
        ],  # fmt: skip
        "itemsize": 236,
    }
)
_SIZE_OFFSET = GEOM_DTYPE.fields["size"][1]
_layout_ok: bool | None = None  # checked once per process


def _address(array: np.ndarray) -> int:
    return int(array.__array_interface__["data"][0])


def geom_view(scene: mujoco.MjvScene) -> np.ndarray | None:
    """[ngeom] structured array (GEOM_DTYPE) over the scene's geoms, writable: setting
    `view["type"][i] = mjGEOM_NONE` is `scene.geoms[i].type = mjGEOM_NONE`. Valid while `scene`
    lives and until its next update changes `ngeom`; None if the layout does not match."""
    global _layout_ok
    geoms = scene.geoms
    if len(geoms) < 2 or scene.ngeom == 0:
        return None
    base = _address(geoms[0].size) - _SIZE_OFFSET
    if _address(geoms[1].size) - _SIZE_OFFSET - base != GEOM_DTYPE.itemsize:
        return None
    buffer = (ctypes.c_char * (GEOM_DTYPE.itemsize * scene.ngeom)).from_address(base)
    view = np.frombuffer(buffer, GEOM_DTYPE)
    if _layout_ok is None:
        _layout_ok = _matches(view, geoms)
    return view if _layout_ok else None


def _matches(view: np.ndarray, geoms) -> bool:
    """Every field of every geom, read through the view, equals the bindings' value; and a
    write through the view is seen by the bindings."""
    for i, geom in enumerate(geoms[: len(view)]):
        row = view[i]
        for name in GEOM_DTYPE.names:
            if name == "label":
                if row[name].decode(errors="replace") != geom.label:
                    return False
            else:
                ours, theirs = np.asarray(row[name]).ravel(), np.ravel(getattr(geom, name))
                if not np.array_equal(ours, theirs, equal_nan=True):
                    return False
    kind = int(view["type"][0])
    view["type"][0] = kind + 1
    seen = geoms[0].type == kind + 1
    view["type"][0] = kind
    return bool(seen)
