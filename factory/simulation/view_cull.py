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

A heavy geom in view (a mesh of OCCLUDEE_MIN_FACES faces or more, or a finite plane) is also
culled when it is hidden behind one opaque box: every point of its bounding box that lies in the
view is in the box's shadow from the camera. On Stack the wrist camera looks down at the table,
and the floor and the Panda's pedestal (28,000 faces) lie in view under it in every frame.
Exact too (see `_hidden_behind`).

Hand-written because MuJoCo has no culling of its own (mjv_updateScene has no frustum test);
the planes are those of `mjv_averageCamera` (the mono camera `mjr_render` draws with).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import mujoco
import numpy as np
from demofactory.simulation.scene_geoms import geom_view

# a bounding radius grows by this factor (and RADIUS_PAD metres) before the test: float slack
RADIUS_SLACK = 1.01
RADIUS_PAD = 1e-3
_OBJ_GEOM = int(mujoco.mjtObj.mjOBJ_GEOM)
_GEOM_NONE = int(mujoco.mjtGeom.mjGEOM_NONE)
_GEOM_BOX = int(mujoco.mjtGeom.mjGEOM_BOX)
# occlusion: only meshes this heavy are tested (the test costs ~0.1 ms; drawing 1,000 faces
# under llvmpipe costs about as much)
OCCLUDEE_MIN_FACES = 1000
# An occluder is shrunk by OCCLUDER_SHRINK plus OCCLUDER_SHRINK_PER_M of its farthest depth, and
# a hidden point lies OCCLUSION_GAP behind it in depth. Any margin above the rasteriser's
# precision (1/256 px in Mesa) keeps the picture exact; 1 % of the distance is 0.4 px at 84 px
# and 90 degrees, and 0.04 px at 170. The depth gap is far above the depth buffer's resolution.
OCCLUDER_SHRINK = 1e-3
OCCLUDER_SHRINK_PER_M = 0.01
OCCLUSION_GAP = 1e-3
OCCLUSION_RETEST = 8  # every this many frames, all heavy geoms in view are tested
# The frustum's 5 planes (0: near, then right, left, top, bottom) and a box's 6 (5-7: +axes,
# 8-10: -axes): the triples whose crossings can be corners of their intersection. Not a box's
# two parallel faces, and of the frustum's planes only those that meet in an edge (near and a
# side, or two adjacent sides; three sides meet at the camera, behind the near plane): 120 of
# the 165 triples.
_FRUSTUM_EDGES = {(0, 1), (0, 2), (0, 3), (0, 4), (1, 3), (1, 4), (2, 3), (2, 4)}


def _may_be_corner(triple: tuple[int, ...]) -> bool:
    frustum = [p for p in triple if p < 5]
    box = [p for p in triple if p >= 5]
    if len({(p - 5) % 3 for p in box}) < len(box):  # two parallel faces never meet
        return False
    if len(frustum) == 3:
        return frustum[0] == 0 and tuple(frustum[1:]) in _FRUSTUM_EDGES
    return len(frustum) < 2 or tuple(frustum) in _FRUSTUM_EDGES


_TRIPLES = np.array([t for t in itertools.combinations(range(11), 3) if _may_be_corner(t)])


def culling_is_exact(model: mujoco.MjModel, shadows: bool, reflections: bool) -> bool:
    """Whether culling leaves every picture of `model` unchanged under these render flags."""
    if shadows and bool(np.any(model.light_castshadow & model.light_active)):
        return False
    if reflections and bool(np.any(model.mat_reflectance > 0)):
        return False
    return True


def geom_radii(model: mujoco.MjModel, render: mujoco.MjModel | None) -> np.ndarray:
    """[ngeom] bounding radius about each geom's centre, the larger of `model`'s and the
    render model's (a decimated mesh may reach a little beyond the full one); a plane's, when it
    is drawn finite, to its corners; 0: never culled (infinite planes, and anything MuJoCo gives
    no bound)."""
    radii = np.asarray(model.geom_rbound, np.float64).copy()
    finite = finite_planes(model)
    radii[finite] = np.hypot(model.geom_size[finite, 0], model.geom_size[finite, 1])
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
    finite = finite_planes(model)  # MuJoCo's geom_aabb of a plane is ~1e10 wide
    boxes[finite, :3] = 0
    boxes[finite, 3:5], boxes[finite, 5] = model.geom_size[finite, :2], 0
    boxes[:, 3:] = boxes[:, 3:] * RADIUS_SLACK + RADIUS_PAD
    return boxes


def finite_planes(model: mujoco.MjModel) -> np.ndarray:
    """[ngeom] bool: planes MuJoCo draws finite, within +-size[0] x +-size[1] in their own
    frame (a size of 0 or less draws the plane infinite)."""
    return (
        (model.geom_type == mujoco.mjtGeom.mjGEOM_PLANE)
        & (model.geom_size[:, 0] > 0)
        & (model.geom_size[:, 1] > 0)
    )


def _mesh_vertices(model: mujoco.MjModel, mesh: int) -> np.ndarray:
    v0, nv = int(model.mesh_vertadr[mesh]), int(model.mesh_vertnum[mesh])
    return np.asarray(model.mesh_vert[v0 : v0 + nv], np.float64)


@dataclass
class Occlusion:
    """What the occlusion test needs of a model and the meshes a camera draws, and which geoms
    it may skip this frame.

    The heavy geoms in view are all tested every OCCLUSION_RETEST-th frame, and between those
    only the ones found hidden at their last test: a geom is culled only when the test of this
    very frame finds it hidden, so the pictures stay exact, and the test's cost goes to the
    geoms that were hidden lately (an arm's links in sight of a fixed camera would otherwise be
    tested, in vain, every frame). One frame in OCCLUSION_RETEST tests them all at once: a test
    costs about as much for one geom as for ten."""

    heavy: np.ndarray  # [ngeom] bool: what is worth testing (occlusion_inputs)
    static: np.ndarray  # [ngeom] bool: geoms that no joint moves (static_layer.static_geoms)
    # [ngeom] bool: what may be tested at all (a fixed camera draws its static geoms once, into
    # its static picture: not worth testing). A see-through geom (alpha < 1 this frame) is
    # tested whatever its faces: MuJoCo draws it in a second, blended pass
    testable: np.ndarray
    # [nmat] bool: a material that may let what is behind show through a box (a texture with
    # an alpha channel, in any role)
    see_through_mat: np.ndarray
    # whether to test if one box covers the whole picture (then the sky is not drawn): for a
    # camera that moves; a fixed one draws its sky once, into its static picture
    test_sky: bool = True
    hidden: np.ndarray = field(init=False)  # [ngeom] bool: found hidden at its last test
    frame: int = field(init=False, default=0)  # frames culled so far
    sky_hidden: bool = field(init=False, default=False)  # this frame's: no sky pixel shows
    # MuJoCo draws the skybox (and the haze around it) as a shape about the camera, not at the
    # far plane: a cylinder of radius 0.7 far with vis.quality.numslices sides, the haze as near
    # as (1 - vis.map.haze) of that. An occluder covers the sky only wholly inside this share of
    # the far distance (set by occlusion_inputs; 0: never)
    sky_reach: float = 0.0

    def __post_init__(self) -> None:
        self.hidden = np.zeros(len(self.heavy), bool)


def occlusion_inputs(
    model: mujoco.MjModel, faces: np.ndarray, static: np.ndarray, fixed: bool = False
) -> Occlusion:
    """`faces`: [ngeom] mesh faces each geom draws (0 for a primitive); `static`: [ngeom] bool;
    `fixed`: the camera never moves and draws its static geoms and its sky once (static_layer),
    so neither is tested."""
    texid = np.asarray(model.mat_texid).reshape(model.nmat, int(mujoco.mjtTextureRole.mjNTEXROLE))
    alpha_tex = np.asarray(model.tex_nchannel) == 4
    see_through = np.array(
        [any(t >= 0 and alpha_tex[t] for t in row) for row in texid], bool
    ).reshape(model.nmat)
    static = np.asarray(static, bool)
    testable = ~static if fixed else np.ones(len(static), bool)
    heavy = ((np.asarray(faces) >= OCCLUDEE_MIN_FACES) | finite_planes(model)) & testable
    slices = max(int(model.vis.quality.numslices), 3)
    haze = min(max(float(model.vis.map.haze), 0.0), 1.0)
    sky_reach = 0.7 * math.cos(math.pi / slices) * (1 - haze) * 0.99  # 1 % to spare
    return Occlusion(
        heavy=heavy,
        static=static,
        testable=testable,
        see_through_mat=see_through,
        test_sky=not fixed,
        sky_reach=sky_reach,
    )


def cull_outside_view(
    scene: mujoco.MjvScene,
    radii: np.ndarray,
    aspect: float,
    boxes: np.ndarray | None = None,
    occlusion: Occlusion | None = None,
) -> list[int]:
    """Mark the scene's geoms whose bounding sphere (`radii`, per model geom) or bounding box
    (`boxes`, geom_boxes) is wholly outside the view frustum as `mjGEOM_NONE`, and with
    `occlusion` (and `boxes`) the heavy meshes hidden behind an opaque box; returns the model
    geom ids culled. `aspect` is the image's width / height. Does nothing for an orthographic
    camera or a frustum of explicit width."""
    if occlusion is not None:
        occlusion.sky_hidden = False  # until this frame's test says so
    cam = mujoco.mjv_averageCamera(scene.camera[0], scene.camera[1])
    near = float(cam.frustum_near)
    if cam.orthographic or cam.frustum_width != 0 or near <= 0:
        return []
    # the frame and the planes in plain floats: numpy's per-call cost dominates 3-vectors
    (f0, f1, f2), (u0, u1, u2) = np.asarray(cam.forward).tolist(), np.asarray(cam.up).tolist()
    r0, r1, r2 = f1 * u2 - f2 * u1, f2 * u0 - f0 * u2, f0 * u1 - f1 * u0  # right = forward x up
    top, bottom = float(cam.frustum_top), float(cam.frustum_bottom)
    center = float(cam.frustum_center)
    half = (top - bottom) / 2 * aspect
    # the frustum's extents at unit depth: x in [left, right], y in [bottom, top]
    left_t, right_t = (center - half) / near, (center + half) / near
    bottom_t, top_t = bottom / near, top / near
    # the planes' outward normals (world) and where they are: n . d > offset is beyond. 0: behind
    # the near plane (z < near); then each side plane u = t z, u along right or up, with the
    # outward normal sign (u - t forward), normalised
    rows = [(-f0, -f1, -f2)]
    for t, sign, (a0, a1, a2) in (
        (right_t, 1.0, (r0, r1, r2)),
        (left_t, -1.0, (r0, r1, r2)),
        (top_t, 1.0, (u0, u1, u2)),
        (bottom_t, -1.0, (u0, u1, u2)),
    ):
        k = sign / math.sqrt(1 + t * t)
        rows.append((k * (a0 - t * f0), k * (a1 - t * f1), k * (a2 - t * f2)))
    normals = np.array(rows)  # [5, 3]
    offsets = np.array([-near, 0.0, 0.0, 0.0, 0.0])
    forward = np.array((f0, f1, f2))
    view = geom_view(scene)
    if view is None:
        return []
    kinds, objid = view["type"], view["objid"]
    candidates = np.flatnonzero((view["objtype"] == _OBJ_GEOM) & (kinds != _GEOM_NONE))
    radius = radii[objid[candidates]]
    candidates, radius = candidates[radius > 0], radius[radius > 0]
    if not len(candidates):
        return []
    cam_pos = np.array(cam.pos)
    d = view["pos"][candidates].astype(np.float64) - cam_pos  # from the camera
    # the sphere, about the geom's centre, beyond a plane
    outside = (d @ normals.T - offsets > radius[:, None]).any(axis=1)
    if boxes is not None:  # the box's centre (from the camera) and half axes, in the world
        box = boxes[objid[candidates]]
        mat = view["mat"][candidates].astype(np.float64).reshape(-1, 3, 3)
        box_d = d + (mat @ box[:, :3, None])[..., 0]
        axes = mat * box[:, None, 3:]  # column k: the box's k-th half axis
        # the box: its centre beyond by more than its reach along the normal
        reach = np.abs(normals @ axes).sum(axis=2)  # [n, 5]
        outside |= (box_d @ normals.T - offsets > reach).any(axis=1)
    if occlusion is not None and boxes is not None:
        ids = objid[candidates]
        see_through = (view["rgba"][candidates, 3] < 1) & occlusion.testable[ids]
        tested = ~outside & (occlusion.heavy[ids] | see_through)
        if occlusion.frame % OCCLUSION_RETEST:
            tested &= occlusion.hidden[ids]
        occlusion.frame += 1
        if tested.any() or occlusion.test_sky:
            drawn = kinds != _GEOM_NONE
            drawn[candidates[outside]] = False  # an occluder must be drawn
            far = float(cam.frustum_far)
            occluders = _occluders(view, drawn, occlusion, forward, near, far, cam_pos)
            if occluders is not None and tested.any():
                hidden = _hidden_behind(
                    occluders, view, occlusion, normals, offsets, forward,
                    box_d[tested], axes[tested], ids[tested],
                )  # fmt: skip
                occlusion.hidden[ids[tested]] = hidden
                outside[np.flatnonzero(tested)[hidden]] = True
            if occluders is not None and occlusion.test_sky and occlusion.sky_reach > 0:
                rays = np.array(
                    [(f0 + x * r0 + y * u0, f1 + x * r1 + y * u1, f2 + x * r2 + y * u2)
                     for x in (left_t, right_t) for y in (bottom_t, top_t)]
                )  # fmt: skip
                occlusion.sky_hidden = _sky_hidden(
                    occluders, rays, far, forward, occlusion.sky_reach
                )
    culled = candidates[outside]
    kinds[culled] = _GEOM_NONE
    return objid[culled].tolist()


@dataclass
class _Occluders:
    """The opaque boxes in view that may hide something, from the camera: ids in the scene,
    centres [m, 3], rotations [m, 3, 3], shrunk half sizes [m, 3]."""

    ids: np.ndarray
    centres: np.ndarray
    rots: np.ndarray
    halves: np.ndarray
    reach: np.ndarray  # [m]: how far from the camera each (unshrunk) box reaches, at most


def _occluders(view, drawn, occlusion, forward, near, far, cam_pos) -> _Occluders | None:
    """The scene's box geoms that can hide what is behind them: drawn, alpha 1, not flagged
    transparent, no texture with alpha; wholly between the near and far planes (a box the near
    plane clips would open, and one the far plane clips would let the sky through). Shrunk by
    the margins (OCCLUDER_SHRINK). None when there are none."""
    ids = np.flatnonzero(
        drawn
        & (view["type"] == _GEOM_BOX)
        & (view["objtype"] == _OBJ_GEOM)
        & (view["rgba"][:, 3] >= 1)
        & (view["transparent"] == 0)
    )
    if not len(ids):
        return None
    matid = view["matid"][ids]
    mats = occlusion.see_through_mat
    opaque = matid < 0
    if len(mats):
        opaque |= ~mats[np.clip(matid, 0, len(mats) - 1)]
    ids = ids[opaque]
    centres = view["pos"][ids].astype(np.float64) - np.asarray(cam_pos)
    rots = view["mat"][ids].astype(np.float64).reshape(-1, 3, 3)
    halves = view["size"][ids].astype(np.float64)
    # each box's depth extent: its centre's depth -/+ its half sizes along the view axis
    extent = (np.abs(forward @ rots) * halves).sum(axis=1)
    nearest, farthest = centres @ forward - extent, centres @ forward + extent
    shrunk = halves - (OCCLUDER_SHRINK + OCCLUDER_SHRINK_PER_M * farthest)[:, None]
    keep = (nearest > near + OCCLUSION_GAP) & (farthest < far) & (shrunk > 0).all(axis=1)
    if not keep.any():
        return None
    reach = np.linalg.norm(centres, axis=1) + np.linalg.norm(halves, axis=1)
    return _Occluders(ids[keep], centres[keep], rots[keep], shrunk[keep], reach[keep])


def _segments_hit(boxes: _Occluders, points: np.ndarray, forward) -> np.ndarray:
    """[m, k] bool: whether the segment from the camera to each point (from the camera, [k, 3])
    passes through each shrunk box and reaches OCCLUSION_GAP beyond its entry in depth."""
    origin = -(boxes.centres[:, None, :] @ boxes.rots)  # [m, 1, 3]: in the box frames
    dirs = points @ boxes.rots  # [m, p, 3]
    half = boxes.halves[:, None, :]
    # a segment parallel to a slab: 1e-200 stands in for 0 (the times come out +-1e200 or so,
    # and the slab test holds as with infinities)
    inv = 1 / np.where(dirs == 0, 1e-200, dirs)
    t1, t2 = (-half - origin) * inv, (half - origin) * inv
    enter = np.minimum(t1, t2).max(axis=2)
    leave = np.maximum(t1, t2).min(axis=2)
    behind = (1 - enter) * (points @ forward)[None] >= OCCLUSION_GAP
    return (enter > 0) & (enter < leave) & behind


def _hidden_behind(occluders: _Occluders, view, occlusion, frustum_n, frustum_b, forward,
                   box_d, axes, ids):  # fmt: skip
    """[n] bool: which of n boxes (centre from the camera `box_d`, half axes `axes` [n, 3, 3] as
    columns; of model geoms `ids`) are hidden behind one of the `occluders`.

    Why it is exact. The points a box occluder O hides from the camera c are its shadow
    S = {p : the segment c-p passes through O}, a convex set (p = c + s (o - c) with o in O and
    s >= 1; any weighted mean of two such points is one too). A geom lies within its bounding
    box B, and its pixels come from B's part in the view frustum F, the convex polytope B n F.
    That polytope lies in S when its corners do, so testing the corners (crossings of three of
    its 11 planes) is enough. Margins make it hold for the rasterized picture: O is shrunk by
    about a pixel, a corner must lie OCCLUSION_GAP behind O in depth, O lies wholly beyond the
    near plane (a near-clipped box would open), and F is grown by OCCLUSION_GAP. One occluder
    must hide all of B n F (the union of two shadows need not be convex). A static geom is only
    culled by a static occluder: a fixed camera's static picture (static_layer) is kept while
    the static geoms stay, so what hides one of them must not move."""
    corners, valid = _box_frustum_corners(box_d, axes, frustum_n, frustum_b + OCCLUSION_GAP)
    some = valid.any(axis=1)  # a box with no corner in view is left alone (never the case
    # after the frustum test, short of rounding)
    points = corners[valid]  # [k, 3], candidate by candidate
    hides = np.zeros((len(occluders.ids), len(ids)), bool)
    if len(points):
        starts = np.concatenate([[0], np.cumsum(valid.sum(axis=1))[:-1]])[some]
        hit = _segments_hit(occluders, points, forward)  # [occluder, corner]
        misses = np.add.reduceat((~hit).astype(np.int64), starts, axis=1)  # [occluder, box]
        hides[:, some] = misses == 0
    static_occluder = occlusion.static[view["objid"][occluders.ids]]
    allowed = static_occluder[:, None] | ~occlusion.static[ids][None, :]
    return (hides & allowed).any(axis=0)


def _sky_hidden(
    occluders: _Occluders, corner_rays: np.ndarray, far: float, forward, reach: float
) -> bool:
    """Whether one occluder covers the whole picture: the rays through the image's 4 corners
    ([4, 3], at unit depth) all pass through it, and it lies wholly nearer than the sky MuJoCo
    draws (`reach` times the far distance: Occlusion.sky_reach). The rays that meet a convex box
    make a convex cone, so with the 4 corners it holds every ray of the picture: no pixel of
    the sky shows."""
    near_enough = occluders.reach < reach * far
    if not near_enough.any():
        return False
    hit = _segments_hit(occluders, corner_rays * far, forward)
    return bool((hit.all(axis=1) & near_enough).any())


def _cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a x b over the last axis (np.cross costs 10x more on these small stacks)."""
    a0, a1, a2 = a[..., 0], a[..., 1], a[..., 2]
    b0, b1, b2 = b[..., 0], b[..., 1], b[..., 2]
    return np.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=-1)


def _box_frustum_corners(box_d, axes, frustum_n, frustum_b) -> tuple[np.ndarray, np.ndarray]:
    """The corners of n boxes (from the camera: centres `box_d` [n, 3], half axes as the
    columns of `axes` [n, 3, 3]) cut by the frustum's half-spaces n . d <= b: [n, 120, 3]
    crossings of three of the 11 planes (_TRIPLES) and [n, 120] which of them are corners."""
    lengths = np.maximum(np.sqrt((axes * axes).sum(axis=1)), 1e-12)  # [n, 3]: half sizes
    units = np.swapaxes(axes / lengths[:, None, :], 1, 2)  # [n, 3, 3]: rows, the unit axes
    mid = (units @ box_d[:, :, None])[..., 0]
    count = len(box_d)
    normals = np.empty((count, 11, 3))
    normals[:, :5], normals[:, 5:8], normals[:, 8:] = frustum_n, units, -units
    offsets = np.empty((count, 11))
    offsets[:, :5], offsets[:, 5:8], offsets[:, 8:] = frustum_b, mid + lengths, lengths - mid
    pairs = _cross(normals[:, :, None, :], normals[:, None, :, :])  # [n, 11, 11, 3]
    i, j, k = _TRIPLES.T
    c23, c31, c12 = pairs[:, j, k], pairs[:, k, i], pairs[:, i, j]  # [n, 120, 3]
    det = (normals[:, i] * c23).sum(axis=2)
    solvable = np.abs(det) > 1e-12
    det = np.where(solvable, det, 1.0)
    b = offsets[:, _TRIPLES, None]  # [n, 120, 3, 1]
    points = (b[:, :, 0] * c23 + b[:, :, 1] * c31 + b[:, :, 2] * c12) / det[..., None]  # Cramer
    inside = (points @ np.swapaxes(normals, 1, 2) <= offsets[:, None, :] + 1e-9).all(axis=2)
    return points, solvable & inside
