"""Render recorded MuJoCo states for the spec's cameras and encode them as JPEG.

Only successful attempts reach this stage: their states are restored one by
one into the generation model, so a failed attempt never costs a frame. One
`mujoco.Renderer` per image size lives as long as the worker.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import mujoco
import numpy as np
from PIL import Image

from factory.sim import Scene
from factory.spec import CameraSpec, RenderSpec


class FrameRenderer:
    """Renders states of one `Scene` for a fixed list of cameras; reused across episodes."""

    def __init__(self, scene: Scene, cameras: Sequence[CameraSpec], settings: RenderSpec):
        self.scene, self.cameras, self.settings = scene, list(cameras), settings
        self._renderers: dict[tuple[int, int], mujoco.Renderer] = {}
        if self.cameras:
            scene.model.vis.quality.offsamples = settings.multisamples
            vis = scene.model.vis.global_
            # The offscreen buffer must hold the largest image asked for.
            vis.offwidth = max(vis.offwidth, *(c.width for c in self.cameras))
            vis.offheight = max(vis.offheight, *(c.height for c in self.cameras))

    def _renderer(self, cam: CameraSpec) -> mujoco.Renderer:
        size = (cam.height, cam.width)
        if size not in self._renderers:
            self._renderers[size] = mujoco.Renderer(self.scene.model, height=cam.height, width=cam.width)
        return self._renderers[size]

    def render_current(self) -> dict[str, np.ndarray]:
        """Images [H, W, 3] uint8, upright, of the scene's current state, per camera."""
        frames = {}
        for cam in self.cameras:
            renderer = self._renderer(cam)
            renderer.update_scene(self.scene.data, camera=cam.name)
            flags = renderer.scene.flags
            flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = self.settings.reflections
            flags[mujoco.mjtRndFlag.mjRND_SHADOW] = self.settings.shadows
            frames[cam.name] = renderer.render().copy()
        return frames

    def render_states(self, states: np.ndarray) -> dict[str, list[bytes]]:
        """JPEG frames per camera for every state of [T, N] states."""
        out: dict[str, list[bytes]] = {cam.name: [] for cam in self.cameras}
        for state in states:
            self.scene.set_state(state)
            for name, image in self.render_current().items():
                out[name].append(encode_jpeg(image, self.settings.jpeg_quality))
        return out

    def close(self) -> None:
        for renderer in self._renderers.values():
            renderer.close()
        self._renderers.clear()


def encode_jpeg(image: np.ndarray, quality: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()
