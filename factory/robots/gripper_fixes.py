"""Repairs to robosuite gripper models, applied before an env compiles them: the Robotiq 85.

robosuite 1.5.2's Robotiq 85 (`robotiq_gripper_85.xml`, the default hand of UR5e and Kinova3)
is two four-bar linkages, one per finger, cut open: each inner finger hangs from its outer
knuckle, each inner knuckle from the base, and nothing joins the knuckle's far end to the finger
(no equality constraint), only a soft tendon spring and the contacts between their meshes. Both
passive joints drift: closed and opened on nothing, with the arm still, the pin ends sit 9 to 13
mm apart and creep further each cycle (measured, UR5e), the pads stall half-closed, and the
round-off amplified by the contacts parts the fast control loop from env.step by centimetres
(`demofactory.simulation.fast_step.CHECK_TOLERANCE`). This is robosuite's open issue #772
("Robotiq85 gripper is
not working correctly", 2025-11: even opening and closing with the arm still breaks it; its
Robotiq 140 and the Panda hand work); robosuite's PR #435, a new model after Menagerie's, is
unmerged.

    base ──finger_joint (actuated)──► outer knuckle ──inner_finger_joint──► inner finger (pad)
     └────inner_knuckle_joint──► inner knuckle ─ ─ ─ ─ added: equality connect ─ ─ ─ ─ ┘

The repair closes each loop the way MuJoCo Menagerie's Robotiq 2F-85 does, with a `connect`
equality between the knuckle's far end and the finger. The pin is where robosuite's own
kinematics put it: its Robotiq 85 descends from the ROS description, whose mimic joints (inner
knuckle = finger joint, inner finger = -finger joint) make each side a parallelogram, so the
knuckle's far end is the outer knuckle's finger pivot moved by the offset between the two
knuckles' base pivots (0.018 m, as Menagerie's follower pin). It also removes what fought the
closed chain, and starts the hand open on it:
- the two fixed tendons coupling each side's joints (a spring towards finger - 3 inner finger +
  inner knuckle = 0.001, limited to ±1): on the parallelogram that sum is 5x the finger joint;
- the contacts between a knuckle and the finger it now holds (their meshes overlap at the pin);
- robosuite's start pose (-0.026, -0.267, -0.2 per side: the finger joint below its range,
  the three joints off the linkage); the hand starts open on the linkage, all joints 0;
- no rotor inertia nor damping on the actuated joints (`ARMATURE`, `DAMPING`).

`ClosedLoopRobotiq85Gripper` is registered under robosuite's own gripper name (`install`), so
every robot whose default hand is the Robotiq 85 builds the repaired one, and its class is
still a `Robotiq85Gripper`.
"""

from __future__ import annotations

import functools

import numpy as np

# The equality's softness, as Menagerie's 2F-85 (MuJoCo clamps the time constant to two steps).
SOLREF = "0.005 1"
SOLIMP = "0.95 0.99 0.001"
# The actuated joints' rotor inertia, as Menagerie's driver joints: robosuite's Robotiq 85 has
# none, and its position servos (kp 20) on links of 3e-5 kg m² step past their joint range in
# one 2 ms step once the chain is closed (measured: 1.2 rad against a 0.8 limit, then the two
# fingers jam into each other). Damping near critical for kp 20 on it, 2 * sqrt(20 * 0.005):
# Menagerie's 0.1 rings (0.78, 0.43, 0.77 rad at successive control steps, measured).
ARMATURE = "0.005"
DAMPING = "0.6"
SIDES = ("left", "right")
_OUTER = {"left": "left_outer_knuckle", "right": "right_outer_knuckle"}


def _vector(element, key: str, default: str) -> np.ndarray:
    return np.array(element.get(key, default).split(), dtype=np.float64)


def _rotation(element) -> np.ndarray:
    import mujoco

    mat = np.zeros(9)
    mujoco.mju_quat2Mat(mat, _vector(element, "quat", "1 0 0 0"))
    return mat.reshape(3, 3)


def knuckle_pin(gripper, side: str) -> np.ndarray:
    """[3] where the `side` inner knuckle's far end meets its inner finger, in the knuckle's frame.

    On the parallelogram the inner knuckle is the outer knuckle's arm moved between the two
    base pivots: its pin is the outer knuckle's finger pivot, turned into the knuckle's frame.
    """
    outer, knuckle, finger = (
        _element(gripper, "body", name)
        for name in (_OUTER[side], f"{side}_inner_knuckle", f"{side}_inner_finger")
    )
    return _rotation(knuckle).T @ _rotation(outer) @ _vector(finger, "pos", "0 0 0")


def close_linkage(gripper) -> None:
    """Close the Robotiq 85 model's two four-bar linkages in its XML (before it is compiled)."""
    import xml.etree.ElementTree as ET

    prefix = gripper.naming_prefix
    for tendon in list(gripper.tendon):  # the springs on the open chain's joints
        gripper.tendon.remove(tendon)
    for side in SIDES:
        knuckle, finger = f"{prefix}{side}_inner_knuckle", f"{prefix}{side}_inner_finger"
        pin = " ".join(f"{v:.6g}" for v in knuckle_pin(gripper, side))
        attrib = {"name": f"{prefix}{side}_linkage", "body1": knuckle, "body2": finger}
        attrib.update(anchor=pin, solref=SOLREF, solimp=SOLIMP)
        gripper.equality.append(ET.Element("connect", attrib))
        pair = {"name": f"{prefix}{side}_linkage_pin", "body1": knuckle, "body2": finger}
        gripper.contact.append(ET.Element("exclude", pair))
    for name in ("finger_joint", "right_outer_knuckle_joint"):  # the two actuated joints
        joint = _element(gripper, "joint", name)
        joint.set("armature", ARMATURE)
        joint.set("damping", DAMPING)


def _element(gripper, tag: str, name: str):
    from robosuite.utils.mjcf_utils import find_elements

    attribs = {"name": gripper.naming_prefix + name}
    found = find_elements(root=gripper.worldbody, tags=tag, attribs=attribs, return_first=True)
    if found is None:
        raise ValueError(f"{type(gripper).__name__} has no {tag} {name!r}")
    return found


@functools.cache  # one class: robosuite and isinstance checks see the same one each time
def _closed_loop_class():
    from robosuite.models.grippers.robotiq_85_gripper import Robotiq85Gripper

    class ClosedLoopRobotiq85Gripper(Robotiq85Gripper):
        """robosuite's Robotiq 85 with its finger linkages closed (`close_linkage`)."""

        def __init__(self, idn=0):
            super().__init__(idn=idn)
            close_linkage(self)

        @property
        def init_qpos(self):
            return np.zeros(6)  # open, on the linkage

    return Robotiq85Gripper, ClosedLoopRobotiq85Gripper


def install() -> None:
    """Make robosuite build the repaired hands wherever it builds the broken ones (idempotent).

    robosuite's robots name their default gripper, and `gripper_factory` looks that name up in
    `GRIPPER_MAPPING`; the repaired class takes the broken class's entry.
    """
    from robosuite.models.grippers import GRIPPER_MAPPING

    broken, repaired = _closed_loop_class()
    for name, cls in list(GRIPPER_MAPPING.items()):
        if cls is broken:
            GRIPPER_MAPPING[name] = repaired
