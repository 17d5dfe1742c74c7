"""Render recorded MuJoCo states for the spec's cameras and encode them for the shards.

    states [T, N] -> per state: restore it; per camera: RGB, depth (metres), labels   render_views
      -> encode (JPEG; 16-bit PNG depth in mm; PNG labels), optionally on a thread  _encode_views
      -> EpisodeFrames: camera -> T encoded frames, per kind                          render_frames

With `render.detail` other than full, each camera draws its own decimated meshes
(mesh_detail.py), skips the geoms wholly outside its view (view_cull.py), and a camera that
never moves draws the static geoms once and only the moving ones per frame (static_layer.py).

Only successful attempts reach this stage: their states are restored one by
one into the generation model, so a failed attempt never costs a frame. One
`mujoco.Renderer` per image size lives as long as the worker. Every image is
upright (row 0 at the top) and depth and labels are pixel-aligned with the RGB.
"""

from __future__ import annotations

import ctypes
import io
from collections import deque
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import mujoco
import numpy as np
from demofactory.shards.format import encode_depth_png, encode_segmentation_png, segmentation_bits
from demofactory.simulation.mesh_detail import (
    DetailReport,
    budgets_for,
    make_render_model,
    plan_meshes,
)
from demofactory.simulation.scene import Scene
from demofactory.simulation.scene_geoms import geom_view
from demofactory.simulation.static_layer import StaticLayer, camera_is_fixed, static_geoms
from demofactory.simulation.view_cull import (
    Occlusion,
    cull_outside_view,
    culling_is_exact,
    geom_boxes,
    geom_radii,
    occlusion_inputs,
)
from demofactory.specs.spec import CameraSpec, RenderSpec
from PIL import Image

_SKYBOX = mujoco.mjtRndFlag.mjRND_SKYBOX
_GEOM_NONE = int(mujoco.mjtGeom.mjGEOM_NONE)
MAX_PENDING_ENCODES = 4  # states rendered ahead of the encoder thread before rendering waits
# glibc's malloc, for a rendering process (keep_freed_heap): freed memory up to this much stays
# at the heap's top, and blocks up to MMAP_THRESHOLD come from the heap, not from mmap
TRIM_THRESHOLD = 128 << 20
MMAP_THRESHOLD = 32 << 20  # glibc's largest allowed value on 64-bit
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)
_heap_kept: bool | None = None


@dataclass(frozen=True)
class CameraViews:
    """One camera's images of one state.

    rgb: [H, W, 3] uint8. depth: [H, W] float32 metres along the optical axis, or None.
    labels: [H, W] int64 segmentation labels (see `demofactory.shards.format`), or None.
    """

    rgb: np.ndarray
    depth: np.ndarray | None = None
    labels: np.ndarray | None = None


@dataclass(frozen=True)
class EpisodeFrames:
    """Encoded frames of an episode: camera -> T frames, per kind (absent for kinds not asked)."""

    images: dict[str, list[bytes]] = field(default_factory=dict)  # JPEG
    depth: dict[str, list[bytes]] = field(default_factory=dict)  # 16-bit PNG, millimetres
    segmentation: dict[str, list[bytes]] = field(default_factory=dict)  # 8/16-bit PNG labels


class FrameRenderer:
    """Renders states of one `Scene` for a fixed list of cameras; reused across episodes.

    encode_threads: 0 encodes on the calling thread; 1 (or more) encodes frame t on a pool
    thread while frame t + 1 renders (PIL releases the GIL while it encodes).
    """

    def __init__(
        self,
        scene: Scene,
        cameras: Sequence[CameraSpec],
        settings: RenderSpec,
        encode_threads: int = 0,
    ):
        self.scene, self.cameras, self.settings = scene, list(cameras), settings
        # (height, width) -> renderer; with render.detail, (camera, height, width): each camera
        # draws the meshes at the detail it needs (a wrist camera's arm links are coarse)
        self._renderers: dict[tuple, mujoco.Renderer] = {}
        self._pool = ThreadPoolExecutor(encode_threads, "encode") if encode_threads > 0 else None
        # What robosuite shows offscreen: visual geoms (group 1), not collision geoms (group 0).
        self._option = mujoco.MjvOption()
        self._option.geomgroup[0], self._option.geomgroup[1] = 0, 1
        if self.cameras:
            keep_freed_heap()
        modes = {cam.segmentation for cam in self.cameras} - {"none"}
        self._label_tables = {mode: label_table(scene, mode) for mode in modes}
        if self.cameras:
            scene.model.vis.quality.offsamples = settings.multisamples
            vis = scene.model.vis.global_
            # The offscreen buffer must hold the largest image asked for.
            vis.offwidth = max(vis.offwidth, *(c.width for c in self.cameras))
            vis.offheight = max(vis.offheight, *(c.height for c in self.cameras))
        # render.detail: per camera, the meshes its GL context holds (None: the physics model's)
        self._render_models: dict[str, mujoco.MjModel | None] = {}
        reports = []
        for cam in self.cameras if settings.detail != "full" else ():
            model, report = detail_model(scene, [cam], settings.detail)
            self._render_models[cam.name] = model
            reports.append(report)
        self.detail = merge_reports(str(settings.detail), reports)
        # render.detail other than full also skips the geoms wholly outside a camera's view
        # (view_cull: exact, so only where shadows and reflections cannot show them)
        self._cull_radii: dict[str, np.ndarray] = {}
        self._cull_boxes: dict[str, np.ndarray] = {}
        self._geom_faces: dict[str, np.ndarray] = {}  # camera -> [ngeom] mesh faces drawn
        self._occlusion: dict[str, Occlusion] = {}  # camera -> what the occlusion test needs
        self._fixed: dict[str, int] = {}  # camera name -> model camera id: never moves
        static = static_geoms(scene.model)
        if settings.detail != "full" and culling_is_exact(
            scene.model, settings.shadows, settings.reflections
        ):
            for cam in self.cameras:
                drawn = self._render_models.get(cam.name)
                self._cull_radii[cam.name] = geom_radii(scene.model, drawn)
                self._cull_boxes[cam.name] = geom_boxes(scene.model, drawn)
                drawn = scene.model if drawn is None else drawn
                faces = np.zeros(drawn.ngeom, np.int64)
                is_mesh = drawn.geom_type == mujoco.mjtGeom.mjGEOM_MESH
                faces[is_mesh] = drawn.mesh_facenum[drawn.geom_dataid[is_mesh]]
                self._geom_faces[cam.name] = faces
                cam_id = mujoco.mj_name2id(scene.model, mujoco.mjtObj.mjOBJ_CAMERA, cam.name)
                # a camera that never moves keeps a picture of the static geoms (static_layer:
                # exact where culling is, and without anti-aliasing, whose edge pixels mix
                # static and moving geoms)
                fixed = (
                    settings.multisamples == 0
                    and cam_id >= 0
                    and camera_is_fixed(scene.model, cam_id)
                )
                if fixed:
                    self._fixed[cam.name] = cam_id
                self._occlusion[cam.name] = occlusion_inputs(drawn, faces, static, fixed)
        # camera -> [frames, geoms culled, mesh faces culled], summed over its frames
        self.culled: dict[str, list[int]] = {name: [0, 0, 0] for name in self._cull_radii}
        self._layers: dict[tuple, StaticLayer] = {}  # renderer key -> its static picture

    def _renderer(self, cam: CameraSpec) -> mujoco.Renderer:
        renderer = self._renderers.get(self._key(cam))
        return self._new_renderer(cam) if renderer is None else renderer

    def _key(self, cam: CameraSpec) -> tuple:
        if cam.name in self._render_models:
            return (cam.name, cam.height, cam.width)
        return (cam.height, cam.width)

    def _new_renderer(self, cam: CameraSpec) -> mujoco.Renderer:
        key = self._key(cam)
        self._renderers[key] = self._make_renderer(
            cam.height, cam.width, self._render_models.get(cam.name)
        )
        return self._renderers[key]

    def _layer(self, cam: CameraSpec) -> StaticLayer | None:
        """The static picture of a fixed camera's renderer (None: the frame is drawn whole)."""
        cam_id = self._fixed.get(cam.name)
        if cam_id is None:
            return None
        key = (cam.name, *self._key(cam))  # renderers by size may serve several cameras
        if key not in self._layers:
            self._layers[key] = StaticLayer(self.scene.model, cam_id, cam.height, cam.width)
        return self._layers[key]

    @property
    def static_layer_frames(self) -> dict[str, dict[str, int]]:
        """Per fixed camera: frames composited over a kept static picture (`kept`), frames that
        drew it anew (`redrawn`) and frames drawn whole (`whole`: a transparent geom)."""
        out: dict[str, dict[str, int]] = {}
        for (camera, *_), layer in self._layers.items():
            counts = out.setdefault(camera, {"kept": 0, "redrawn": 0, "whole": 0})
            counts["kept"] += layer.hits
            counts["redrawn"] += layer.misses
            counts["whole"] += layer.whole
        return out

    def _make_renderer(
        self, height: int, width: int, render: mujoco.MjModel | None
    ) -> mujoco.Renderer:
        model = self.scene.model
        if render is None:
            return mujoco.Renderer(model, height=height, width=width)
        # The GL context (meshes, textures) is made from the render model; scenes are still
        # built from the physics model and data: same ids, same everything but mesh detail.
        render.vis.global_.offwidth = model.vis.global_.offwidth
        render.vis.global_.offheight = model.vis.global_.offheight
        render.vis.quality.offsamples = model.vis.quality.offsamples
        render.tex_data[:] = model.tex_data  # textures as they are now
        renderer = mujoco.Renderer(render, height=height, width=width)
        renderer._model = model  # update_scene and depth read the physics model
        return renderer

    def upload_textures(self, texture_ids: Iterable[int]) -> None:
        """Re-upload textures `texture_ids` from `model.tex_data` to every renderer made so far.

        Call after changing texture bytes in the model. Renderers created later read the
        model's current textures when they are made, so they need no upload.
        """
        ids = [int(t) for t in texture_ids]
        model = self.scene.model
        for tex_id in ids:
            if not 0 <= tex_id < model.ntex:
                raise ValueError(f"texture id {tex_id} out of range 0..{model.ntex - 1}")
        for renderer in self._renderers.values():
            if renderer._gl_context is not None:  # its GL context must be current for the upload
                renderer._gl_context.make_current()
            for tex_id in ids:
                mujoco.mjr_uploadTexture(model, renderer._mjr_context, tex_id)
        for layer in self._layers.values():  # their static pictures show the old textures
            layer.textures += 1

    def render_current(self) -> dict[str, np.ndarray]:
        """Images [H, W, 3] uint8, upright, of the scene's current state, per camera (RGB only)."""
        return {cam.name: self._render_camera(cam, extras=False).rgb for cam in self.cameras}

    def render_views(self) -> dict[str, CameraViews]:
        """RGB (and depth, labels where asked) of the scene's current state, per camera."""
        return {cam.name: self._render_camera(cam, extras=True) for cam in self.cameras}

    def _render_camera(self, cam: CameraSpec, extras: bool) -> CameraViews:
        renderer = self._renderer(cam)
        renderer.update_scene(self.scene.data, camera=cam.name, scene_option=self._option)
        flags = renderer.scene.flags
        flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = self.settings.reflections
        flags[mujoco.mjtRndFlag.mjRND_SHADOW] = self.settings.shadows
        radii = self._cull_radii.get(cam.name)
        if radii is not None:
            self._count_culled(
                cam.name,
                cull_outside_view(
                    renderer.scene,
                    radii,
                    cam.width / cam.height,
                    self._cull_boxes[cam.name],
                    self._occlusion[cam.name],
                ),
            )
        occlusion = self._occlusion.get(cam.name)
        skybox = flags[_SKYBOX]
        if occlusion is not None and occlusion.sky_hidden:  # one opaque box fills the picture
            flags[_SKYBOX] = 0
        try:
            return self._draw_views(renderer, cam, extras)
        finally:
            flags[_SKYBOX] = skybox

    def _draw_views(self, renderer: mujoco.Renderer, cam: CameraSpec, extras: bool) -> CameraViews:
        layer = self._layer(cam)
        if layer is None:
            rgb = self._render_rgb(renderer, cam)
        else:
            rgb = layer.render(renderer, self.scene.model, self.scene.data)
        depth = labels = None
        if extras and cam.depth:
            renderer.enable_depth_rendering()
            try:
                depth = renderer.render()
            finally:
                renderer.disable_depth_rendering()
        if extras and cam.segmentation != "none":
            renderer.enable_segmentation_rendering()
            try:
                ids = renderer.render()  # [H, W, 2]: (object id, object type), -1 for nothing
            finally:
                renderer.disable_segmentation_rendering()
            labels = self._labels(ids, cam.segmentation)
        return CameraViews(rgb, depth, labels)

    def _render_rgb(self, renderer: mujoco.Renderer, cam: CameraSpec) -> np.ndarray:
        """`renderer.render()` (a new array, upright), less the scene's elements of negative
        alpha (robosuite hides its sites so; MuJoCo leaves out an alpha of 0 itself) where
        culling is on.

        MuJoCo draws such an element in its blended pass with no weight: no colour changes, but
        it still costs its faces (a site sphere is ~900). They are left out only when nothing
        else see-through is drawn, so the blended pass has nothing left whose order or result
        they could touch; then the picture is the same bit for bit (tested). The depth and
        label passes draw every element as opaque, and keep them: they show there. Shadows
        would show them too: culling, and with it this, is off where a light casts shadows
        (`culling_is_exact`)."""
        view = geom_view(renderer.scene) if cam.name in self._cull_radii else None
        if view is None:
            return renderer.render()
        kinds, alpha = view["type"], view["rgba"][:, 3]
        drawn = kinds != _GEOM_NONE
        unseen = drawn & (alpha <= 0)
        if not unseen.any() or np.any(
            drawn & (alpha > 0) & ((alpha < 1) | (view["transparent"] != 0))
        ):
            return renderer.render()
        types = kinds[unseen]  # a copy
        kinds[unseen] = _GEOM_NONE
        try:
            return renderer.render()
        finally:
            kinds[unseen] = types

    def _count_culled(self, camera: str, geoms: list[int]) -> None:
        counts = self.culled[camera]
        counts[0] += 1
        counts[1] += len(geoms)
        counts[2] += int(self._geom_faces[camera][geoms].sum())

    def _labels(self, ids: np.ndarray, mode: str) -> np.ndarray:
        is_geom = ids[..., 1] == mujoco.mjtObj.mjOBJ_GEOM
        table = self._label_tables[mode]
        return np.where(is_geom, table[np.where(is_geom, ids[..., 0], 0)], 0)

    def render_frames(self, states: np.ndarray) -> EpisodeFrames:
        """Encoded frames per camera and kind for every state of [T, N] states."""
        frames = EpisodeFrames()
        pending: deque[Future] = deque()
        for state in states:
            self.scene.set_pose(state)  # positions only: all a picture shows
            views = self.render_views()
            if self._pool is None:
                self._collect(frames, self._encode_views(views))
                continue
            pending.append(self._pool.submit(self._encode_views, views))
            if len(pending) > MAX_PENDING_ENCODES:
                self._collect(frames, pending.popleft().result())
        while pending:
            self._collect(frames, pending.popleft().result())
        return frames

    def render_states(self, states: np.ndarray) -> dict[str, list[bytes]]:
        """JPEG frames per camera for every state of [T, N] states (`render_frames`' images)."""
        return self.render_frames(states).images

    def _encode_views(self, views: dict[str, CameraViews]) -> dict[str, dict[str, bytes]]:
        encoded: dict[str, dict[str, bytes]] = {}
        for cam in self.cameras:
            view = views[cam.name]
            one = {"images": encode_jpeg(view.rgb, self.settings.jpeg_quality)}
            if view.depth is not None:
                one["depth"] = encode_depth_png(view.depth)
            if view.labels is not None:
                one["segmentation"] = encode_segmentation_png(
                    view.labels, segmentation_bits(cam.segmentation)
                )
            encoded[cam.name] = one
        return encoded

    @staticmethod
    def _collect(frames: EpisodeFrames, encoded: dict[str, dict[str, bytes]]) -> None:
        for camera, kinds in encoded.items():
            for kind, data in kinds.items():
                getattr(frames, kind).setdefault(camera, []).append(data)

    def close(self) -> None:
        for renderer in self._renderers.values():
            renderer.close()
        self._renderers.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def keep_freed_heap() -> bool:
    """Stop glibc's malloc from giving the renderer's per-frame buffers back to the kernel.

    Mesa's llvmpipe allocates and frees megabytes of vertex and bin buffers per frame; with
    glibc's defaults (a trim threshold of 128 KiB growing with use) a process whose heap ends
    at those buffers shrinks it at every free and takes a page fault per 4 KiB page at the next
    frame: measured on Stack, agentview 84 px, 1,475 minor faults and ~30 % of the frame's CPU
    time (19.5 ms against 14.7 ms for the same renderer made second, with 0 faults). Fixed
    thresholds (mallopt, glibc's documented tunables; GLIBC_TUNABLES does the same from the
    environment) keep up to TRIM_THRESHOLD freed at the heap's top. Once per process; False
    where the C library is not glibc (nothing done).
    """
    global _heap_kept
    if _heap_kept is None:
        try:
            libc = ctypes.CDLL(None)
            libc.gnu_get_libc_version  # noqa: B018  (AttributeError where libc is not glibc)
            _heap_kept = bool(
                libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
                and libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
            )
        except (OSError, AttributeError):
            _heap_kept = False
    return _heap_kept


def detail_model(
    scene: Scene, cameras: Sequence[CameraSpec], detail: str | int
) -> tuple[mujoco.MjModel | None, DetailReport]:
    """The render model for `render.detail` (None: draw the physics model's meshes) and what
    was done to the meshes. A model without an XML source (a saved scene file) is drawn full."""
    report = DetailReport(str(detail))
    xml = scene_xml(scene)
    views = [(cam.name, cam.width, cam.height) for cam in cameras]
    budgets = budgets_for(detail, scene.model, scene.data, views) if cameras else None
    if budgets is None or xml is None:
        if budgets is not None:
            report.kept_full["no XML source for the model"] += len(budgets)
        return None, report
    chosen = plan_meshes(scene.model, budgets, report, cache=None)
    if not chosen:
        return None, report
    try:
        return make_render_model(xml, scene.model, chosen), report
    except ValueError as err:  # MjSpec's compile errors are ValueErrors too
        report.kept_full[f"render model: {err}"] += report.decimated
        report.faces_drawn = report.faces_full
        report.decimated = 0
        return None, report


def merge_reports(detail: str, reports: Sequence[DetailReport]) -> DetailReport:
    """One report for a renderer's cameras: counts summed over (camera, mesh) pairs."""
    merged = DetailReport(detail)
    for r in reports:
        merged.meshes += r.meshes
        merged.decimated += r.decimated
        merged.within_budget += r.within_budget
        merged.short_of_budget += r.short_of_budget
        merged.kept_full.update(r.kept_full)
        merged.faces_full += r.faces_full
        merged.faces_drawn += r.faces_drawn
    return merged


def scene_xml(scene) -> str | None:
    """The XML the scene's physics model was compiled from (robosuite's, processors applied)."""
    env = getattr(scene, "env", None)
    if env is None or not hasattr(env, "model"):
        return None
    xml = env.model.get_xml()
    for processor in getattr(env, "_xml_processors", ()):
        xml = processor(xml)
    return xml


def label_table(scene: Scene, mode: str) -> np.ndarray:
    """[ngeom] int64: the segmentation label of each geom in `mode` (see
    `demofactory.shards.format`)."""
    model = scene.model
    if mode == "geom":
        return np.arange(model.ngeom, dtype=np.int64) + 1
    if mode == "body":
        return model.geom_bodyid.astype(np.int64) + 1
    if mode != "object":
        raise ValueError(f"segmentation mode must be geom, body or object, got {mode!r}")
    body_label = np.zeros(model.nbody, dtype=np.int64)
    for index, body in enumerate(scene.bodies.values(), start=1):
        body_label[body] = index
    for body in range(1, model.nbody):  # parents come before children in MuJoCo's body order
        if body_label[body] == 0:
            body_label[body] = body_label[model.body_parentid[body]]
    return body_label[model.geom_bodyid]


def encode_jpeg(image: np.ndarray, quality: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()
