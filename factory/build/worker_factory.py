"""What the cluster runs: a picklable factory of `ShardWorker`s, light to import.

`demofactory.cluster.runner` receives it (`WorkerFactory`) and calls it once in each Ray actor,
after the
actor chose its GPU; only then are the pipeline and mujoco imported. It crosses to the actor
pickled, so this module imports nothing that touches MuJoCo or its GL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from demofactory.build.mixed_worker import MixedShardWorker
from demofactory.robots import repairs as robot_repairs
from demofactory.simulation.mujoco_log import route_mujoco_warnings
from demofactory.specs.spec import SceneSpec

if TYPE_CHECKING:
    from demofactory.build.pipeline import ShardWorker


@dataclass(frozen=True)
class ShardWorkerFactory:
    """Builds the `ShardWorker` of `spec` (without seed demos: the cluster hands them over)."""

    spec: SceneSpec

    def __call__(self) -> ShardWorker:
        from demofactory.build.pipeline import (
            ShardWorker,  # imports mujoco (and so fixes MUJOCO_GL)
        )

        route_mujoco_warnings()  # not into MUJOCO_LOG.TXT in the worker's working directory
        robot_repairs.install()  # in this actor's process, before its env is built
        if self.spec.task.robots:  # a mixed-robot dataset: one env per robot, built on need
            return MixedShardWorker(self.spec)
        if self.spec.task.two_arm is not None:  # two arms: the two-arm scene and generator
            from demofactory.build.bimanual_worker import BimanualShardWorker

            return BimanualShardWorker(self.spec, ())
        return ShardWorker(self.spec, ())
