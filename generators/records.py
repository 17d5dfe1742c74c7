"""Plain records exchanged between stages (seed demos, annotations, attempts).

Poses are 4x4 homogeneous matrices in the MuJoCo world frame, metres and
radians. `T` is a number of control steps, `N` the size of a flattened MuJoCo
state (time, qpos, qvel).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class SeedDemo:
    """One human demonstration as recorded.

    states: [T, N] float64 flattened MuJoCo states, the ground truth.
    actions: [T, 7] float64 OSC_POSE deltas (3 position, 3 axis-angle, 1 gripper) in [-1, 1].
    """

    name: str  # e.g. "demo_1"
    source: Path  # the hdf5 file
    env_name: str  # robosuite env it was recorded in, "" when the file does not say
    states: np.ndarray
    actions: np.ndarray
    # Poses of fixtures robosuite re-draws at reset (body -> [x, y, z, qw, qx, qy, qz]) when the
    # file records them (`factory script` does; human demos do not): see `Scene.reset`.
    fixture_poses: Mapping[str, Sequence[float]] | None = None
    # The robosuite robot that recorded it (the states are of a model built with it).
    robot: str = "Panda"

    @property
    def length(self) -> int:
        return len(self.states)

    @property
    def label(self) -> str:
        return f"{self.source.name}:{self.name}"


@dataclass(frozen=True)
class AnnotatedDemo:
    """A seed demo replayed in the current simulator, ready to be re-targeted.

    eef_poses: [T, 4, 4] end-effector (grip site) poses of the generation robot (a demo of
        another robot: its grasp frame's poses carried over, `demofactory.simulation.grasp_frame`).
    object_poses: spec object name -> [T, 4, 4] body poses.
    gripper: [T] gripper command per step (the demo's last action dimension).
    subtask_ends: per subtask (spec index), the step at which it ends in this demo: one past
        the first step at which its predicate holds, a gripper event, or the demo length.
    order: subtask indices in the order this demo does them.
    """

    demo: SeedDemo
    eef_poses: np.ndarray
    object_poses: Mapping[str, np.ndarray]
    gripper: np.ndarray
    subtask_ends: tuple[int, ...]
    order: tuple[int, ...] = ()
    # Per subtask (spec index): why its segment ends where it does, for `factory annotate`.
    end_reasons: tuple[str, ...] = ()
    fixture_poses: Mapping[str, Sequence[float]] | None = None  # as replayed (see SeedDemo)
    holds: np.ndarray | None = None  # [T, subtasks] bool: each subtask's end predicate per step
    # Per subtask (spec index): where its segment starts. Empty: where the previous one ended.
    # Later than that when the person was still busy with an object of no concern to this subtask.
    subtask_starts: tuple[int, ...] = ()
    # [N] where generation starts, in the generation model, when that is not the demo's first
    # state: a demo of another robot (objects as recorded, the robot at its own home pose).
    start: np.ndarray | None = None
    # The robot it was annotated for (the generation robot; a mixed dataset has one set a robot).
    robot: str = ""
    # Per subtask (spec index): where its skill window opens (`demofactory.generators.skills`), and
    # why;
    # generation.transit: plan replays [skill start, segment end) and plans the way there.
    skill_starts: tuple[int, ...] = ()
    skill_ends: tuple[int, ...] = ()  # per subtask: a window's end given in the spec, else 0
    skill_reasons: tuple[str, ...] = ()
    paused: np.ndarray | None = None  # [T] bool: steps of a pause, dropped from replayed windows
    # Per subtask (spec index): the predicate that ended its segment in this demo where that is
    # not the spec's `ends_when`, "" where it is. A person who pressed the handle with an open
    # hand never grasped it: `grasped(handle)` fell back to `touching(hand, handle)`, and
    # generation must not treat that segment as a grasp. Empty: every subtask is the spec's.
    ended_by: tuple[str, ...] = ()

    @property
    def start_state(self) -> np.ndarray:
        """[N] the state generation resets to (in the model of the scene it was annotated for)."""
        return self.demo.states[0] if self.start is None else self.start

    def skill(self, position: int) -> tuple[int, int]:
        """[start, end) of the `position`-th subtask's skill window (the whole segment when the
        demo has none)."""
        start, end = self.segment(position)
        index = self.order[position]
        if self.skill_ends and self.skill_ends[index]:
            end = min(end, self.skill_ends[index])
        if self.skill_starts:
            return max(start, min(self.skill_starts[index], end - 1)), end
        return start, end

    def end_predicate(self, index: int, spec_ends_when: str | None) -> str | None:
        """The predicate that ended subtask `index` (spec index) in this demo: `spec_ends_when`
        (the spec's), or what annotation fell back to (`ended_by`)."""
        return (self.ended_by[index] if self.ended_by else "") or spec_ends_when

    def segment(self, position: int) -> tuple[int, int]:
        """[start, end) of the `position`-th subtask in this demo's order."""
        index = self.order[position]
        if self.subtask_starts:
            return self.subtask_starts[index], self.subtask_ends[index]
        start = 0 if position == 0 else self.subtask_ends[self.order[position - 1]]
        return start, self.subtask_ends[index]


@dataclass(frozen=True)
class BimanualDemo:
    """A two-arm seed demo replayed in the current simulator, each arm annotated on its own.

    eef_poses: arm -> [T, 4, 4] grip-site poses. gripper: arm -> [T] gripper commands (the arm's
    last action column; zeros for an arm without a gripper). object_poses: spec object name ->
    [T, 4, 4].
    segments: per subtask (spec index), [start, end) of its arm's segment in this demo: an arm's
    first starts at 0, each next where the previous ended (a sequential one after the hand held
    still waiting, at most till the subtask it waits for ended), the end one past the first step
    its predicate holds for that arm (the demo's length for the arm's last); a coordinated pair
    shares one window (its start the later of the two).
    """

    demo: SeedDemo
    eef_poses: Mapping[str, np.ndarray]
    gripper: Mapping[str, np.ndarray]
    object_poses: Mapping[str, np.ndarray]
    segments: tuple[tuple[int, int], ...]
    end_reasons: tuple[str, ...] = ()
    fixture_poses: Mapping[str, Sequence[float]] | None = None

    @property
    def start_state(self) -> np.ndarray:
        return self.demo.states[0]

    @property
    def subtask_ends(self) -> tuple[int, ...]:
        """Per subtask (spec index), where its segment ends (as `AnnotatedDemo.subtask_ends`)."""
        return tuple(end for _, end in self.segments)


@dataclass(frozen=True)
class Attempt:
    """One generation attempt, successful or not (physics only, nothing rendered).

    states: [T, N] float64 MuJoCo state before each action.
    actions: [T, 7] float32 the commands executed (noise included).
    proprio: [T, 9] float32 eef position (3), eef quaternion xyzw (4), gripper joints (2).
    """

    attempt_id: int  # global index, unique in the dataset
    shard: int
    seed: int
    success: bool
    reason: str  # "" on success; why it failed otherwise
    states: np.ndarray
    actions: np.ndarray
    proprio: np.ndarray
    subtasks_done: int  # subtasks completed (their check held) before the attempt ended
    provenance: Mapping[str, object] = field(default_factory=dict)
    failed_subtask: int | None = None  # spec index of the subtask where it failed, if known
    retries: tuple[int, ...] = ()  # per subtask (spec index): retries spent
    reached: tuple[int, ...] = ()  # spec indices of the subtasks this attempt started, in order
    completed: tuple[int, ...] = ()  # of those, the ones whose check held (the last: success)

    @property
    def length(self) -> int:
        return len(self.actions)
