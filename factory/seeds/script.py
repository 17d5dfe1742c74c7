"""Scripted seed demos: object-relative waypoints executed by the generator's controller.

`factory script SPEC --out demo.hdf5` records seed demos without a person:

    spec `script.waypoints`  (pose relative to a named object, gripper command, steps)
      ──► per demo i, try t: the scene's reset layout (`base_state`, the same for every demo)
          + a placement drawn with seed (spec seed, i, t) (none for demo 0's first try), and on
          two arms with placement.joint_noise each arm joint's offset
      ──► per waypoint: its target from the object's pose when it starts (`waypoint_target`)
      ──► interpolated from the previous target, driven closed loop as delta OSC actions
          (the same `pose_to_delta_action` and `Scene.step` as generation), state recorded
          before each action
      ──► kept only if the task's success holds at the end (otherwise the next try)
      ──► robosuite's raw collection hdf5 (`save_demos`): data/demo_N/{states, actions},
          model_file and fixture_poses attributes; written to a temporary name, then renamed

Frames: poses are 4x4 world matrices (metres, radians). A top-down grasp (`TOP_DOWN`) points the
grip site's z axis down the world's -z with the fingers closing along world y, the Panda's home
orientation in robosuite without its 7 degree tilt.
"""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
from demofactory.errors import SpecError, UserError
from demofactory.generators.mimicgen import sample_placement
from demofactory.generators.poses import (
    axis_angle_to_mat,
    interpolate_poses,
    make_pose,
    mat_to_axis_angle,
    pose_to_delta_action,
)
from demofactory.simulation.scene import Placement, Scene
from demofactory.specs.adapters import placement_params
from demofactory.specs.arms import robot_list
from demofactory.specs.spec import SceneSpec, WaypointSpec

# Grip-site rotation of a top-down grasp at yaw 0 (columns: the site's x, y, z in the world).
TOP_DOWN = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, -1.0]])
GRIPPER_ACTION = {"open": -1.0, "close": 1.0}  # robosuite's gripper command


@dataclass(frozen=True)
class ScriptedDemo:
    """One recorded demo.

    states: [T, N] float64 MuJoCo state (time, qpos, qvel) before each action.
    actions: [T, 7] float64 OSC_POSE deltas (3 position, 3 axis-angle, 1 gripper) in [-1, 1];
        on two arms each arm's part, right first: [T, 14], or [T, 12] for arms without grippers.
    fixture_poses: root body -> [x, y, z, qw, qx, qy, qz] of bodies robosuite re-poses at reset.
    """

    states: np.ndarray
    actions: np.ndarray
    fixture_poses: dict[str, list[float]]
    placement: dict  # Placement.to_json() of the try that succeeded
    seed: int  # the seed of that try
    tries: int  # tries it took (1 = the first)

    @property
    def length(self) -> int:
        return len(self.actions)


# --- pose math (pure) -------------------------------------------------------------------------


def rpy_to_mat(rpy) -> np.ndarray:
    """[3, 3] rotation of roll, pitch, yaw applied about x, then y, then z (R = Rz Ry Rx)."""
    r, p, y = (float(v) for v in rpy)
    rx = np.array([[1, 0, 0], [0, np.cos(r), -np.sin(r)], [0, np.sin(r), np.cos(r)]])
    ry = np.array([[np.cos(p), 0, np.sin(p)], [0, 1, 0], [-np.sin(p), 0, np.cos(p)]])
    rz = np.array([[np.cos(y), -np.sin(y), 0], [np.sin(y), np.cos(y), 0], [0, 0, 1]])
    return rz @ ry @ rx


def yaw_of(rot: np.ndarray) -> float:
    """Rotation about the world z axis of a [3, 3] rotation (its x axis projected on the floor)."""
    return float(np.arctan2(rot[1, 0], rot[0, 0]))


def nearer_half_turn(rot: np.ndarray, home: np.ndarray = TOP_DOWN) -> np.ndarray:
    """Of `rot` and `rot` turned half about its own z (the same parallel-gripper grasp), the one
    whose rotation from the top-down home orientation is smaller: no needless wrist turns.

    home: the arm's top-down home orientation; `TOP_DOWN` for a robot facing +x, turned with the
    robot's base otherwise (robosuite's `opposed` pairs face +y and -y)."""
    flipped = rot @ np.diag([-1.0, -1.0, 1.0])
    angle = [np.linalg.norm(mat_to_axis_angle(home.T @ r)) for r in (rot, flipped)]
    return flipped if angle[1] < angle[0] - 1e-9 else rot


def waypoint_target(
    point: WaypointSpec,
    object_pose: np.ndarray | None,
    previous: np.ndarray,
    home: np.ndarray = TOP_DOWN,
    start: np.ndarray | None = None,
) -> np.ndarray:
    """[4, 4] world target of a waypoint.

    object_pose: the `relative_to` object's pose now ([4, 4]; None when the waypoint has none).
    previous: the previous target (the robot's pose before the first waypoint).
    home: the arm's top-down home orientation (`nearer_half_turn`).
    start: [3, 3] the hand's orientation when the demo started (orientation: start).
    """
    if point.relative_to is None:
        target = previous.copy()
        target[:3, 3] += point.pos
        return target
    if object_pose is None:
        raise ValueError(f"waypoint relative to {point.relative_to!r} needs that object's pose")
    if point.orientation == "object":
        frame = object_pose[:3, :3]
    elif point.orientation == "object_yaw":
        frame = rpy_to_mat((0.0, 0.0, yaw_of(object_pose[:3, :3])))
    else:
        frame = np.eye(3)
    turn = axis_angle_to_mat(np.asarray(point.turn, dtype=np.float64))
    pos = object_pose[:3, 3] + frame @ turn @ np.asarray(point.pos, dtype=np.float64)
    if point.orientation == "start":
        if start is None:
            raise ValueError("orientation: start needs the hand's orientation at the start")
        return make_pose(pos, turn @ start @ rpy_to_mat(point.rot))
    rot = frame @ turn @ rpy_to_mat(point.rot) @ TOP_DOWN
    if point.orientation != "object":
        rot = nearer_half_turn(rot, home)
    return make_pose(pos, rot)


def demo_seed(spec_seed: int, demo: int, attempt: int) -> int:
    """A 63-bit seed from (spec seed, demo index, try): the same demo gets the same draws."""
    state = np.random.SeedSequence([spec_seed, demo, attempt]).generate_state(2, dtype=np.uint32)
    return int((int(state[0]) << 31) ^ int(state[1]))


# --- execution --------------------------------------------------------------------------------


def run_waypoints(scene: Scene, waypoints: list[WaypointSpec]) -> tuple[np.ndarray, np.ndarray]:
    """Execute waypoints from the scene's current state; (states [T, N], actions [T, 7]) float64."""
    max_dpos, max_drot, frame = scene.controller_limits()
    states, actions = [], []
    previous = scene.eef_pose()
    start = previous[:3, :3].copy()
    for point in waypoints:
        obj = scene.object_pose(point.relative_to) if point.relative_to is not None else None
        target = waypoint_target(point, obj, previous, start=start)
        grip = GRIPPER_ACTION[point.gripper] * scene.gripper_sign  # Jaco closes on -1
        for pose in interpolate_poses(previous, target, point.steps):
            action = np.append(
                pose_to_delta_action(pose, scene.eef_pose(), max_dpos, max_drot, frame), grip
            )
            states.append(scene.get_state())
            actions.append(action)
            scene.step(action)
        previous = target
    return np.stack(states), np.stack(actions)


def run_arm_waypoints(
    scene: Scene, arms: dict[str, list[WaypointSpec]]
) -> tuple[np.ndarray, np.ndarray]:
    """Two arms' waypoints side by side from the current state (`TwoArmScene`): each arm its own
    list from step 0, an arm whose list ended holding its last target and gripper command;
    (states [T, N], actions [T, scene.action_dim], right first: 7 an arm, 6 without a gripper)
    float64."""
    order = list(scene.arms)
    plans = {arm: _arm_plan(scene, arm, arms.get(arm, [])) for arm in order}
    states, actions = [], []
    for _ in range(max(len(_steps(points)) for points in arms.values())):
        action = np.concatenate([next(plans[arm]) for arm in order])
        states.append(scene.get_state())
        actions.append(action)
        scene.step(action)
    return np.stack(states), np.stack(actions)


def _steps(points: list[WaypointSpec]) -> range:
    return range(sum(point.steps for point in points))


def _arm_plan(scene, arm: str, points: list[WaypointSpec]):
    """A generator of one arm's actions ([7], [6] without a gripper): each waypoint's target
    taken when it starts (from the object's pose then, as `run_waypoints` does), interpolated,
    closed loop; then held."""
    max_dpos, max_drot, frame = scene.controller_limits_of(arm)
    previous = scene.eef_pose_of(arm)
    start = previous[:3, :3].copy()
    home = scene.base_rotation_of(arm) @ TOP_DOWN
    width = scene.hand_width_of(arm)  # a hand: the same command to each of its finger DoFs
    grip = [GRIPPER_ACTION["open"] * scene.gripper_sign] * width
    for point in points:
        obj = scene.object_pose(point.relative_to) if point.relative_to is not None else None
        target = waypoint_target(point, obj, previous, home, start)
        grip = [GRIPPER_ACTION[point.gripper] * scene.gripper_sign] * width
        for pose in interpolate_poses(previous, target, point.steps):
            now = scene.eef_pose_of(arm)
            yield np.append(pose_to_delta_action(pose, now, max_dpos, max_drot, frame), grip)
        previous = target
    while True:  # done before the other arm: hold the last target
        now = scene.eef_pose_of(arm)
        yield np.append(pose_to_delta_action(previous, now, max_dpos, max_drot, frame), grip)


def base_state(scene: Scene) -> np.ndarray:
    """[N] the layout every demo starts from: the scene's reset, before any placement offset.

    Generation starts its attempts from the first seed demo's first state plus a placement; demos
    drawn around one layout (not robosuite's fresh draw per reset) keep every seed a close source.
    """
    scene.reset_to(None, Placement({}))
    return scene.get_state()


def _placement(scene: Scene, base: np.ndarray, index: int, attempt: int, seed: int) -> Placement:
    """No offsets on demo 0's first try (the base layout itself); else a draw from `placement:`."""
    if index == 0 and attempt == 0:
        return Placement({})
    scene.set_state(base)
    start_xy = {name: scene.object_pose(name)[:2, 3] for name in scene.spec.objects}
    draws = placement_params(scene.spec.placement)
    return sample_placement(draws, start_xy, np.random.default_rng(seed))


def record_demo(
    scene: Scene, index: int, base: np.ndarray, log: Callable[[str], None] = lambda line: None
) -> ScriptedDemo:
    """Demo `index` of the spec's script from the `base` layout; tries placements till one works."""
    spec = scene.spec
    script = spec.script
    reasons = []
    for attempt in range(script.tries):
        seed = demo_seed(spec.seed, index, attempt)
        placement = _placement(scene, base, index, attempt, seed)
        scene.reset_to(base, placement)
        noise = spec.placement.joint_noise  # two arms only (load_spec refuses it on one)
        if noise and (index or attempt):  # as placements: none on demo 0's first try
            scene.offset_joints(scene.joint_offsets(noise, np.random.default_rng([seed, 1])))
        fixtures = scene.fixture_poses()  # after the reset: the poses this demo runs in
        try:
            if script.arms:
                states, actions = run_arm_waypoints(scene, dict(script.arms))
            else:
                states, actions = run_waypoints(scene, list(script.waypoints))
            why = _failure(scene, states)
        except Exception as err:  # MuJoCo instabilities and controller errors end this try only
            states, actions, why = (
                np.zeros((0, scene.state_size)),
                np.zeros((0, getattr(scene, "action_dim", 7))),
                f"simulator error: {err}",
            )
        log(f"demo {index}, try {attempt + 1}: {why or 'success'} ({len(actions)} steps)")
        if not why:
            return ScriptedDemo(states, actions, fixtures, placement.to_json(), seed, attempt + 1)
        reasons.append(why)
    raise SpecError(
        spec.path,
        "script.waypoints",
        f"demo {index}: the task's success did not hold after {script.tries} tries "
        f"(last: {reasons[-1]}); "
        "check the waypoints against the objects' sizes and the success check",
    )


def _failure(scene: Scene, states: np.ndarray) -> str:
    """'' when success holds after the last action and at the last recorded state; else why not."""
    if not np.isfinite(states).all() or not np.isfinite(scene.get_state()).all():
        return "simulator unstable"
    if not scene.success():
        return "task not done at the end"
    scene.set_state(states[-1])  # a reader restores recorded states: the last must show success
    if not scene.success():
        return "task done only after the last recorded state"
    return ""


def record_demos(
    scene: Scene, count: int, log: Callable[[str], None] = lambda line: None
) -> list[ScriptedDemo]:
    """`count` successful demos of the spec's script, demo i from seeds (spec seed, i, try)."""
    base = base_state(scene)
    return [record_demo(scene, index, base, log) for index in range(count)]


# --- the hdf5 file ----------------------------------------------------------------------------


def check_output(
    path: Path | str, force: bool, command: str = "script", spec_path: Path | None = None
) -> None:
    """`--out` of `script` or `collect` (a new .hdf5, or any file with `force`) by the one
    output rule (demofactory.outputs), before any work."""
    from demofactory.outputs import Output, check_outputs, spec_files

    check_outputs(command, [Output("--out", path)], inputs=spec_files(spec_path), force=force)


def env_info(spec: SceneSpec) -> str:
    """data.attrs["env_info"]: the JSON robosuite's collection script writes (env, robot, ...)."""
    from robosuite.controllers import load_composite_controller_config

    controller = load_composite_controller_config(controller="BASIC", robot=spec.task.robot)
    two = spec.task.two_arm
    info = {
        "env_name": spec.task.env,
        "robots": robot_list(spec.task),
        "controller_configs": controller,
        "control_freq": spec.task.control_freq,
    }
    if two is not None:
        info["env_configuration"] = two.configuration
    return json.dumps(info)


def save_demos(path: Path, spec: SceneSpec, model_xml: str, demos: list[ScriptedDemo]) -> None:
    """Write robosuite's raw collection format to a temporary name, then rename it to `path`."""
    import robosuite

    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    now = datetime.datetime.now()
    try:
        with h5py.File(tmp, "w") as f:
            data = f.create_group("data")
            data.attrs.update(
                {
                    "env": spec.task.env,
                    "env_info": env_info(spec),
                    "repository_version": robosuite.__version__,
                    "date": now.strftime("%m-%d-%Y"),
                    "time": now.strftime("%H:%M:%S"),
                    "source": f"factory script {spec.path.name} (seed {spec.seed})",
                }
            )
            for i, demo in enumerate(demos, start=1):
                group = data.create_group(f"demo_{i}")
                group.create_dataset(
                    "states", data=np.asarray(demo.states, dtype=np.float64), compression="gzip"
                )
                group.create_dataset(
                    "actions", data=np.asarray(demo.actions, dtype=np.float64), compression="gzip"
                )
                group.attrs.update(
                    {
                        "model_file": model_xml,
                        "fixture_poses": json.dumps(demo.fixture_poses),
                        "placement": json.dumps(demo.placement),
                        "seed": demo.seed,
                        "tries": demo.tries,
                    }
                )
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise UserError(f"{path}: cannot write ({err.strerror or err})") from None


def model_xml(scene: Scene) -> str:
    """The MJCF of the scene's model, as robosuite's collection script stores it."""
    return scene.env.sim.model.get_xml()


def make_scene(spec: SceneSpec) -> Scene:
    """The spec's scene (no seed demos needed), with resolve's messages for unusable envs."""
    if spec.task.two_arm is not None:  # a gripper predicate on bare wrists, before the env
        from demofactory.simulation.bimanual import gripper_problem

        problem = gripper_problem(spec)
        if problem:
            raise SpecError(spec.path, *problem)
    try:
        if spec.task.two_arm is not None:
            from demofactory.simulation.bimanual import TwoArmScene

            return TwoArmScene(spec)
        return Scene(spec)
    except SpecError:
        raise
    except Exception as err:  # robosuite raises bare exceptions for unusable combinations
        raise SpecError(
            spec.path,
            "task",
            f"robosuite cannot build {spec.task.env} with {spec.task.robot}: {err}",
        ) from None
