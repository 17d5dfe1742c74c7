"""Which sign of the gripper command closes a robot's hand, measured on its robosuite model.

A recorded action's last column is the raw command robosuite takes, and nothing in robosuite
says which sign closes a hand (the Jaco's `format_action` docstring says -1 opens, its code
subtracts the command). Rather than a table per gripper, the sign is measured at the pads:

    reset ──► +1 for PROBE_STEPS (arm held) ──► pad gap g+
    reset ──► -1 for PROBE_STEPS            ──► pad gap g-
    sign = +1 when g+ < g- (the +1 command brought the pads together), else -1

Measured on robosuite 1.5.2 (Lift): +1 closes every shipped parallel hand, the Jaco's too
(its fingertips meet on +1; rendered and checked by eye). The Jaco's hand differs in speed,
not sign: its command moves 0.01 a step, ~200 steps from open to shut
(`demofactory.seeds.cross_robot.closing_steps`). The measurement costs 2 * PROBE_STEPS control steps
and two resets, once per gripper class per process (`closing_sign` caches it).

What uses it: `Scene.gripper_closed` and annotation read `action * sign > 0`;
`demofactory.seeds.cross_robot` flips a demo's gripper column when it is carried to a hand of the
other sign; scripted waypoints' open/close become the hand's own command.
"""

from __future__ import annotations

from typing import Any, Protocol

import mujoco
import numpy as np
from demofactory.robots.geom_distance import surface_distance


class Hand(Protocol):
    """What the measurement drives (`demofactory.simulation.scene.Scene` is one): an env's robot,
    its model and
    data, resets, control steps, and the geom ids of the two finger pads."""

    env: Any  # the robosuite env: its first robot's gripper class keys the cache
    model: mujoco.MjModel
    data: mujoco.MjData

    def reset(self) -> object: ...

    def step(self, action: np.ndarray) -> object: ...

    def finger_pads(self) -> list[set[int]]: ...


# Control steps per probe: 8 part the two probes' pad gaps by over 1 cm on every robosuite hand
# (measured from reset on Lift: Panda 7.2, Sawyer 4.4, IIWA 12.4, Jaco 1.4 cm, the slowest: its
# command moves 0.01 a step; UR5e and Kinova3 5.3 cm before demofactory.robots.gripper_fixes, more
# since).
PROBE_STEPS = 8
PAD_DISTMAX = 1.0  # metres: finger pads further apart read this

_SIGNS: dict[str, int] = {}  # gripper class name -> closing sign, measured once per process


def closing_sign(scene: Hand) -> int:
    """+1 when robosuite's gripper command +1 closes `scene`'s hand, -1 when it opens it.

    Resets the scene when it measures (only the first time a gripper class is seen)."""
    robot = scene.env.robots[0]
    name = type(robot.gripper[robot.arms[0]]).__name__
    if name not in _SIGNS:
        _SIGNS[name] = measure_closing_sign(scene)
    return _SIGNS[name]


def measure_closing_sign(scene: Hand) -> int:
    """The closing sign of `scene`'s gripper, from the pad gaps after +1 and -1 commands."""
    gaps = {}
    for sign in (1.0, -1.0):
        scene.reset()  # robosuite's reset also zeroes a speed-limited hand's command
        action = np.zeros(7)
        action[-1] = sign
        for _ in range(PROBE_STEPS):
            scene.step(action)
        gaps[sign] = pad_gap(scene)
    scene.reset()
    if abs(gaps[1.0] - gaps[-1.0]) < 1e-4:
        raise RuntimeError(
            f"gripper commands +1 and -1 leave the finger pads {gaps[1.0]:.4f} m and "
            f"{gaps[-1.0]:.4f} m apart: cannot tell which closes the hand"
        )
    return 1 if gaps[1.0] < gaps[-1.0] else -1


def pad_gap(scene: Hand) -> float:
    """Smallest surface distance between the left and right finger pads now (m).

    Through `geom_distance.surface_distance`: MuJoCo 3.9's `mj_geomDistance` reads exactly 0
    for some box pairs far apart (measured on the Jaco's index and thumb pads: at reset, 2.7 cm
    apart; while closing, 8.6 cm apart by their centres), which made that hand look shut when
    open (mujoco#3383)."""
    left, right = scene.finger_pads()
    return min(
        surface_distance(scene.model, scene.data, a, b, PAD_DISTMAX) for a in left for b in right
    )
