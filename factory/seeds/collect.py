"""`factory collect SPEC --out demo.hdf5`: seed demos by teleoperation, in robosuite's viewer.

    spec (scene: or task.env) ──► robosuite env with a viewer; a scene: section draws a new
                                  layout from its placement ranges at every reset
      ──► per demo: reset ──► loop: device.input2action() (robosuite's Keyboard, SpaceMouse or
          any robosuite Device) ──► the robot's action vector [7] ──► state recorded, env.step,
          viewer drawn
          ──► ends when the device asks for a reset (the demo is dropped) or the task's success
              has held for `HOLD_STEPS` steps (the demo is kept), or at the horizon (dropped)
      ──► robosuite's raw collection hdf5: data/demo_N/{states, actions} + model_file, the
          env_info robosuite's own collection script writes; a temporary name, then renamed

Two arms (`task.two_arm`): the env holds a pair of task.robot in the spec's env_configuration,
and the device drives one of them at a time, `device.active_robot` (robosuite's keyboard and
SpaceMouse switch it with `=`). As robosuite's collect_human_demonstrations builds it, the
action [14] is each robot's action vector, robot 0 (right) first: the active robot's from the
device, every other robot's holding still (no arm motion, its last gripper command)
(`two_arm_action`).

Keyboard controls (robosuite 1.5's `Keyboard`): the arrow keys move in the table's plane, `.` and
`;` down and up, `e`/`r`, `y`/`h`, `o`/`p` rotate (roll, pitch, yaw), space toggles the gripper,
`=` switches the active robot (two arms), q drops the demo and resets. Tests pass a scripted
`Device` subclass instead (no display).
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import h5py
import numpy as np
from demofactory.errors import UserError
from demofactory.robots import repairs as robot_repairs
from demofactory.seeds.script import check_output, env_info
from demofactory.simulation.bimanual import TwoArmScene
from demofactory.simulation.scene import Scene
from demofactory.specs.arms import robot_list
from demofactory.specs.spec import SceneSpec

HOLD_STEPS = 10  # as robosuite's collect_human_demonstrations: success held this long ends a demo


def check_display() -> None:
    """A UserError (one line) unless GLFW can open robosuite's viewer window here: without a
    display robosuite prints a GLFW error on stdout and exits 1."""
    import re
    import warnings

    import glfw

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ok = glfw.init()
    if ok:
        glfw.terminate()  # robosuite's viewer initializes it again
        return
    said = [str(w.message) for w in caught] or ["glfw.init() failed"]
    why = re.sub(r"^\(\d+\) b?['\"](.*)['\"]$", r"\1", said[-1])
    raise UserError(
        f"collect: cannot open robosuite's viewer window ({why}); run it on a machine with a "
        "display (or X forwarding), or record seed demos without one: `factory script SPEC`"
    )


def make_collect_env(spec: SceneSpec, viewer: bool):
    """The spec's env for teleoperation: random layouts for a scene, robosuite's viewer if asked."""
    import robosuite
    from demofactory.simulation.scene_build import env_kwargs  # robosuite: as the imports above
    from robosuite.controllers import load_composite_controller_config

    robot_repairs.require_installed()  # the hands and arms generation builds (make_env)
    controller = load_composite_controller_config(controller="BASIC", robot=spec.task.robot)
    pair = {}
    if spec.task.two_arm is not None and spec.scene is None:  # as generation builds it (make_env)
        pair = {"env_configuration": spec.task.two_arm.configuration}
    robots = robot_list(spec.task)
    return robosuite.make(
        spec.task.env,
        robots=robots[0] if len(robots) == 1 else robots,
        controller_configs=controller,
        has_renderer=viewer,
        has_offscreen_renderer=False,
        render_camera=None,
        use_camera_obs=False,
        control_freq=spec.task.control_freq,
        horizon=spec.task.horizon,
        ignore_done=True,
        hard_reset=False,
        seed=spec.seed,
        **env_kwargs(spec, layout="random"),
        **pair,
    )


def make_device(kind: str, env):
    """robosuite's input device by name (keyboard needs a display, spacemouse the hardware)."""
    try:
        if kind == "keyboard":
            from robosuite.devices import Keyboard

            return Keyboard(env=env)
        from robosuite.devices import SpaceMouse

        return SpaceMouse(env=env)
    except Exception as err:  # pynput without a display, hid without the device
        raise UserError(f"--device {kind}: robosuite cannot open it ({err})") from None


def record_demo(scene: Scene, device, viewer: bool) -> tuple[np.ndarray, np.ndarray] | None:
    """One teleoperated demo from a fresh reset: (states [T, N], actions [T, 7]; [T, 14] on two
    arms, right first) float64, or None when the device reset or the horizon came before the
    success held."""
    env = scene.env
    env.reset()
    two_arms = isinstance(scene, TwoArmScene)
    if two_arms:
        scene.rebind_arms()  # robosuite's reset rebuilt the controllers
    scene.mark_start()
    robot = env.robots[0]
    device.start_control()
    grippers = held_grippers(env) if two_arms else None
    states, actions, held = [], [], 0
    for _ in range(scene.spec.task.horizon):
        active = device.active_robot  # the robot input2action reads it for (a key may switch it)
        active_arm = device.active_arm  # and its arm (GR-1: robosuite's keyboard switches it)
        with _torso_lookup(env):
            inputs = device.input2action()
        if inputs is None:
            return None
        if two_arms:
            action = two_arm_action(env, active, inputs, grippers, active_arm)
        else:
            arm = robot.arms[0]
            inputs = dict(inputs)
            inputs[arm] = inputs[f"{arm}_delta"]
            action = robot.create_action_vector(inputs)
        states.append(scene.get_state())
        # recorded in the dataset's order (per arm: arm, then its gripper), stepped in robosuite's
        ours = scene.from_env_action(action) if two_arms else action
        actions.append(np.asarray(ours, dtype=np.float64))
        env.step(action)
        if two_arms:
            scene.note_grippers(ours)
        else:
            scene.gripper_closed = bool(action[-1] * scene.gripper_sign > 0)
        if viewer:
            env.render()
        held = held + 1 if scene.success() else 0
        if held >= HOLD_STEPS:
            return np.stack(states), np.stack(actions)
    return None


@contextmanager
def _torso_lookup(env):
    """robosuite 1.5.2's `Device.input2action` reads robot 0's torso controller on every robot
    with a `torso` property (GR1ArmsOnly has one and no torso controller: KeyError 'torso').
    For the call alone, such a robot's controllers list a stand-in whose `joint_dim` (0) makes
    the device skip its torso input, as it does for a robot without a one-joint torso."""
    parts = env.robots[0].composite_controller.part_controllers
    missing = hasattr(env.robots[0], "torso") and "torso" not in parts
    if missing:
        parts["torso"] = SimpleNamespace(joint_dim=0)
    try:
        yield
    finally:
        if missing:
            parts.pop("torso", None)


def held_grippers(env) -> list[dict[str, np.ndarray]]:
    """Per robot, the gripper command it holds while another robot is driven: open (what a
    device sends before its grasp is toggled) until the robot is driven itself.

    robosuite's collect_human_demonstrations starts them at 0, which leaves the fingers where
    the reset put them (a Panda's half open). -1 is what the device sends for a hand not yet
    closed: the idle hand opens as it would once driven, and its recorded command says open,
    as annotation and generation read gripper commands."""
    out = []
    for robot in env.robots:
        commands = {}
        for arm in robot.arms:
            gripper = robot.gripper[arm]
            if gripper.dof == 0:
                continue
            grasp_qpos = getattr(gripper, "grasp_qpos", None)
            commands[f"{arm}_gripper"] = (
                np.asarray(grasp_qpos[-1], dtype=np.float64)
                if grasp_qpos is not None
                else np.full(gripper.dof, -1.0)
            )
        out.append(commands)
    return out


def two_arm_action(
    env, active: int, inputs: dict, grippers: list[dict], active_arm: str | None = None
) -> np.ndarray:
    """The env's whole action in robosuite's order ([robots x 7] for a pair; GR1ArmsOnly's 24)
    from the active robot's `input2action` dict.

    As robosuite's collect_human_demonstrations: the active robot's action vector from the
    device's delta inputs, every other robot's from its held gripper command alone (zero arm
    deltas: its OSC goal stays where it is); the active robot's gripper command becomes the one
    it holds afterwards. One robot with two arms (`active_arm` the driven one): the other arm's
    delta is zero and its hand keeps its held command. `grippers` (`held_grippers`) is updated
    in place."""
    parts = []
    for i, robot in enumerate(env.robots):
        if i != active:
            parts.append(robot.create_action_vector(grippers[i]))
            continue
        driven = dict(inputs)
        for arm in robot.arms:
            driven[arm] = driven[f"{arm}_delta"]
            key = f"{arm}_gripper"
            if len(robot.arms) > 1 and arm != active_arm and key in grippers[i]:
                driven[key] = grippers[i][key]  # input2action zeroes an arm it does not drive
        parts.append(robot.create_action_vector(driven))
        for key in grippers[i]:
            if len(robot.arms) == 1 or key == f"{active_arm}_gripper":
                grippers[i][key] = np.asarray(driven[key], dtype=np.float64)
    return np.concatenate(parts)


def collect(
    spec: SceneSpec,
    out: Path,
    demos: int,
    device_factory: Callable,
    viewer: bool = True,
    log: Callable[[str], None] = lambda line: None,
    max_tries: int | None = None,
    force: bool = False,
) -> list[int]:
    """Record `demos` successful demos into `out` (robosuite's raw hdf5); their lengths."""

    check_output(out, force, command="collect", spec_path=spec.path)
    if viewer:
        check_display()
    env = make_collect_env(spec, viewer)
    scene = TwoArmScene(spec, env=env) if spec.task.two_arm is not None else Scene(spec, env=env)
    device = device_factory(env)
    kept, tries = [], 0
    while len(kept) < demos:
        tries += 1
        if max_tries is not None and tries > max_tries:
            raise UserError(f"{out}: {len(kept)} of {demos} demos after {max_tries} tries")
        demo = record_demo(scene, device, viewer)
        log(f"demo {len(kept) + 1}: {'kept' if demo else 'dropped'}")
        if demo is not None:
            kept.append(demo)
    save_raw_hdf5(out, spec, env.sim.model.get_xml(), kept)
    env.close()
    return [len(actions) for _, actions in kept]


def save_raw_hdf5(path: Path, spec: SceneSpec, model_xml: str, demos: list) -> None:
    """robosuite's collection layout, written to a temporary name and renamed."""
    import robosuite

    now = datetime.datetime.now()
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with h5py.File(tmp, "w") as f:
            data = f.create_group("data")
            data.attrs.update(
                {
                    "date": now.strftime("%m-%d-%Y"),
                    "time": now.strftime("%H:%M:%S"),
                    "repository_version": robosuite.__version__,
                    "env": spec.task.env,
                    "env_info": env_info(spec),
                    "source": f"factory collect {spec.path.name}",
                }
            )
            for i, (states, actions) in enumerate(demos, start=1):
                group = data.create_group(f"demo_{i}")
                group.attrs["model_file"] = model_xml
                group.create_dataset("states", data=states, compression="gzip")
                group.create_dataset("actions", data=actions, compression="gzip")
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise UserError(f"{path}: cannot write ({err.strerror or err})") from None
