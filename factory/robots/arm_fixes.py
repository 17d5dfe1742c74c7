"""Repairs to robosuite arm models, applied before an env compiles them: the arm's base frame.

robosuite's arm controllers take their reference frame, the "base" of `input_ref_frame`, from a
site named `<arm>_center` in the robot's model (`CompositeController.get_controller_base_pose`),
read again at every simulation substep. A fixed-base arm should carry it on a body that does
not move. robosuite 1.5.2's IIWA puts it on `link_1`, the body its first joint turns:

    base ── fixed_base_link ──joint_1──► link_1 (right_center here) ──joint_2──► ...

so its controller's frame yaws with the arm's first joint (measured: 0.019 rad after three
control steps of Lift, and the site turns at up to 0.07 rad/s while the arm moves). Every delta
command is read in that turning frame, and within one control step the goal turns with the
joint that is chasing it. robosuite's `env.step` and the factory's fast loop (which reads the
frame once per control step, as every other shipped arm allows) part by 0.1 in 6 steps, so IIWA
ran on `env.step`; and its Stack attempts placed the top cube less well than the other arms'.

The repair moves the site to the deepest body above it that no joint moves (IIWA:
`fixed_base_link`), with the pose it had there with every joint at zero, which is IIWA's home
yaw: the frame at home is unchanged, and it no longer moves. Every other shipped arm already
has its site on such a body (Panda, Sawyer, UR5e, Kinova3, Jaco: checked by
`tests/robots/test_arm_fixes.py`), and `install` leaves them alone. Mobile and legged robots are not
touched: their arms' frames ride on a moving torso or base by design.

A demo recorded on robosuite's own IIWA keeps its states (a site is not a degree of freedom);
its actions were read in the turning frame, and the factory never replays recorded actions:
generation works from the recorded poses.
"""

from __future__ import annotations

import functools

import numpy as np

_ORIENTATION_ATTRIBUTES = ("euler", "axisangle", "xyaxes", "zaxis")


def _pose(element) -> tuple[np.ndarray, np.ndarray] | None:
    """(pos [3], rotation [3, 3]) of a body or site relative to its parent; None when its
    orientation is given other than as a quaternion (left alone: the compiler's angle units)."""
    import mujoco

    if any(element.get(key) is not None for key in _ORIENTATION_ATTRIBUTES):
        return None
    pos = np.array(element.get("pos", "0 0 0").split(), dtype=np.float64)
    quat = np.array(element.get("quat", "1 0 0 0").split(), dtype=np.float64)
    rotation = np.zeros(9)
    mujoco.mju_quat2Mat(rotation, quat / np.linalg.norm(quat))
    return pos, rotation.reshape(3, 3)


def _moves(body) -> bool:
    return any(child.tag in ("joint", "freejoint") for child in body)


def _chain(root, target) -> list | None:
    """The elements from `root` down to `target` (both included), or None when it is not there."""
    if root is target:
        return [root]
    for child in root:
        below = _chain(child, target)
        if below is not None:
            return [root, *below]
    return None


def center_on_fixed_link(robot_model) -> list[str]:
    """Move each arm's `<arm>_center` site of `robot_model` (a robosuite RobotModel, before it is
    compiled) off any body a joint moves, onto the deepest fixed body above it, keeping the pose
    it has with every joint at zero. Returns the names of the sites moved."""
    import mujoco
    from robosuite.utils.mjcf_utils import find_elements

    moved = []
    for arm in robot_model.arms:
        name = f"{robot_model.naming_prefix}{arm}_center"
        site = find_elements(robot_model.worldbody, "site", {"name": name}, return_first=True)
        if site is None:
            continue
        chain = _chain(robot_model.worldbody, site)
        bodies = chain[1:-1]  # the bodies from the model's root down to the site's own
        lowest_moving = max((i for i, body in enumerate(bodies) if _moves(body)), default=None)
        if lowest_moving is None or lowest_moving == 0:
            continue  # on a fixed body already (or nothing fixed above it: left alone)
        host = bodies[lowest_moving - 1]
        poses = [_pose(element) for element in (*bodies[lowest_moving:], site)]
        if any(pose is None for pose in poses):
            continue
        pos, rotation = np.zeros(3), np.eye(3)
        for offset, turn in poses:  # compose down the chain at zero joint angles
            pos, rotation = pos + rotation @ offset, rotation @ turn
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, rotation.reshape(-1))
        bodies[-1].remove(site)
        site.set("pos", " ".join(f"{v:.9g}" for v in pos))
        site.set("quat", " ".join(f"{v:.9g}" for v in quat))
        host.append(site)
        moved.append(name)
    return moved


@functools.cache  # one subclass per robot class: robosuite and isinstance checks see the same one
def _repaired_class(cls):
    def __init__(self, *args, **kwargs):
        cls.__init__(self, *args, **kwargs)
        center_on_fixed_link(self)

    # Built through robosuite's metaclass, which registers a robot class under its name: the
    # subclass keeps its parent's, so no new name appears among robosuite's robots.
    namespace = {
        "__init__": __init__,
        "__doc__": f"robosuite's {cls.__name__}, its arm frame on a fixed link (arm_fixes).",
        "__module__": __name__,
        "_factory_repaired": True,
    }
    return type(cls)(cls.__name__, (cls,), namespace)


def install() -> None:
    """Make robosuite build every fixed-base robot with its arm frame on a fixed link (idempotent).

    robosuite builds a robot's model from `REGISTERED_ROBOTS[name]`; the repaired subclass takes
    its entry (a robot already right is built the same, its model untouched).
    """
    from robosuite.models.robots.robot_model import REGISTERED_ROBOTS
    from robosuite.robots import ROBOT_CLASS_MAPPING, FixedBaseRobot

    for name, cls in list(REGISTERED_ROBOTS.items()):
        if getattr(cls, "_factory_repaired", False):
            continue
        kind = ROBOT_CLASS_MAPPING.get(name)
        if kind is not None and issubclass(kind, FixedBaseRobot):
            REGISTERED_ROBOTS[name] = _repaired_class(cls)
