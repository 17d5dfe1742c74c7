"""A bare MuJoCo model standing in for a `Scene` where the renderer's tests need no robosuite."""

from __future__ import annotations

import mujoco
import numpy as np
from demofactory.simulation.scene import forward_positions


class XmlScene:
    """What FrameRenderer reads from a Scene (model, data, bodies, set_state, set_pose), for a
    model made from an XML string. With no robosuite env there is no XML to decimate:
    `render.detail` other than full differs from full only by view culling and the static
    layer."""

    def __init__(self, xml: str, bodies: dict[str, int] | None = None):
        self.model = mujoco.MjModel.from_xml_string(xml)
        self.data = mujoco.MjData(self.model)
        self.bodies = bodies or {"mover": 1}

    def set_state(self, state: np.ndarray) -> None:
        self.data.qpos[:] = state
        mujoco.mj_forward(self.model, self.data)

    def set_pose(self, state: np.ndarray) -> None:
        self.data.qpos[:] = state
        forward_positions(self.model, self.data)
