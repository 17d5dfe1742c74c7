"""Seed demos recorded by another robot than the spec's `task.robot`.

A demo's MuJoCo states only fit a model built with the robot that recorded them, so:

    SeedDemo (robot R) ──► annotate in a scene built with R (the spec otherwise; one per R)
        ──► eef poses: R's grip site ──(R's grasp frame)──► task.robot's grip site
            (`demofactory.simulation.grasp_frame`: what is carried over is where the fingers were)
        ──► start state: task.robot at its own home pose, every other joint (objects,
            fixtures' joints) copied by name from the demo's first state
        ──► AnnotatedDemo for the spec's scene (object poses, gripper commands, subtask ends
            and predicates as annotated with R)

A demo of task.robot itself is annotated in the spec's scene as it always was.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import mujoco
import numpy as np
from demofactory.generators.poses import pose_inv
from demofactory.generators.records import AnnotatedDemo, SeedDemo
from demofactory.robots.gripper_sign import pad_gap
from demofactory.robots.support import ROBOT_PARTS, check_robot
from demofactory.seeds.annotate import annotate_demo
from demofactory.simulation.grasp_frame import (
    geom_corners,
    grasp_frame,
    nearer_half_turn,
    retarget_eef,
)
from demofactory.simulation.scene import Scene

# Control steps a gripper is commanded shut to find how far its fingers reach: every robosuite
# gripper is shut within 12 (20 Hz; measured from open on Lift, Panda to UR5e).
CLOSE_STEPS = 20
STILL = 5e-4  # metres per step: fingers moving less than this have stopped
# Steps the slowest hand takes to open or shut fully: the Jaco's command crosses its range of 2 at
# 0.01 a step (the others' within 12).
SLOW_STEPS = 250


def annotate_seed(scene: Scene, demo: SeedDemo, others: dict[str, Scene]) -> AnnotatedDemo:
    """`demo` annotated for generation in `scene`, whichever robot recorded it.

    others: scenes of other recording robots, built here on first need and kept by the caller
    (a robosuite env takes a second or more to build).
    """
    if demo.robot == scene.spec.task.robot:
        return annotate_demo(scene, demo)
    check_robot(demo.source, demo.robot, field="data.attrs['env_info'].robots")
    if demo.robot not in others:
        others[demo.robot] = recording_scene(scene, demo.robot)
    source = others[demo.robot]
    return retarget_demo(annotate_demo(source, demo), source, scene)


def recording_scene(scene: Scene, robot: str) -> Scene:
    """A scene built from `scene`'s spec with `robot` (annotation only: it never steps)."""
    task = scene.spec.task.model_copy(update={"robot": robot, "fast_control": False})
    return Scene(scene.spec.model_copy(update={"task": task}))


def retarget_demo(demo: AnnotatedDemo, source: Scene, target: Scene) -> AnnotatedDemo:
    """A demo annotated in `source` (another robot) as generation in `target` needs it."""
    source_home, source_grasp = home_grasp_frame(source)
    target_home, target_grasp = home_grasp_frame(target)
    target_grasp = nearer_half_turn(source_home, target_home, source_grasp, target_grasp)
    demo = replace(
        demo,
        eef_poses=retarget_eef(demo.eef_poses, source_grasp, target_grasp),
        start=start_state(demo.demo.states[0], source, target),
    )
    waits = {
        t: max(0, closing_steps(target, gap) - steps) for t, gap, steps in closes(demo, source)
    }
    return hold_steps(flip_gripper(demo, source.gripper_sign * target.gripper_sign), waits)


def flip_gripper(demo: AnnotatedDemo, sign: int) -> AnnotatedDemo:
    """`demo` with its gripper commands (and its actions' gripper column) times `sign`: -1 when
    the target robot's hand closes on the other sign (`demofactory.robots.gripper_sign`)."""
    if sign > 0:
        return demo
    actions = demo.demo.actions.copy()
    actions[:, -1] *= -1
    return replace(demo, demo=replace(demo.demo, actions=actions), gripper=-demo.gripper)


def closes(demo: AnnotatedDemo, scene: Scene) -> list[tuple[int, float, int]]:
    """(step, gap, steps) for each close command of the demo: the gap between the finger pads
    (m) where the fingers stopped on what they closed on, and the steps they took to get there."""
    commands = demo.gripper * scene.gripper_sign > 0
    found = []
    for t in np.flatnonzero(commands[1:] & ~commands[:-1]) + 1:
        gaps = []
        for state in demo.demo.states[t : t + CLOSE_STEPS * 2]:
            scene.set_state(state)
            gaps.append(pad_gap(scene))
        gaps = np.array(gaps)
        still = np.flatnonzero(np.abs(np.diff(gaps)) < STILL)
        stop = int(still[0]) if still.size else len(gaps) - 1
        found.append((int(t), float(gaps[stop]), stop))
    return found


def closing_steps(scene: Scene, gap: float) -> int:
    """Control steps `scene`'s gripper takes from fully open to a pad gap of `gap` m, the arm
    held (at most SLOW_STEPS).

    Fully open: commanded open until the pads stop parting. A demo closes a hand that has been
    commanded open for a while, and a speed-limited hand (the Jaco's command moves 0.01 a step)
    closes from there, not from wherever a reset left its command."""
    scene.reset()
    shut = np.zeros(7)
    shut[-1] = scene.gripper_sign
    robot = scene.env.robots[0]
    gripper = robot.gripper[robot.arms[0]]
    for _ in range(SLOW_STEPS):  # a speed-limited hand's command, saturated open (no physics)
        before = np.array(gripper.current_action, copy=True)
        gripper.format_action(-shut[-1:])
        if np.array_equal(before, gripper.current_action):
            break
    last, still = pad_gap(scene), 0
    for _ in range(SLOW_STEPS):  # then the fingers, until they stop parting
        scene.step(-shut)
        now = pad_gap(scene)
        still = still + 1 if abs(now - last) < STILL / 10 else 0
        if still >= 3:
            break
        last = now
    steps = 0
    while pad_gap(scene) > gap + STILL and steps < SLOW_STEPS:
        scene.step(shut)
        steps += 1
    scene.reset()
    return steps


def hold_steps(demo: AnnotatedDemo, waits: dict[int, int]) -> AnnotatedDemo:
    """`demo` with step t repeated `waits[t]` more times (the hand holds still while a slower
    gripper closes); subtask ends and starts move with the steps they follow."""
    if not any(waits.values()):
        return demo
    index = np.repeat(
        np.arange(demo.demo.length), [1 + waits.get(t, 0) for t in range(demo.demo.length)]
    )

    def moved(steps: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(int(np.searchsorted(index, s, side="left")) for s in steps)

    seed = replace(demo.demo, states=demo.demo.states[index], actions=demo.demo.actions[index])
    return replace(
        demo,
        demo=seed,
        eef_poses=demo.eef_poses[index],
        object_poses={name: poses[index] for name, poses in demo.object_poses.items()},
        gripper=demo.gripper[index],
        holds=None if demo.holds is None else demo.holds[index],
        subtask_ends=moved(demo.subtask_ends),
        subtask_starts=moved(demo.subtask_starts),
    )


def home_grasp_frame(scene: Scene) -> tuple[np.ndarray, np.ndarray]:
    """(grip-site pose [4, 4] at the robot's home pose, grasp frame [4, 4] in the grip site),
    measured after a reset, the gripper as robosuite opens it; the fingers' reach over a full
    close (CLOSE_STEPS commanded shut, the arm held). Measured once a scene: it depends on the
    robot alone, and each demo carried over asks for both robots' (a third of a mixed-robot
    spec's resolve time, 16 measurements for Lift's 4 demos on 3 robots)."""
    if getattr(scene, "_home_grasp_frame", None) is None:
        scene._home_grasp_frame = _measure_home_grasp_frame(scene)
    home, frame = scene._home_grasp_frame
    return home.copy(), frame.copy()


def _measure_home_grasp_frame(scene: Scene) -> tuple[np.ndarray, np.ndarray]:
    scene.reset()
    robot = scene.env.robots[0]
    gripper = robot.gripper[robot.arms[0]]
    root = mujoco.mj_name2id(scene.model, mujoco.mjtObj.mjOBJ_BODY, gripper.root_body)
    pads = scene.finger_pads()
    names = [
        g for side in ("left_finger", "right_finger") for g in gripper.important_geoms.get(side, [])
    ]
    fingers = {mujoco.mj_name2id(scene.model, mujoco.mjtObj.mjOBJ_GEOM, g) for g in names}
    fingers = sorted({g for g in fingers if g >= 0} | pads[0] | pads[1])
    home, data = scene.eef_pose(), scene.data
    left, right = (np.array([data.geom_xpos[g] for g in sorted(side)]) for side in pads)
    origin = data.xpos[root].copy()
    tips = [finger_corners(scene, fingers, home)]
    shut = np.zeros(7)
    shut[-1] = scene.gripper_sign
    for _ in range(CLOSE_STEPS):
        scene.step(shut)
        tips.append(finger_corners(scene, fingers, home))
    scene.reset()
    return home, grasp_frame(home, left, right, origin, np.concatenate(tips))


def finger_corners(scene: Scene, fingers: Sequence[int], home: np.ndarray) -> np.ndarray:
    """[8 F, 3] corners of the fingers' boxes, carried from the hand's pose now to `home`."""
    corners = np.concatenate([geom_corners(scene.model, scene.data, g) for g in fingers])
    now = pose_inv(scene.eef_pose())
    return corners @ (home[:3, :3] @ now[:3, :3]).T + (home[:3, :3] @ now[:3, 3] + home[:3, 3])


def start_state(state: np.ndarray, source: Scene, target: Scene) -> np.ndarray:
    """[N target] `target` after a reset (its robot at home), with every joint that is not the
    robot's set from `state` (a [N source] state of `source`) by joint name."""
    target.reset()
    out = target.get_state()
    src, dst = source.model, target.model
    for joint in range(src.njnt):
        name = mujoco.mj_id2name(src, mujoco.mjtObj.mjOBJ_JOINT, joint)
        if not name or _robot_joint(src, joint):
            continue
        other = mujoco.mj_name2id(dst, mujoco.mjtObj.mjOBJ_JOINT, name)
        if other < 0:
            continue
        size = _qpos_size(src.jnt_type[joint])
        a, b = int(src.jnt_qposadr[joint]), int(dst.jnt_qposadr[other])
        out[1 + b : 1 + b + size] = state[1 + a : 1 + a + size]
    return out


def _robot_joint(model: mujoco.MjModel, joint: int) -> bool:
    body = int(model.jnt_bodyid[joint])
    while model.body_parentid[body] != 0:
        body = int(model.body_parentid[body])
    return (mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, body) or "").startswith(ROBOT_PARTS)


def _qpos_size(kind: int) -> int:
    return {mujoco.mjtJoint.mjJNT_FREE: 7, mujoco.mjtJoint.mjJNT_BALL: 4}.get(kind, 1)
