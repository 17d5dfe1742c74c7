"""A mixed-robot dataset's worker: one `ShardWorker` per robot, built when first needed.

Which robot runs an attempt, and what its samples hold, is `demofactory.robots.embodiments`; this is
the
build stage's side of it. Light to import, as `demofactory.build.worker_factory` (which builds it in
each
Ray actor): the pipeline, and so mujoco, is imported when the first worker is built.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from demofactory.robots.embodiments import (
    robot_for_attempt,
    robot_shares,
    robot_spec,
    split_demos,
    state_width,
)
from demofactory.specs.spec import SceneSpec

if TYPE_CHECKING:
    from demofactory.build.pipeline import ShardWorker
    from demofactory.generators.records import AnnotatedDemo


class MixedShardWorker:
    """A `ShardWorker` over several robots: one per robot inside, built when first needed.

    Has what the cluster uses of a ShardWorker (`demos`, `run_shard`, `close`); `run_shard` is
    ShardWorker's own, which asks `worker_for(attempt_id)` which robot's worker runs an attempt.
    """

    def __init__(self, spec: SceneSpec, demos: Sequence[AnnotatedDemo] = ()):
        self.spec = spec
        self.shares = robot_shares(spec.task)
        self.width = state_width(spec)
        self.workers: dict[str, ShardWorker] = {}
        self._demos: dict[str, list[AnnotatedDemo]] = {}
        self._dataset_dir = None
        self.demos = demos

    @property
    def demos(self) -> list[AnnotatedDemo]:
        return [d for robot, _ in self.shares for d in self._demos.get(robot, [])]

    @demos.setter
    def demos(self, demos: Sequence[AnnotatedDemo]) -> None:
        self._demos = split_demos(demos)
        for robot, worker in self.workers.items():
            worker.demos = list(self._demos.get(robot, []))

    @property
    def variants(self) -> int:
        return self.spec.appearance.variants_per_trajectory

    def worker_for(self, attempt_id: int) -> ShardWorker:
        """The worker of the robot that runs `attempt_id` (built and prepared on first need)."""
        robot = robot_for_attempt(self.shares, attempt_id)
        if robot not in self.workers:
            from demofactory.build.pipeline import (
                ShardWorker,  # mujoco: only when a worker is built
            )

            worker = ShardWorker(robot_spec(self.spec, robot), self._demos.get(robot, []))
            worker.state_width = self.width
            if self._dataset_dir is not None:
                worker.prepare(self._dataset_dir)
            self.workers[robot] = worker
        return self.workers[robot]

    def prepare(self, dataset_dir) -> None:
        self._dataset_dir = dataset_dir
        for worker in self.workers.values():
            worker.prepare(dataset_dir)

    def generate(self, task, device=None, out_dir=None):
        from demofactory.build.pipeline import ShardWorker  # mujoco: only when a worker is built

        return ShardWorker.generate(self, task, device, out_dir)

    def run_shard(self, task, out_dir, on_attempt=None, attempts=None):
        from demofactory.build.pipeline import ShardWorker  # mujoco: only when a worker is built

        return ShardWorker.run_shard(self, task, out_dir, on_attempt, attempts)

    def close(self) -> None:
        for worker in self.workers.values():
            worker.close()
