"""View culling for `render.detail`: geoms wholly outside a camera's view are not drawn.

MuJoCo's classic renderer sends every geom of the scene to OpenGL, and under software GL
(Mesa's llvmpipe) each mesh face costs its vertex shading, clipping and setup whether or not
it lands on a pixel: on Stack, the wrist camera sees the gripper and the cubes, yet draws the
whole arm and its 33,000-face pedestal. After `mjv_updateScene`, a geom whose bounding sphere
lies entirely outside the camera's view frustum (behind the near plane or beyond a side
plane) is marked `mjGEOM_NONE`, which `mjr_render` skips.

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


def cull_outside_view(scene: mujoco.MjvScene, radii: np.ndarray, aspect: float) -> list[int]:
    """Mark the scene's geoms whose bounding sphere (`radii`, per model geom) is wholly outside
    the view frustum as `mjGEOM_NONE`; returns the model geom ids culled. `aspect` is the image's
    width / height. Does nothing for an orthographic camera or a frustum of explicit width."""
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
    d = view["pos"][candidates].astype(np.float64) - np.asarray(cam.pos)
    x, y, z, r = d @ right, d @ up, d @ forward, radius
    outside = z < near - r  # wholly behind the near plane
    for t, sign, u in ((right_t, 1, x), (left_t, -1, x), (top_t, 1, y), (bottom_t, -1, y)):
        # signed distance beyond the side plane u = t z (positive: outside)
        outside |= sign * (u - t * z) / math.sqrt(1 + t * t) > r
    culled = candidates[outside]
    kinds[culled] = _GEOM_NONE
    return objid[culled].tolist()
