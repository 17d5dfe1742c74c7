"""`render.detail`: decimated copies of the visual meshes, drawn in place of the full ones.

    physics model (never changed) ──► drawn meshes: used by a geom of a drawn group (1, 2)
      ──► per mesh: a face budget (`auto`: from the cameras; `<n>`: n; `full`: none)
      ──► weld duplicate vertices, decimate (fast-simplification), cached on disk per
          (mesh bytes, budget, library version)                          decimate_mesh
      ──► a render model: the same XML compiled again with the decimated vertices, each
          put back into the physics model's mesh frame                   make_render_model
      ──► the GL context of every `mujoco.Renderer` is built from the render model, while
          the scene (poses, colours, cameras) still comes from the physics model and data

Physics never sees the render model: states, and so every episode's success, are the same
bit for bit whatever `render.detail` says. Only the GPU copies of the meshes differ, so a
mesh shared by a visual and a collision geom needs no duplicate (collision geoms, group 0,
are not drawn). Mesh ids, textures and every other asset keep their order, so the physics
model's scene indexes the render model's context exactly.

A mesh that cannot be decimated (degenerate, or collapsing to too few faces) is drawn at
full detail and counted (`DetailReport`, shown by `factory inspect`); so is a mesh whose
material is textured (decimation drops texture coordinates).

Why fast-simplification: a quadric edge-collapse decimator (Garland-Heckbert, the algorithm
of MeshLab's and Blender's decimate) as one small compiled wheel with numpy in and out, no
VTK/Qt/Open3D stack; 0.08 CPU-s takes a 14,824-face Panda link to 500 faces, normals included.
trimesh's decimation wraps it, and pymeshlab and open3d are 100+ MB for the same operation.
"""

from __future__ import annotations

import hashlib
import math
import os
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import mujoco
import numpy as np

# Geom groups the factory's renderer draws (MjvOption's defaults with group 0, collision, off).
DRAWN_GROUPS = (1, 2)
WELD_TOLERANCE = 1e-6  # metres: OBJ exports repeat a vertex per face; merged before decimating
MIN_RESULT_FACES = 8  # a decimation ending with fewer faces than this is a collapse: kept full
AUTO_MIN_FACES = 64  # `auto` never asks a mesh for fewer faces than this
# `auto`: faces per pixel of the mesh's mean projected area. By Cauchy's formula a convex body of
# surface S shows S/4 of area on average over the directions it is seen from (a sphere: pi r^2,
# its disc; a long or flat link: a quarter to a half of its bounding disc); a non-convex closed
# mesh shows less than S/4, and the figure is capped at the bounding disc. An open shell seen
# from both sides shows up to twice its S/4 (a flat sheet of area A: A/2). Most of the Panda's
# visual parts are such shells (their convex hulls have more area than they do), and the
# constant below was calibrated on them, so closed meshes get relatively more faces, not fewer.
# ~Half the faces face away. Calibrated with benchmarks/bench_render.py --detail on Stack
# at 84 px, agentview (the hardest camera and size), 40 states: 4 gave 31.7 dB, 6 34.6 dB, 7
# 35.8 dB, 8 36.8 dB, 12 39.6 dB; 8 keeps 1.8 dB above the 35 dB bar. (The first rule took the
# bounding disc for the area at 3 faces/px: 37.6 dB with 68,600 faces of moving meshes a frame
# against 49,200 now; the disc gave the long links 4x the faces of a sphere their size.)
AUTO_FACES_PER_PIXEL = 8.0
# `auto` sizes a mesh as if it were this much nearer than where it is when the renderer is made:
# the arm moves during an episode.
AUTO_NEAR_FACTOR = 0.7
AUTO_VIEW_MARGIN = 1.3  # times a camera's half-diagonal field of view: "out of view" beyond it
# A mesh of many small closed pieces stops short of its budget (the Panda's pedestal: 5,645 faces
# for 300, at any `agg`): drawn as decimated, counted in DetailReport.short_of_budget
BUDGET_SLACK = 1.25
# part of the cache key: change it when the steps of `simplify` change
ALGORITHM = "weld1e-6+fqmr-agg7+corner-normals"


def library_version() -> str:
    import fast_simplification

    return str(fast_simplification.__version__)


def cache_dir() -> Path:
    """Where decimated meshes are kept: $DEMOFACTORY_CACHE/meshes (default
    ~/.cache/demofactory/meshes), beside `demofactory.shards.remote`'s stores."""
    base = os.environ.get("DEMOFACTORY_CACHE") or Path.home() / ".cache" / "demofactory"
    return Path(base) / "meshes"


@dataclass(frozen=True)
class Decimated:
    """One mesh's decimation: vertices [V, 3] float64, faces [F, 3] int32 and unit vertex
    normals [V, 3] float64 in the mesh's frame, or `failed` (a reason) and no arrays."""

    vertices: np.ndarray | None
    faces: np.ndarray | None
    normals: np.ndarray | None = None
    failed: str = ""


@dataclass
class DetailReport:
    """What `render.detail` did to a model's drawn meshes (JSON-able via `to_json`); a
    renderer's report sums its cameras' (each camera has its own render model)."""

    detail: str
    meshes: int = 0  # meshes drawn (per camera)
    decimated: int = 0
    within_budget: int = 0  # already at or under their budget: drawn as they are
    short_of_budget: int = 0  # decimated, but to over BUDGET_SLACK times their budget
    kept_full: Counter = field(default_factory=Counter)  # reason -> meshes drawn at full detail
    faces_full: int = 0  # faces of the drawn meshes, full detail
    faces_drawn: int = 0  # faces of the same meshes as drawn

    def to_json(self) -> dict:
        return {
            "detail": self.detail,
            "meshes": self.meshes,
            "decimated": self.decimated,
            "within_budget": self.within_budget,
            "short_of_budget": self.short_of_budget,
            "kept_full": dict(sorted(self.kept_full.items())),
            "faces_full": self.faces_full,
            "faces_drawn": self.faces_drawn,
        }


def weld(vertices: np.ndarray, faces: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge vertices closer than WELD_TOLERANCE and drop faces that became degenerate."""
    keys = np.round(vertices / WELD_TOLERANCE).astype(np.int64)
    _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    faces = inverse.reshape(-1)[faces]
    keep = (
        (faces[:, 0] != faces[:, 1]) & (faces[:, 1] != faces[:, 2]) & (faces[:, 0] != faces[:, 2])
    )
    return vertices[first], faces[keep]


def simplify(
    vertices: np.ndarray, faces: np.ndarray, budget: int, normals: np.ndarray | None = None
) -> Decimated:
    """`faces` [F, 3] decimated to about `budget` faces (not cached; see `decimate_mesh`).

    normals: [F, 3, 3] the full mesh's normal at each face corner, or None (from the faces).
    The decimated corners borrow the full mesh's normals (`_corner_normals`): its shading,
    which a few hundred flat faces would otherwise lose.
    """
    import fast_simplification

    if not np.isfinite(vertices).all():
        return Decimated(None, None, None, "degenerate: non-finite vertices")
    welded, wfaces = weld(vertices.astype(np.float64), faces.astype(np.int64))
    if len(wfaces) == 0:
        return Decimated(None, None, None, "degenerate: no faces with area")
    extent = np.ptp(welded, axis=0)
    if np.count_nonzero(extent > WELD_TOLERANCE) < 2:
        return Decimated(None, None, None, "degenerate: no area")
    if len(wfaces) <= budget:
        wfaces = wfaces.astype(np.int32)
        return Decimated(welded, wfaces, _corner_normals(vertices, faces, normals, welded, wfaces))
    try:
        points, tris = fast_simplification.simplify(
            welded, wfaces.astype(np.int32), target_count=int(budget)
        )
    except Exception as err:  # the C++ decimator's own failure: this mesh is drawn in full
        return Decimated(None, None, None, f"degenerate: {type(err).__name__}")
    if len(tris) < MIN_RESULT_FACES:
        return Decimated(None, None, None, "too few faces after decimation")
    points = np.asarray(points, np.float64)
    tris = np.asarray(tris, np.int32)
    return Decimated(points, tris, _corner_normals(vertices, faces, normals, points, tris))


NORMAL_WEIGHT = 0.005  # metres a unit of normal difference weighs against distance


def _face_normals(vertices: np.ndarray, faces: np.ndarray) -> np.ndarray:
    tri = vertices[faces]
    return _unit(np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]))


def _corner_normals(
    vertices: np.ndarray,
    faces: np.ndarray,
    normals: np.ndarray | None,
    points: np.ndarray,
    tris: np.ndarray,
) -> np.ndarray:
    """[len(tris), 3, 3]: a normal per corner of the decimated faces, taken from the full mesh's
    corner nearest in (position, NORMAL_WEIGHT * normal): smooth surfaces keep their smooth
    shading and sharp edges stay sharp (the corner on the same side of the edge wins)."""
    from scipy.spatial import cKDTree

    if normals is None:  # no corner normals given: the full mesh's flat face normals
        normals = np.repeat(_face_normals(vertices, faces)[:, None], 3, axis=1)
    full = np.concatenate(
        [vertices[faces].reshape(-1, 3), NORMAL_WEIGHT * normals.reshape(-1, 3)], 1
    )
    flat = _face_normals(points, tris)  # [F', 3]
    query = np.concatenate(
        [points[tris].reshape(-1, 3), NORMAL_WEIGHT * np.repeat(flat, 3, axis=0)], 1
    )
    _, nearest = cKDTree(full).query(query)
    out = normals.reshape(-1, 3)[nearest]
    # a corner whose borrowed normal turns away from its face (> ~70 degrees) is shaded flat
    away = np.einsum("ij,ij->i", out, np.repeat(flat, 3, axis=0)) < 0.35
    out[away] = np.repeat(flat, 3, axis=0)[away]
    return out.reshape(-1, 3, 3)


def _unit(v: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(v, axis=1, keepdims=True)
    return np.divide(v, norm, out=np.zeros_like(v), where=norm > 0)


def decimate_mesh(
    vertices: np.ndarray,
    faces: np.ndarray,
    budget: int,
    cache: Path | None = None,
    normals: np.ndarray | None = None,
) -> Decimated:
    """`simplify`, cached in `cache` (default `cache_dir()`) per mesh bytes, budget and library.

    Writes go to a unique temporary file then `os.replace`, so Ray workers decimating the same
    mesh at once each leave a whole file (the last one wins; they are equal).
    """
    cache = cache_dir() if cache is None else cache
    digest = hashlib.sha256()
    parts = [np.ascontiguousarray(vertices, np.float64), np.ascontiguousarray(faces, np.int64)]
    if normals is not None:
        parts.append(np.ascontiguousarray(normals, np.float64))
    for part in parts:
        digest.update(part.tobytes())
    digest.update(f"|{budget}|{library_version()}|{ALGORITHM}".encode())
    path = cache / f"{digest.hexdigest()[:32]}.npz"
    try:
        with np.load(path) as found:
            failed = str(found["failed"])
            if failed:
                return Decimated(None, None, None, failed)
            return Decimated(found["vertices"], found["faces"], found["normals"])
    except (OSError, KeyError, ValueError):  # absent, or unreadable: decimate again
        pass
    result = simplify(vertices, faces, budget, normals)
    empty = np.zeros((0, 3))
    try:
        cache.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache, prefix=f".{path.stem}.", suffix=".tmp.npz")
        with os.fdopen(fd, "wb") as out:
            np.savez(
                out,
                vertices=empty if result.vertices is None else result.vertices,
                faces=empty.astype(np.int32) if result.faces is None else result.faces,
                normals=empty if result.normals is None else result.normals,
                failed=np.array(result.failed),
            )
        os.replace(tmp, path)
    except OSError:  # a read-only or full cache only costs the decimation next time
        pass
    return result


def drawn_meshes(model: mujoco.MjModel) -> dict[int, list[int]]:
    """mesh id -> the geoms of a drawn group (DRAWN_GROUPS) that use it."""
    users: dict[int, list[int]] = {}
    for g in range(model.ngeom):
        if (
            model.geom_type[g] == mujoco.mjtGeom.mjGEOM_MESH
            and int(model.geom_group[g]) in DRAWN_GROUPS
        ):
            users.setdefault(int(model.geom_dataid[g]), []).append(g)
    return users


def _textured(model: mujoco.MjModel, geoms: Sequence[int]) -> bool:
    for g in geoms:
        mat = int(model.geom_matid[g])
        if mat >= 0 and (model.mat_texid[mat] >= 0).any():
            return True
    return False


def auto_budgets(
    model: mujoco.MjModel, data: mujoco.MjData, cameras: Sequence[tuple[str, int, int]]
) -> dict[int, int]:
    """mesh id -> faces for `render.detail: auto`, from `cameras` [(name, width, height)].

    The rule: a camera of vertical field of view `fovy` at H pixels has a focal length of
    f = H / (2 tan(fovy / 2)) pixels; a mesh of surface S and bounding radius r at distance d
    (taken AUTO_NEAR_FACTOR nearer than in `data`, as the arm moves) shows on average
    A = min(S / 4, pi r^2) (f / d)^2 pixels (Cauchy's mean projected area, at most its
    bounding disc). Its budget is AUTO_FACES_PER_PIXEL * A faces (at least AUTO_MIN_FACES), the
    largest over the cameras. A mesh well outside a camera's view (AUTO_VIEW_MARGIN times its
    half-diagonal field of view, from `data`) asks that camera for AUTO_MIN_FACES only.
    """
    mujoco.mj_kinematics(model, data)
    mujoco.mj_camlight(model, data)
    budgets: dict[int, int] = {}
    for mesh, geoms in drawn_meshes(model).items():
        best = AUTO_MIN_FACES
        mean_area = mesh_surface(model, mesh) / 4
        for name, width, height in cameras:
            cam = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, name)
            if cam < 0:
                continue
            half = math.radians(float(model.cam_fovy[cam])) / 2
            focal = height / (2 * math.tan(half))
            half_diagonal = math.atan(math.hypot(width, height) / (2 * focal))
            rot = data.cam_xmat[cam].reshape(3, 3)
            for g in geoms:
                radius = float(model.geom_rbound[g])
                offset = rot.T @ (data.geom_xpos[g] - data.cam_xpos[cam])  # camera looks down -z
                dist = float(np.linalg.norm(offset))
                if dist > radius:
                    off_axis = math.atan2(math.hypot(offset[0], offset[1]), -offset[2])
                    if off_axis - math.asin(radius / dist) > AUTO_VIEW_MARGIN * half_diagonal:
                        continue  # out of this camera's view
                dist = max(dist * AUTO_NEAR_FACTOR, radius, 1e-3)
                area = min(mean_area, math.pi * radius * radius) * (focal / dist) ** 2
                best = max(best, math.ceil(AUTO_FACES_PER_PIXEL * area))
        budgets[mesh] = best
    return budgets


def mesh_surface(model: mujoco.MjModel, mesh: int) -> float:
    """The surface area of a compiled mesh, m^2."""
    v0, nv = int(model.mesh_vertadr[mesh]), int(model.mesh_vertnum[mesh])
    f0, nf = int(model.mesh_faceadr[mesh]), int(model.mesh_facenum[mesh])
    tri = np.asarray(model.mesh_vert[v0 : v0 + nv], np.float64)[model.mesh_face[f0 : f0 + nf]]
    cross = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    return float(0.5 * np.sqrt((cross * cross).sum(axis=1)).sum())


def budgets_for(
    detail: str | int,
    model: mujoco.MjModel,
    data: mujoco.MjData,
    cameras: Sequence[tuple[str, int, int]],
) -> dict[int, int] | None:
    """mesh id -> face budget for `render.detail` (None: `full`, nothing to decimate)."""
    if detail == "full":
        return None
    if detail == "auto":
        return auto_budgets(model, data, cameras)
    return {mesh: int(detail) for mesh in drawn_meshes(model)}


def _mesh_arrays(model: mujoco.MjModel, mesh: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A compiled mesh's vertices [V, 3], faces [F, 3] and corner normals [F, 3, 3]."""
    v0, nv = int(model.mesh_vertadr[mesh]), int(model.mesh_vertnum[mesh])
    f0, nf = int(model.mesh_faceadr[mesh]), int(model.mesh_facenum[mesh])
    n0 = int(model.mesh_normaladr[mesh])
    normals = model.mesh_normal[n0 + model.mesh_facenormal[f0 : f0 + nf]].astype(np.float64)
    return (
        model.mesh_vert[v0 : v0 + nv].astype(np.float64),
        model.mesh_face[f0 : f0 + nf].copy(),
        normals,
    )


def plan_meshes(
    model: mujoco.MjModel, budgets: Mapping[int, int], report: DetailReport, cache: Path | None
) -> dict[int, Decimated]:
    """mesh id -> its decimation, for the drawn meshes over budget that decimate; the rest are
    counted in `report` (within budget, or kept full with the reason)."""
    chosen: dict[int, Decimated] = {}
    users = drawn_meshes(model)
    for mesh, geoms in sorted(users.items()):
        faces_full = int(model.mesh_facenum[mesh])
        report.meshes += 1
        report.faces_full += faces_full
        budget = budgets.get(mesh)
        if budget is None or faces_full <= budget:
            report.within_budget += 1
            report.faces_drawn += faces_full
            continue
        if _textured(model, geoms):
            report.kept_full["textured"] += 1
            report.faces_drawn += faces_full
            continue
        vertices, faces, normals = _mesh_arrays(model, mesh)
        result = decimate_mesh(vertices, faces, budget, cache, normals)
        if result.failed:
            report.kept_full[result.failed] += 1
            report.faces_drawn += faces_full
            continue
        chosen[mesh] = result
        report.decimated += 1
        report.short_of_budget += len(result.faces) > BUDGET_SLACK * budget
        report.faces_drawn += len(result.faces)
    return chosen


def make_render_model(
    xml: str, model: mujoco.MjModel, chosen: Mapping[int, Decimated]
) -> mujoco.MjModel:
    """`xml` (the physics model's source) compiled with the meshes of `chosen` replaced; each
    replaced mesh's vertices and normals are put back into the physics model's mesh frame.

    Raises ValueError when the compiled model's meshes do not line up with `model`'s.
    """
    spec = mujoco.MjSpec.from_string(xml)
    meshes = list(spec.meshes)
    if len(meshes) != model.nmesh:
        raise ValueError(f"the XML has {len(meshes)} meshes, the model {model.nmesh}")
    for mesh, result in chosen.items():
        m = meshes[mesh]
        m.file = ""
        m.content_type = ""
        m.uservert = result.vertices.reshape(-1).tolist()
        m.userface = result.faces.reshape(-1).tolist()
        m.usernormal = result.normals.reshape(-1).tolist()  # one per face corner
        m.userfacenormal = list(range(3 * len(result.faces)))
        m.usertexcoord, m.userfacetexcoord = [], []
        m.scale = [1.0, 1.0, 1.0]
        m.refpos, m.refquat = [0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]
        m.inertia = mujoco.mjtMeshInertia.mjMESH_INERTIA_SHELL  # open surfaces compile too
    render = spec.compile()
    for mesh in range(model.nmesh):
        if mesh in chosen:
            _write_mesh(render, mesh, chosen[mesh])
        elif not (
            render.mesh_vertnum[mesh] == model.mesh_vertnum[mesh]
            and render.mesh_facenum[mesh] == model.mesh_facenum[mesh]
        ):
            name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_MESH, mesh)
            raise ValueError(f"mesh {name!r} compiles differently from the physics model's")
    render.tex_data[:] = model.tex_data  # textures as they are now (appearance may repaint)
    return render


def _write_mesh(render: mujoco.MjModel, mesh: int, result: Decimated) -> None:
    """Put `result` into the compiled render model as it is. The compiler re-centres a mesh on
    its own inertial frame and re-indexes its normals; the decimated arrays are already in the
    physics model's mesh frame, with one normal per face corner, so they overwrite both."""
    v0, nv = int(render.mesh_vertadr[mesh]), int(render.mesh_vertnum[mesh])
    f0, nf = int(render.mesh_faceadr[mesh]), int(render.mesh_facenum[mesh])
    n0, nn = int(render.mesh_normaladr[mesh]), int(render.mesh_normalnum[mesh])
    if nv != len(result.vertices) or nf != len(result.faces) or nn != 3 * nf:
        name = mujoco.mj_id2name(render, mujoco.mjtObj.mjOBJ_MESH, mesh)
        raise ValueError(f"decimated mesh {name!r} compiled to other sizes")
    if not np.array_equal(render.mesh_face[f0 : f0 + nf], result.faces):
        name = mujoco.mj_id2name(render, mujoco.mjtObj.mjOBJ_MESH, mesh)
        raise ValueError(f"decimated mesh {name!r} compiled with its faces reordered")
    render.mesh_vert[v0 : v0 + nv] = result.vertices
    render.mesh_normal[n0 : n0 + nn] = result.normals.reshape(-1, 3)
    render.mesh_facenormal[f0 : f0 + nf] = np.arange(3 * nf).reshape(nf, 3)
