"""Action spaces for `factory export --actions`: each episode's actions relabeled from its recorded
MuJoCo states, and each relabeling checked by replaying it with robosuite's matching controller.

    episode: sim_states [T, N] (before each action), actions [T, 7] (delta OSC, as generated)
      ──► delta_eef: the actions as they are
      ──► abs_eef:   per step the pose goal robosuite's delta OSC_POSE set from that action at
                     that state, in the robot's base frame: position [3] m, rotation as
                     rotation_6d [6] (the first two rows of the goal's rotation matrix, as
                     pytorch3d's matrix_to_rotation_6d and GR00T's `rotation_6d` read it),
                     gripper [1]
      ──► joint_pos: per step the arm's joint positions at the next recorded state [dof] rad,
                     gripper [1]
      ──► replay_from_start (the episode's recorded first state, placement, fixtures
          and physics draw) in a scene whose arm runs the matching controller:
            abs_eef   OSC_POSE, input_type absolute (rotation given as the goal's rotation vector)
            joint_pos JOINT_POSITION, input_type absolute, kp JOINT_KP
          ──► success (the task held on the last success_hold_steps steps, generation's rule)
              and the grip-site position error against the recorded states (mean, max)
      ──► the report: meta/action_spaces.json of the export (demofactory.shards.action_features)

Why the abs_eef goal and not the next state's pose: OSC moves towards its goal with a finite
gain, so the pose reached one step later is short of the goal; a trajectory of reached poses fed
back as goals lags behind the recorded one. The goal the delta action set is what robosuite's
absolute OSC must be given to command the same torques (robosuite's OSC math, not re-derived:
`T.axisangle2quat`, `T.quat2mat`, the controller's `scale_action`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from demofactory.errors import UserError

ACTION_SPACES = ("delta_eef", "abs_eef", "joint_pos")
DEFAULT_ACTIONS = ("delta_eef",)
# The joint controller's stiffness for joint_pos replays (robosuite's default is 50, its limit
# 300): a joint-position target one step ahead is tracked with a lag of ~1/sqrt(kp) s.
JOINT_KP = 300.0
DIGITS = 6


def parse_action_spaces(values: Sequence[str] | None) -> tuple[str, ...]:
    """`--actions` values (each comma-separated, the flag repeatable) -> the spaces, in order,
    each once; an unknown name raises UserError naming --actions and the allowed names."""
    names: list[str] = []
    for value in values or ():
        for name in (part.strip() for part in value.split(",")):
            if name not in ACTION_SPACES:
                raise UserError(
                    f"--actions: unknown action space {name!r} "
                    f"(allowed: {', '.join(ACTION_SPACES)}; e.g. --actions delta_eef,abs_eef)"
                )
            if name not in names:
                names.append(name)
    return tuple(names) or DEFAULT_ACTIONS


def space_layout(name: str, dof: int) -> tuple[tuple[str, int], ...]:
    """The (part, size) layout of one action space; the names say absolute or delta (GR00T's
    modality.json marks a part absolute unless its name starts with ``delta``)."""
    if name == "delta_eef":
        from demofactory.generators.scene_api import ACTION_LAYOUT

        return tuple(ACTION_LAYOUT)
    if name == "abs_eef":
        return (("abs_eef_pos", 3), ("abs_eef_rot6d", 6), ("abs_eef_gripper", 1))
    return (("joint_pos", dof), ("joint_pos_gripper", 1))


def rotation_6d(rot: np.ndarray) -> np.ndarray:
    """[..., 3, 3] -> [..., 6]: the first two rows (pytorch3d's matrix_to_rotation_6d)."""
    return np.asarray(rot)[..., :2, :].reshape(*np.shape(rot)[:-2], 6)


def rotation_from_6d(six: np.ndarray) -> np.ndarray:
    """[..., 6] -> [..., 3, 3], Gram-Schmidt on the two rows (rotation_6d_to_matrix)."""
    six = np.asarray(six, dtype=np.float64)
    a, b = six[..., :3], six[..., 3:]
    r1 = a / np.linalg.norm(a, axis=-1, keepdims=True)
    b = b - np.sum(r1 * b, axis=-1, keepdims=True) * r1
    r2 = b / np.linalg.norm(b, axis=-1, keepdims=True)
    return np.stack([r1, r2, np.cross(r1, r2)], axis=-2)


def abs_eef_goals(scene, sim_states: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """[T, 10] float64: the base-frame pose goal (position, rotation_6d) each delta action set
    at its state in robosuite's OSC_POSE (goal update mode "achieved"), and the gripper command.
    `scene`: a `demofactory.simulation.scene.Scene` with generation's (delta OSC) controller."""
    from robosuite.utils import transform_utils as T

    robot = scene.env.robots[0]
    arm_name = robot.arms[0]
    arm = robot.part_controllers[arm_name]
    out = np.empty((len(actions), 10))
    for t, (state, action) in enumerate(zip(sim_states, actions, strict=True)):
        scene.set_state(state)
        base_pos, base_ori = robot.composite_controller.get_controller_base_pose(arm_name)
        eef = scene.eef_pose()
        scaled = arm.scale_action(np.asarray(action[:6], dtype=np.float64))
        pos = base_ori.T @ (eef[:3, 3] - base_pos) + scaled[:3]
        rot = T.quat2mat(T.axisangle2quat(scaled[3:6])) @ (base_ori.T @ eef[:3, :3])
        out[t, :3], out[t, 3:9], out[t, 9] = pos, rotation_6d(rot), action[-1]
    return out


def joint_targets(scene, sim_states: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """[T, dof + 1] float64: the arm's joint positions at the next recorded state (the last step
    holds its own), and the gripper command."""
    robot = scene.env.robots[0]
    qpos = 1 + np.asarray(robot._ref_joint_pos_indexes)  # sim_state = [time, qpos, qvel]
    joints = sim_states[:, qpos]
    ahead = np.concatenate([joints[1:], joints[-1:]], axis=0)
    return np.concatenate([ahead, np.asarray(actions)[:, -1:]], axis=1)


def controller_commands(name: str, labels: np.ndarray) -> np.ndarray:
    """An action space's labels as the matching robosuite controller takes them (abs_eef's
    rotation_6d as the rotation vector OSC's absolute input expects)."""
    if name != "abs_eef":
        return labels
    from scipy.spatial.transform import Rotation

    rotvec = Rotation.from_matrix(rotation_from_6d(labels[:, 3:9])).as_rotvec()
    return np.concatenate([labels[:, :3], rotvec, labels[:, 9:]], axis=1)


def arm_controller(name: str) -> dict[str, Any] | None:
    """Overrides of robosuite's arm part config for replaying space `name` (None: generation's)."""
    if name == "abs_eef":
        return {"type": "OSC_POSE", "input_type": "absolute"}
    if name == "joint_pos":
        return {
            "type": "JOINT_POSITION",
            "input_type": "absolute",
            "input_max": 1,
            "input_min": -1,
            "output_max": 0.05,
            "output_min": -0.05,
            "kp": JOINT_KP,
            "damping_ratio": 1,
            "impedance_mode": "fixed",
            "kp_limits": [0, 300],
            "damping_ratio_limits": [0, 10],
            "qpos_limits": None,
            "interpolation": None,
            "ramp_ratio": 0.2,
        }
    return None


def replay_from_start(
    scene, provenance: Mapping, start: np.ndarray, commands: np.ndarray, hold: int
) -> tuple[np.ndarray, bool]:
    """(states [t, N] before each command, success): `commands` stepped from the episode's
    recorded first state under its recorded physics draw and fixtures; success is generation's
    rule (the task held after each of the last `hold` steps). A simulator error or a non-finite
    state ends the replay as a failure, as generation counts one."""
    from demofactory.generators.scene_api import Placement
    from demofactory.simulation.physics import recorded_physics

    scene.set_physics(recorded_physics(provenance))
    # reset_to moves what a placement moves in the model (a fixture's body), then the recorded
    # state puts every free body and joint back exactly where the episode started
    placement = Placement.from_json(provenance.get("placement", {}))
    scene.reset_to(start, placement, fixtures=provenance.get("fixtures"))
    scene.set_state(start)
    scene.mark_start()
    states = np.empty((len(commands), scene.state_size))
    held, t = len(commands) >= hold, 0
    try:
        for t, command in enumerate(commands):
            states[t] = scene.get_state()
            if not np.isfinite(states[t]).all():
                return states[:t], False
            scene.step(command)
            if t >= len(commands) - hold:
                held = held and scene.success()
    except Exception:  # MuJoCo instabilities and controller errors: as generation counts them
        return states[:t], False
    return states, held and bool(np.isfinite(scene.get_state()).all())


@dataclass
class _Tally:
    """One space's replay results so far."""

    episodes: int = 0
    successes: int = 0
    recorded_successes: int = 0
    errors_mean: list[float] = field(default_factory=list)
    errors_max: list[float] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)

    def to_json(self) -> dict:
        n = max(self.episodes, 1)
        return {
            "episodes": self.episodes,
            "successes": self.successes,
            "success_rate": round(self.successes / n, DIGITS),
            "eef_position_error_m": {
                "mean": round(
                    float(np.mean(self.errors_mean)) if self.errors_mean else 0.0, DIGITS
                ),
                "max": round(float(np.max(self.errors_max)) if self.errors_max else 0.0, DIGITS),
            },
            "failed_episodes": self.failed[:20],
        }


class SceneRelabeler:
    """Relabels a dataset's episodes into `names`
    (demofactory.shards.action_features.ActionRelabeler) and
    replays each relabeling with its controller (`check`), from the spec the dataset stores."""

    def __init__(self, dataset_dir: Path, names: Sequence[str], check: bool = True):
        from demofactory.shards import DATASET_INFO_FILENAME
        from demofactory.shards.metadata import load_dataset_info
        from demofactory.simulation.scene import Scene
        from demofactory.specs.spec import load_stored_spec

        info = load_dataset_info(Path(dataset_dir))
        if "+" in str(info.get("robot", "")):
            raise UserError(
                f"{dataset_dir}: --actions: a mixed-robot dataset ({info['robot']}); relabeling "
                "replays in one robot's scene: export a dataset per robot"
            )
        self.spec = load_stored_spec(info, Path(dataset_dir) / DATASET_INFO_FILENAME)
        self.names, self.check = tuple(names), check
        self.scene = Scene(self.spec)  # generation's controller: the goals are computed in it
        self.dof = len(self.scene.env.robots[0]._ref_joint_pos_indexes)
        self._replay_scenes: dict[str, Any] = {}
        self.tallies = {name: _Tally() for name in self.names}
        self.layout = tuple(part for name in self.names for part in space_layout(name, self.dof))

    def labels(self, name: str, sim_states: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """[T, width of `name`] float64: one space's labels of an episode."""
        if name == "delta_eef":
            return np.asarray(actions, dtype=np.float64)
        if name == "abs_eef":
            return abs_eef_goals(self.scene, sim_states, actions)
        return joint_targets(self.scene, sim_states, actions)

    def relabel(self, episode) -> np.ndarray:
        """An export's `SourceEpisode` -> [T, width] float32, the spaces side by side."""
        parts = []
        for name in self.names:
            labels = self.labels(name, episode.sim_states, episode.actions)
            labels = labels.astype(np.float32)  # what the export stores is what is replayed
            if self.check:
                self._check(name, episode.record, labels, episode.sim_states)
            parts.append(labels)
        return np.concatenate(parts, axis=1)

    def _check(self, name: str, record, labels: np.ndarray, sim_states: np.ndarray) -> None:
        from demofactory.robustness.divergence import position_error, track

        scene = self._replay_scene(name)
        commands = controller_commands(name, labels.astype(np.float64))
        states, success = replay_from_start(
            scene,
            record.provenance,
            sim_states[0],
            commands,
            self.spec.generation.success_hold_steps,
        )
        mean, worst = position_error(track(scene, states).eef, track(scene, sim_states).eef)
        tally = self.tallies[name]
        tally.episodes += 1
        tally.successes += int(success)
        tally.errors_mean.append(mean)
        tally.errors_max.append(worst)
        if not success:
            tally.failed.append(record.index)

    def _replay_scene(self, name: str):
        if name not in self._replay_scenes:
            arm = arm_controller(name)
            if arm is None:
                self._replay_scenes[name] = self.scene
            else:
                from demofactory.simulation.scene import Scene, make_env
                from demofactory.simulation.scene_build import env_kwargs

                env = make_env(self.spec.task, self.spec.seed, arm=arm, **env_kwargs(self.spec))
                # demofactory.simulation.fast_step runs these controllers too (OSC absolute,
                # joint position), checked against env.step when the Scene adopts it
                self._replay_scenes[name] = Scene(self.spec, env)
        return self._replay_scenes[name]

    def report(self) -> Mapping[str, Any]:
        """meta/action_spaces.json: the layout, then per space its parts and replay check."""
        start, parts = 0, {}
        for name, size in self.layout:
            parts[name] = {
                "start": start,
                "end": start + size,
                "absolute": not name.startswith("delta"),
            }
            start += size
        spaces = {}
        for name in self.names:
            entry: dict[str, Any] = {
                "parts": [part for part, _ in space_layout(name, self.dof)],
                "absolute": name != "delta_eef",
                "frame": {
                    "delta_eef": "robosuite OSC_POSE delta input, scaled by the controller's "
                    "output limits (the shards' actions)",
                    "abs_eef": "robot base frame; position m, rotation_6d = first two rows of the "
                    "goal rotation matrix",
                    "joint_pos": "arm joint positions, rad",
                }[name],
                "replay_controller": arm_controller(name)
                or {"type": "OSC_POSE", "input_type": "delta"},
            }
            if self.check:
                entry["replay"] = self.tallies[name].to_json()
                scene = self._replay_scenes.get(name)
                if scene is not None:  # "fast", or why robosuite's env.step ran the replays
                    entry["replay"]["loop"] = scene.fast_control_note or "fast"
            spaces[name] = entry
        return {"spaces": spaces, "action": parts, "robot": self.spec.task.robot}
