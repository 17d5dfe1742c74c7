"""A fixed camera draws the scene's static part once, then only what moves, per frame.

With `render.detail` other than full, a camera that never moves (its body welded to the world)
keeps a picture of the static geoms (arena, table, the robot's mount and base: every geom of a
body welded to the world or to a mocap body) with their depth. Each frame then draws only
the moving geoms, reads their depth, and takes a moving geom's pixel where it is nearer than
the static picture's (MuJoCo draws with reversed Z: larger is nearer; `GL_GEQUAL`, so a tie goes
to the geom drawn later, which the moving ones are in robosuite's geom order):

    update scene ─► static picture still valid? (camera, lights, static geoms' poses and
        colours, materials, textures unchanged) ── no ─► draw static geoms only; keep RGB + depth
    ─► draw moving geoms only (no skybox) ─► RGB + depth ─► composite with the kept picture

Exact, not approximate: lighting is per geom (no shadows from a light that casts them, no
reflections: the same rule as view culling), so a static geom's pixels do not depend on the
moving ones and the composite is the picture MuJoCo draws, bit for bit
(tests/simulation/test_static_layer.py). Not used, and the frame drawn whole, when it could not
be exact: anti-aliasing on (an edge pixel mixes static and moving geoms), a see-through moving
geom (0 < alpha < 1: it blends with what is behind it) or a see-through static one that shows,
a camera that moves. A geom of alpha 0 or less (robosuite's sites) is drawn by MuJoCo with no
weight: it changes no pixel and is left out of both pictures.

Hand-written because MuJoCo's renderer has no layer cache of its own: mjr_render clears and
draws the whole scene every call. Under software GL (llvmpipe) the static part is a large share
of a small camera's frame: the textured walls and table fill its pixels and the Panda's pedestal
alone is 33,000 faces (docs/render_detail.md, "Where a frame's CPU time goes").
"""

from __future__ import annotations

import mujoco
import numpy as np
from demofactory.simulation.scene_geoms import geom_view

_OBJ_GEOM = int(mujoco.mjtObj.mjOBJ_GEOM)
_GEOM_NONE = int(mujoco.mjtGeom.mjGEOM_NONE)
_SKYBOX = int(mujoco.mjtRndFlag.mjRND_SKYBOX)
_FIXED_MODES = (int(mujoco.mjtCamLight.mjCAMLIGHT_FIXED), int(mujoco.mjtCamLight.mjCAMLIGHT_TRACK))


def static_geoms(model: mujoco.MjModel) -> np.ndarray:
    """[ngeom] bool: geoms that no joint moves: of bodies welded to the world or to a mocap
    body (a recorded state does not move a mocap body; the layer's key catches it if it moves)."""
    weld = model.body_weldid
    static_body = (weld == 0) | (model.body_mocapid[weld] >= 0)
    return static_body[model.geom_bodyid]


def camera_is_fixed(model: mujoco.MjModel, camera: int) -> bool:
    """Whether `camera` (a model camera id) can never move: on a body welded to the world,
    fixed or tracking that body (a camera aimed at a target body turns with it)."""
    body = int(model.cam_bodyid[camera])
    return (
        int(model.body_weldid[body]) == 0
        and int(model.body_mocapid[body]) < 0
        and int(model.cam_mode[camera]) in _FIXED_MODES
    )


class StaticLayer:
    """One fixed camera's static picture, and the per-frame composite over it.

    Made per (camera, renderer): the picture belongs to the renderer's GL context and size.
    `hits`/`misses` count frames composited over a kept picture and frames that drew it anew;
    `whole` counts frames drawn whole (a see-through geom that could show).
    """

    def __init__(self, model: mujoco.MjModel, camera: int, height: int, width: int):
        self.camera, self.height, self.width = camera, height, width
        self.static = static_geoms(model)
        self._static_ids = np.flatnonzero(self.static)
        self._key: bytes | None = None
        self._rgb = np.empty((height, width, 3), np.uint8)  # bottom row first, as GL reads it
        self._depth = np.empty((height, width), np.float32)
        self._moving_rgb = np.empty_like(self._rgb)
        self._moving_depth = np.empty_like(self._depth)
        self._exact = True  # no static see-through geom shows in the static picture
        self.textures = 0  # bumped by the owner when textures are uploaded again
        self.hits = self.misses = self.whole = 0

    def key(self, model: mujoco.MjModel, data: mujoco.MjData, flags: np.ndarray) -> bytes:
        """Everything the static picture depends on beyond the model's fixed structure."""
        ids, cam = self._static_ids, self.camera
        parts = [
            data.cam_xpos[cam],
            data.cam_xmat[cam],
            model.cam_fovy[cam : cam + 1],
            data.geom_xpos[ids],
            data.geom_xmat[ids],
            model.geom_rgba[ids],
            model.geom_size[ids],
            model.geom_matid[ids],
            model.geom_dataid[ids],
            model.mat_rgba,
            model.mat_emission,
            model.mat_specular,
            model.mat_shininess,
            model.mat_texid,
            data.light_xpos,
            data.light_xdir,
            model.light_active,
            model.light_ambient,
            model.light_diffuse,
            model.light_specular,
            model.light_attenuation,
            model.light_cutoff,
            model.light_exponent,
            model.vis.headlight.ambient,
            model.vis.headlight.diffuse,
            model.vis.headlight.specular,
            np.array([model.vis.headlight.active, self.textures], np.float64),
            np.array([model.vis.map.znear, model.vis.map.zfar, model.stat.extent], np.float64),
            flags,
        ]
        return b"".join(np.ascontiguousarray(p).tobytes() for p in parts)

    def render(
        self, renderer: mujoco.Renderer, model: mujoco.MjModel, data: mujoco.MjData
    ) -> np.ndarray:
        """The camera's RGB [H, W, 3] uint8, upright, of the scene `renderer` was just updated to
        (mjv_updateScene, culling): the same pixels `renderer.render()` gives."""
        scene = renderer.scene
        view = geom_view(scene)
        if view is None:  # the bindings' layout is not the one expected: draw it whole
            self.whole += 1
            return renderer.render()
        kinds = view["type"]
        types = kinds.copy()
        alpha = view["rgba"][:, 3]
        is_geom = view["objtype"] == _OBJ_GEOM
        is_static = np.zeros(len(view), bool)
        is_static[is_geom] = self.static[view["objid"][is_geom]]
        drawn = types != _GEOM_NONE
        # alpha <= 0: drawn in MuJoCo's transparent pass with no weight, so no pixel changes
        invisible = drawn & (alpha <= 0)
        shown = drawn & (alpha > 0)
        moving = shown & ~is_static
        if np.any(moving & (alpha < 1)):  # a moving see-through geom blends with both pictures
            self.whole += 1
            return renderer.render()
        see_through = shown & is_static & (alpha < 1)
        static = shown & is_static
        if renderer._gl_context is not None:
            renderer._gl_context.make_current()
        skybox = scene.flags[_SKYBOX]
        try:
            kinds[invisible] = _GEOM_NONE
            key = self.key(model, data, scene.flags)
            redrawn = key != self._key
            if redrawn:
                kinds[moving | see_through] = _GEOM_NONE
                self._draw(renderer, self._rgb, self._depth)
                self._exact = True
                if see_through.any():  # allowed only where it changes no pixel (behind the
                    # floor or table): then nothing that moves in front of them can meet it
                    kinds[see_through] = types[see_through]
                    self._draw(renderer, self._moving_rgb, self._moving_depth)
                    self._exact = bool(np.array_equal(self._moving_rgb, self._rgb))
                kinds[moving] = types[moving]
                self._key = key
            if not self._exact:  # a static see-through geom shows: it would blend with movers
                self.whole += 1
                kinds[:] = types
                return renderer.render()
            kinds[static] = _GEOM_NONE
            scene.flags[_SKYBOX] = 0  # the static picture has the sky
            self._draw(renderer, self._moving_rgb, self._moving_depth)
            if redrawn:
                self.misses += 1
            else:
                self.hits += 1
        finally:
            scene.flags[_SKYBOX] = skybox
            kinds[:] = types
        # reversed Z: 0 is nothing drawn, nearer is larger; a tie goes to the moving geom
        # (GL_GEQUAL, drawn after the static ones)
        nearer = (self._moving_depth >= self._depth) & (self._moving_depth > 0)
        out = np.where(nearer[..., None], self._moving_rgb, self._rgb)
        return np.ascontiguousarray(out[::-1])

    @staticmethod
    def _draw(renderer: mujoco.Renderer, rgb: np.ndarray, depth: np.ndarray) -> None:
        mujoco.mjr_render(renderer._rect, renderer.scene, renderer._mjr_context)
        mujoco.mjr_readPixels(rgb, depth, renderer._rect, renderer._mjr_context)
