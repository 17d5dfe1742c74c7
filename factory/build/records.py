"""The records of a build's units of work: a shard's task, its plan, and what a worker reports.

They cross process boundaries (Ray) and are written to generation.json, so they are plain data.
Kept apart from `demofactory.build.pipeline` (which imports robosuite): the driver's resume logic
(`demofactory.build.run`, `demofactory.build.output_dir`, `demofactory.build.recorder`) and ADR read
them without building an env.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from demofactory.shards import EpisodeRecord, ShardInfo, shard_name

if TYPE_CHECKING:
    from demofactory.specs.spec import SceneSpec


@dataclass(frozen=True)
class ShardTask:
    """One unit of distributed work: a shard index and the global attempt ids it holds."""

    index: int
    attempt_ids: tuple[int, ...]
    # generation.rebalance's extra shards: per attempt, (object, cell) pairs its placement is
    # drawn in (demofactory.build.rebalance); empty for a planned shard
    targets: tuple[tuple[tuple[str, int], ...], ...] = ()

    @property
    def name(self) -> str:
        return shard_name(self.index)


@dataclass(frozen=True)
class ShardResult:
    """What a worker reports for a finished shard (plain data: it crosses process boundaries)."""

    task: ShardTask
    info: ShardInfo
    attempts: int
    successes: int  # successful attempts (trajectories); each gave K episodes
    failures: dict[str, int]  # failure kind -> count
    episodes: tuple[EpisodeRecord, ...]  # K per success: one per appearance variant
    wall_s: float
    steps_simulated: int = 0
    # index -> reached, failed, retries, fallbacks (transit: plan)
    subtasks: dict[str, dict[str, int]] = field(default_factory=dict)
    node: str = ""  # Ray node id of the worker that wrote it ("" when run outside Ray)
    # A mixed-robot dataset's attempts and successes per robot (empty for one robot)
    robots: dict[str, dict[str, int]] = field(default_factory=dict)
    # render.detail: what the worker's renderer did to the meshes (DetailReport.to_json)
    render_detail: dict = field(default_factory=dict)
    # per attempt {attempt, kept, placement}: where it started (demofactory.build.coverage)
    placements: tuple[dict, ...] = ()

    def to_json(self) -> dict:
        return {
            "attempt_ids": [self.task.attempt_ids[0], self.task.attempt_ids[-1] + 1],
            "attempts": self.attempts,
            "successes": self.successes,
            "failures": self.failures,
            "wall_s": round(self.wall_s, 3),
            "steps_simulated": self.steps_simulated,
            "subtasks": self.subtasks,
            "episodes": [e.to_json() for e in self.episodes],
            "node": self.node,
            **({"robots": self.robots} if self.robots else {}),
            **({"render_detail": self.render_detail} if self.render_detail else {}),
            **({"placements": list(self.placements)} if self.placements else {}),
        }


class ShardPlan(Sequence[ShardTask]):
    """The shards of `attempts` attempts, `per_shard` each, made on demand.

    A sequence, not a list: `--attempts 100000000` plans ten million shards, which as
    objects would take gigabytes before the first one ran.
    """

    def __init__(self, attempts: int, per_shard: int):
        self.attempts, self.per_shard = attempts, per_shard

    def __len__(self) -> int:
        return (self.attempts + self.per_shard - 1) // self.per_shard

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"shard {index} is not in a plan of {len(self)} shards")
        first = index * self.per_shard
        return ShardTask(index, tuple(range(first, min(first + self.per_shard, self.attempts))))


def plan_shards(spec: SceneSpec) -> ShardPlan:
    """Split the spec's attempts into shards of `generation.attempts_per_shard`."""
    return ShardPlan(spec.generation.attempts, spec.generation.attempts_per_shard)


def result_from_json(task: ShardTask, info: ShardInfo, entry: dict) -> ShardResult:
    """A finished shard's result as recorded in generation.json (used on resume)."""
    return ShardResult(
        task=task,
        info=info,
        attempts=entry["attempts"],
        successes=entry["successes"],
        failures=dict(entry["failures"]),
        episodes=tuple(EpisodeRecord.from_json(e) for e in entry["episodes"]),
        wall_s=float(entry["wall_s"]),
        steps_simulated=int(entry.get("steps_simulated", 0)),
        subtasks={k: dict(v) for k, v in entry.get("subtasks", {}).items()},
        node=str(entry.get("node", "")),
        robots={k: dict(v) for k, v in entry.get("robots", {}).items()},
        render_detail=dict(entry.get("render_detail", {})),
        placements=tuple(entry.get("placements", ())),
    )
