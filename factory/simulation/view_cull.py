"""View culling for `render.detail`: geoms wholly outside a camera's view are not drawn.

MuJoCo's classic renderer sends every geom of the scene to OpenGL, and under software GL
(Mesa's llvmpipe) each mesh face costs its vertex shading, clipping and setup whether or not
it lands on a pixel: on Stack, the wrist camera sees the gripper and the cubes, yet draws the
whole arm and its 33,000-face pedestal. After `mjv_updateScene`, a geom whose bounding sphere
lies entirely outside the camera's view frustum (behind the near plane or beyond a side
plane) is marked `mjGEOM_NONE`, which `mjr_render` skips.

A geom is also culled when its bounding box (in its own frame: the mesh's vertices, decimated
and full, or MuJoCo's `geom_aabb` for a primitive) lies wholly beyond one plane. The box is the
tighter test for long links and for the meshes around a wrist camera: on Stack's wrist camera
the pedestal and the last links (51,000 faces a frame, 0 pixels) reach the frustum with their
spheres, not with their boxes.

Exact, not approximate: such a geom covers no pixel, so the picture (RGB, depth,
segmentation) is the same bit for bit, unless it could still be seen another way. So
culling is off when a light casts shadows with shadows on (an unseen geom can shadow a seen
one), when reflections are on and a material reflects, and for cameras whose frustum is not
the plain perspective of `fovy` (orthographic, or a sensor size / explicit frustum width).

Hand-written because MuJoCo has no culling of its own (mjv_updateScene has no frustum test);
the planes are those of `mjv_averageCamera` (the mono camera `mjr_render` draws with).
"""

from __future__ import annotations

import math

import mujoco
import numpy as np
from demofactory.simulation.scene_geoms import geom_view

# a bounding radius grows by this factor (and RADIUS_PAD metres) before the test: float slack
RADIUS_SLACK = 1.01
RADIUS_PAD = 1e-3
_OBJ_GEOM = int(mujoco.mjtObj.mjOBJ_GEOM)
_GEOM_NONE = int(mujoco.mjtGeom.mjGEOM_NONE)


def culling_is_exact(model: mujoco.MjModel, shadows: bool, reflections: bool) -> bool:
    """Whether culling leaves every picture of `model` unchanged under these render flags."""
    if shadows and bool(np.any(model.light_castshadow & model.light_active)):
        return False
    if reflections and bool(np.any(model.mat_reflectance > 0)):
        return False
    return True


def geom_radii(model: mujoco.MjModel, render: mujoco.MjModel | None) -> np.ndarray:
    """[ngeom] bounding radius about each geom's centre, the larger of `model`'s and the
    render model's (a decimated mesh may reach a little beyond the full one); 0: never culled
    (planes, and anything MuJoCo gives no bound)."""
    radii = np.asarray(model.geom_rbound, np.float64).copy()
    if render is not None:
        for g in range(model.ngeom):
            if model.geom_type[g] != mujoco.mjtGeom.mjGEOM_MESH or radii[g] <= 0:
                continue
            mesh = int(model.geom_dataid[g])
            v0, nv = int(render.mesh_vertadr[mesh]), int(render.mesh_vertnum[mesh])
            # the render model's vertices are in the physics model's mesh (= geom) frame
            reach = float(np.linalg.norm(render.mesh_vert[v0 : v0 + nv], axis=1).max())
            radii[g] = max(radii[g], reach)
    radii[radii > 0] = radii[radii > 0] * RADIUS_SLACK + RADIUS_PAD
    return radii


def geom_boxes(model: mujoco.MjModel, render: mujoco.MjModel | None) -> np.ndarray:
    """[ngeom, 6] each geom's bounding box in its own frame: centre (3), half sizes (3), padded
    like the radii; a mesh's from its vertices in the physics and the render model (a decimated
    mesh may reach a little beyond the full one), a primitive's MuJoCo's `geom_aabb`."""
    boxes = np.asarray(model.geom_aabb, np.float64).reshape(model.ngeom, 6).copy()
    for g in range(model.ngeom):
        if model.geom_type[g] != mujoco.mjtGeom.mjGEOM_MESH:
            continue
        mesh = int(model.geom_dataid[g])
        verts = [_mesh_vertices(model, mesh)]
        if render is not None:
            verts.append(_mesh_vertices(render, mesh))
        v = np.concatenate(verts)
        lo, hi = v.min(axis=0), v.max(axis=0)
        boxes[g, :3], boxes[g, 3:] = (lo + hi) / 2, (hi - lo) / 2
    boxes[:, 3:] = boxes[:, 3:] * RADIUS_SLACK + RADIUS_PAD
    return boxes


def _mesh_vertices(model: mujoco.MjModel, mesh: int) -> np.ndarray:
    v0, nv = int(model.mesh_vertadr[mesh]), int(model.mesh_vertnum[mesh])
    return np.asarray(model.mesh_vert[v0 : v0 + nv], np.float64)


def cull_outside_view(
    scene: mujoco.MjvScene, radii: np.ndarray, aspect: float, boxes: np.ndarray | None = None
) -> list[int]:
    """Mark the scene's geoms whose bounding sphere (`radii`, per model geom) or bounding box
    (`boxes`, geom_boxes) is wholly outside the view frustum as `mjGEOM_NONE`; returns the model
    geom ids culled. `aspect` is the image's width / height. Does nothing for an orthographic
    camera or a frustum of explicit width."""
    cam = mujoco.mjv_averageCamera(scene.camera[0], scene.camera[1])
    near = float(cam.frustum_near)
    if cam.orthographic or cam.frustum_width != 0 or near <= 0:
        return []
    forward, up = np.asarray(cam.forward), np.asarray(cam.up)
    (f0, f1, f2), (u0, u1, u2) = forward.tolist(), up.tolist()
    right = np.array([f1 * u2 - f2 * u1, f2 * u0 - f0 * u2, f0 * u1 - f1 * u0])  # np.cross: 30x
    half = (cam.frustum_top - cam.frustum_bottom) / 2 * aspect
    # the frustum's extents at unit depth: x in [left, right], y in [bottom, top]
    left_t = (cam.frustum_center - half) / near
    right_t = (cam.frustum_center + half) / near
    bottom_t, top_t = cam.frustum_bottom / near, cam.frustum_top / near
    view = geom_view(scene)
    if view is None:
        return []
    kinds, objid = view["type"], view["objid"]
    candidates = np.flatnonzero((view["objtype"] == _OBJ_GEOM) & (kinds != _GEOM_NONE))
    radius = radii[objid[candidates]]
    candidates, radius = candidates[radius > 0], radius[radius > 0]
    if not len(candidates):
        return []
    d = view["pos"][candidates].astype(np.float64) - np.asarray(cam.pos)  # from the camera
    if boxes is not None:  # the box's centre (from the camera) and half axes, in the world
        box = boxes[objid[candidates]]
        mat = view["mat"][candidates].astype(np.float64).reshape(-1, 3, 3)
        box_d = d + np.einsum("nij,nj->ni", mat, box[:, :3])
        axes = mat * box[:, None, 3:]  # column k: the box's k-th half axis
    # the planes' outward normals (world) and where they are: n . d > offset is beyond
    planes = [(-forward, -near)]  # behind the near plane: z < near
    for t, sign, axis in (
        (right_t, 1, right),
        (left_t, -1, right),
        (top_t, 1, up),
        (bottom_t, -1, up),
    ):
        # the side plane u = t z, u along `axis`; outward normal sign (axis - t forward)
        planes.append((sign * (axis - t * forward) / math.sqrt(1 + t * t), 0.0))
    outside = np.zeros(len(candidates), bool)
    for normal, offset in planes:
        outside |= d @ normal - offset > radius  # the sphere, about the geom's centre
        if boxes is not None:  # the box: its centre beyond by more than its reach along normal
            reach = np.abs(np.einsum("nij,i->nj", axes, normal)).sum(axis=1)
            outside |= box_d @ normal - offset > reach
    culled = candidates[outside]
    kinds[culled] = _GEOM_NONE
    return objid[culled].tolist()
