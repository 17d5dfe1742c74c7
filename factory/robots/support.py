"""Which robosuite robots the factory drives: one fixed-base arm with a gripper that can grasp.

Derived from the installed robosuite, not a hand-kept list: a robot qualifies when robosuite
builds it as a `FixedBaseRobot` with one arm, and its default gripper closes with one command
(no dexterous hand) onto left and right finger pads that exist in the gripper's model (the
grasp frame and the `grasped` predicate are measured on them). `robot_problem` says why any
other robot does not; `check_robot` turns that into one line naming `task.robot`.
"""

from __future__ import annotations

import functools

from demofactory.errors import SpecError

PADS = ("left_fingerpad", "right_fingerpad")


@functools.cache
def robot_problem(name: str, arms: int = 1) -> str | None:
    """Why robosuite's robot `name` cannot be `task.robot`; None when it can. `arms`: 2 for a
    two-armed robot of its own (task.two_arm.configuration single-robot: GR1ArmsOnly), whose
    hands may be dexterous (a multi-finger hand grasps with its thumb and fingers)."""
    import robosuite
    import robosuite.models.robots as robot_models
    from robosuite.models.grippers import GRIPPER_MAPPING
    from robosuite.robots import ROBOT_CLASS_MAPPING, FixedBaseRobot

    if name not in robosuite.ALL_ROBOTS:
        return "robosuite has no such robot"
    from robosuite.robots import LeggedRobot

    kind = ROBOT_CLASS_MAPPING.get(name)
    model = getattr(robot_models, name)() if kind is not None else None
    # robosuite's GR1ArmsOnly and GR1FixedLowerBody are LeggedRobots whose base is fixed (no
    # free joint, no leg joints): two arms on a fixed torso, which single-robot takes
    fixed_legged = (
        arms == 2
        and kind is not None
        and issubclass(kind, LeggedRobot)
        and "Floating" not in name
        and not any(j.get("type") == "free" for j in model.worldbody.iter("joint"))
        and not any(
            "leg" in (j.get("name") or "") or "knee" in (j.get("name") or "")
            for j in model.worldbody.iter("joint")
        )
    )
    if kind is None or not (issubclass(kind, FixedBaseRobot) or fixed_legged):
        what = kind.__name__ if kind is not None else "no robot class"
        return f"not a fixed-base arm ({what})"
    if len(model.arms) != arms:
        return f"{len(model.arms)} arm{'s' * (len(model.arms) > 1)}" + (
            " (bimanual)" if len(model.arms) > 1 else ""
        )
    for side in model.arms:
        gripper_name = model.default_gripper[side]
        gripper = GRIPPER_MAPPING[gripper_name]()
        if gripper.dof != 1 and arms == 1:
            return f"its hand {gripper_name} is dexterous ({gripper.dof} actuated DoF)"
        geoms = {g.get("name") for g in gripper.worldbody.iter("geom")}
        for pads in PADS:
            names = gripper.important_geoms.get(pads, [])
            if not names or not set(names) <= geoms:
                what = pads.replace("_", " ")
                return f"its gripper {gripper_name} has no {what} geoms to grasp with"
    return None


@functools.cache
def supported_robots(arms: int = 1) -> tuple[str, ...]:
    """Every robosuite robot `task.robot` may name (fixed base, finger pads): single-arm ones,
    or with `arms` 2 the two-armed ones (task.two_arm single-robot)."""
    import robosuite

    return tuple(sorted(r for r in robosuite.ALL_ROBOTS if robot_problem(r, arms) is None))


def check_robot(where, name: str, field: str = "task.robot", arms: int = 1) -> None:
    """A SpecError naming `field` and the robots that work, unless `name` is one of them."""
    problem = robot_problem(name, arms)
    if problem is not None:
        what = (
            "a single-arm robot with a parallel gripper"
            if arms == 1
            else "a fixed-base robot with two arms of its own (task.two_arm single-robot)"
        )
        raise SpecError(
            where,
            field,
            f"{name!r}: {problem}; expected {what}, one of: {', '.join(supported_robots(arms))}",
        )


ROBOT_PARTS = ("robot", "gripper", "mount", "fixed_mount")  # robosuite's robot body prefixes


def release_base_contacts(model, data) -> list[str]:
    """Stop the robot's static base geoms colliding when they touch its own moving links at rest.

    robosuite's Sawyer rests its first link on its base (link0 on base_col, in contact at the
    home pose): the friction there resists the shoulder joint, and the arm settles ~3 cm off
    every target (measured; with the contact gone, under 1 cm and Lift's grasps land). A base
    geom never moves, so nothing but the robot ever touches it on a table-top. Returns the
    released geoms' names (none on the Panda). `data` must hold the home pose, forward-computed.
    """
    import mujoco

    released = []
    for i in range(data.ncon):
        pair = (int(data.contact.geom1[i]), int(data.contact.geom2[i]))
        bodies = [int(model.geom_bodyid[g]) for g in pair]
        if not all(_robot_body(model, b) for b in bodies):
            continue
        for geom, body in zip(pair, bodies, strict=True):
            if _static(model, body) and model.geom_contype[geom] | model.geom_conaffinity[geom]:
                model.geom_contype[geom] = model.geom_conaffinity[geom] = 0
                released.append(mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_GEOM, geom) or "")
    return released


def _robot_body(model, body: int) -> bool:
    import mujoco

    while model.body_parentid[body] != 0:
        body = int(model.body_parentid[body])
    return (mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, body) or "").startswith(ROBOT_PARTS)


def _static(model, body: int) -> bool:
    """No joint between `body` and the world."""
    while body != 0:
        if model.body_jntnum[body]:
            return False
        body = int(model.body_parentid[body])
    return True
