"""What the trajectory generator needs of a simulated scene: a `Scene` protocol, not a class.

`demofactory.generators.mimicgen` drives any object with these methods;
`demofactory.simulation.scene.Scene` (robosuite) is
the one the factory builds. Poses are 4x4 homogeneous matrices in the world frame, metres and
radians; a state is the flattened simulator state [N] (time, qpos, qvel).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from demofactory.generators.predicates import Predicate

# The per-step vectors a scene reports and takes: (name, size) in order.
PROPRIO_LAYOUT = (("eef_pos", 3), ("eef_quat_xyzw", 4), ("gripper_qpos", 2))
ACTION_LAYOUT = (("delta_pos", 3), ("delta_axis_angle", 3), ("gripper", 1))
PROPRIO_DIM = sum(n for _, n in PROPRIO_LAYOUT)
ACTION_DIM = sum(n for _, n in ACTION_LAYOUT)


@dataclass(frozen=True)
class Placement:
    """Offsets applied to objects' start poses: name -> (dx, dy, dyaw), metres and radians."""

    offsets: Mapping[str, tuple[float, float, float]]

    def to_json(self) -> dict:
        # Unrounded: JSON keeps every bit of a float, and a re-simulation needs every bit.
        return {k: [float(x) for x in v] for k, v in self.offsets.items()}

    @classmethod
    def from_json(cls, data: Mapping[str, Sequence[float]]) -> Placement:
        """The placement `to_json` wrote."""
        return cls({k: (float(v[0]), float(v[1]), float(v[2])) for k, v in data.items()})


class Scene(Protocol):
    """The simulator as `demofactory.generators.mimicgen` uses it (and nothing more)."""

    @property
    def state_size(self) -> int:
        """N, the size of a flattened state."""

    @property
    def has_redrawn_fixtures(self) -> bool:
        """Whether a reset re-draws some fixture's pose (then attempts record where it was)."""

    def reset_to(
        self,
        start_state: np.ndarray | None,
        placement: Placement,
        fixtures: Mapping[str, Sequence[float]] | None = None,
    ) -> None:
        """Reset, restore `start_state` (if given), move objects by `placement`, let them settle."""

    def fixture_poses(self) -> dict[str, list[float]]:
        """Re-drawn fixtures' poses now: body name -> [x, y, z, qw, qx, qy, qz]."""

    def get_state(self) -> np.ndarray:
        """[N] float64 state now."""

    def snapshot(self) -> object:
        """An opaque restorable point of the rollout (solver and gripper state included)."""

    def restore(self, snap: object) -> None:
        """Return exactly to a `snapshot()`."""

    def eef_pose(self) -> np.ndarray:
        """[4, 4] pose of the frame the arm controller moves."""

    def object_pose(self, name: str) -> np.ndarray:
        """[4, 4] pose of the object `name` (a name of `MimicGenParams.objects`)."""

    def proprio(self) -> np.ndarray:
        """[PROPRIO_DIM] float32 in `PROPRIO_LAYOUT` order."""

    def controller_limits(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(max position step [3] m, max rotation step [3] rad, controller frame [3, 3])."""

    def step(self, action: np.ndarray) -> None:
        """One control step with an [ACTION_DIM] action in `ACTION_LAYOUT` order."""

    def success(self) -> bool:
        """Whether the task is done in the current state."""

    def holds(self, predicate: Predicate | str) -> bool:
        """Evaluate a predicate (`demofactory.generators.predicates`) on the current state."""

    def grasp_correction(self, obj: str, rel: np.ndarray) -> np.ndarray:
        """[4, 4] a turn about `obj`'s z axis that makes a recorded grasp (the grip site in the
        object's frame, [4, 4]) fit the object as modelled now; identity when it fits."""

    def plan_transit(
        self, goal: np.ndarray, held: str | None, speed: float, checks: int, seed: int
    ) -> tuple[np.ndarray | None, str]:
        """For `generation.transit: plan`: poses [K, 4, 4] for the arm controller, one per
        control step, from now to `goal` without collisions, the object `held` (or None)
        attached; at most `speed` m a step and `checks` collision checks; `seed` seeds the
        planner. (None, why) where no path is found."""
