"""Mixed-robot datasets: which robot runs each attempt, and what each robot's samples hold.

    task.robots [{robot, share}, ...] ──► shares / their sum
        ──► attempt a runs on robot_for_attempt(shares, a): the golden-ratio sequence
            frac(a · 0.618...) read against the cumulative shares
        ──► MixedShardWorker (demofactory.build.mixed_worker): one ShardWorker (env, renderer, demos
            annotated for that robot) per robot, built on the first attempt that needs it
        ──► each episode: embodiment = its robot (sample meta, episodes.jsonl provenance),
            states zero-padded to the widest robot's (dataset_info.json `embodiments` says
            which dimensions are whose)

Why the attempt id and not a draw from the attempt's seed: the robot of attempt a is a pure
function of (shares, a), like its seed, so a shard's content still depends only on the spec and
its index (retries and resumes rewrite it identically, whatever the workers), and the golden-ratio
sequence is evenly spread: any run of n attempts holds each robot's share of n to within ~2
(a seeded draw is off by ~√n), so "generate until N successes" stops on the mix the spec asked
for. Changing the shares changes which robot runs an attempt, never the attempt's seed.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

from demofactory.generators.scene_api import ACTION_LAYOUT, PROPRIO_LAYOUT
from demofactory.specs.spec import SceneSpec, TaskSpec

if TYPE_CHECKING:
    from demofactory.generators.records import AnnotatedDemo

GOLDEN = 0.6180339887498949  # (√5 - 1) / 2: the most evenly spread Weyl sequence


def robot_shares(task: TaskSpec) -> tuple[tuple[str, float], ...]:
    """(robot, share) of every robot of the task, shares summing to 1: task.robots normalised,
    or task.robot alone."""
    if not task.robots:
        return ((task.robot, 1.0),)
    total = sum(r.share for r in task.robots)
    return tuple((r.robot, r.share / total) for r in task.robots)


def is_mixed(spec: SceneSpec) -> bool:
    """Whether the spec asks for more than one robot."""
    return len(robot_shares(spec.task)) > 1


def robot_for_attempt(shares: Sequence[tuple[str, float]], attempt_id: int) -> str:
    """The robot that runs global attempt `attempt_id` (see the module docstring)."""
    u = (attempt_id * GOLDEN) % 1.0
    edge = 0.0
    for robot, share in shares:
        edge += share
        if u < edge:
            return robot
    return shares[-1][0]  # u within rounding of 1


def robot_spec(spec: SceneSpec, robot: str) -> SceneSpec:
    """`spec` for one of its robots: task.robot = `robot`, no task.robots."""
    task = spec.task.model_copy(update={"robot": robot, "robots": None})
    return spec.model_copy(update={"task": task})


@functools.cache
def gripper_joints(robot: str) -> int:
    """Joints of `robot`'s default gripper (its state's gripper_qpos width), from robosuite's
    models without building an env."""
    import robosuite.models.robots as robot_models
    from robosuite.models.grippers import GRIPPER_MAPPING

    model = getattr(robot_models, robot)()
    return len(GRIPPER_MAPPING[model.default_gripper[model.arms[0]]]().joints)


def gripper_dof(robot: str) -> int:
    """Command columns of `robot`'s default gripper: 1 for a parallel gripper, 6 for GR-1's
    Fourier hands (robosuite's `dof`), from its models without building an env."""
    import robosuite.models.robots as robot_models
    from robosuite.models.grippers import GRIPPER_MAPPING

    model = getattr(robot_models, robot)()
    return int(GRIPPER_MAPPING[model.default_gripper[model.arms[0]]]().dof)


def state_layout(robot: str) -> list[list]:
    """[[name, width], ...] of `robot`'s proprio state (eef pose, then its gripper joints)."""
    return [[k, gripper_joints(robot) if k == "gripper_qpos" else n] for k, n in PROPRIO_LAYOUT]


def state_width(spec: SceneSpec) -> int:
    """The dataset's state width: the widest of its robots' (narrower ones are zero-padded)."""
    return max(sum(n for _, n in state_layout(r)) for r, _ in robot_shares(spec.task))


def embodiments_info(spec: SceneSpec, sim_state_dims: dict[str, int], signs: dict[str, int]):
    """dataset_info.json's `embodiments`: per robot, in task order (its id is its position), its
    share, state and action layout, MuJoCo state size and gripper closing sign."""
    width = state_width(spec)
    out = {}
    for i, (robot, share) in enumerate(robot_shares(spec.task)):
        layout = state_layout(robot)
        used = sum(n for _, n in layout)
        if used < width:
            layout = [*layout, ["padding", width - used]]
        out[robot] = {
            "id": i,
            "share": round(share, 6),
            "state": {"dim": width, "layout": layout},
            "action": {
                "dim": sum(n for _, n in ACTION_LAYOUT),
                "layout": [[k, n] for k, n in ACTION_LAYOUT],
                "gripper_closes": signs.get(robot, 1),  # the sign of the command that closes
            },
            "sim_state": {"dim": sim_state_dims.get(robot)},
        }
    return out


def split_demos(demos: Sequence[AnnotatedDemo]) -> dict[str, list[AnnotatedDemo]]:
    """Annotated demos by the robot they were annotated for (`AnnotatedDemo.robot`)."""
    out: dict[str, list[AnnotatedDemo]] = {}
    for demo in demos:
        out.setdefault(demo.robot, []).append(demo)
    return out
