"""The shard worker of a two-arm spec (task.two_arm): `ShardWorker` with the two-arm scene and
generator.

    ShardWorker.run_shard (unchanged: render, write, count) ──► run_attempt
      ──► generate_bimanual_attempt (demofactory.generators.bimanual) in a `TwoArmScene`
          (both robots through demofactory.simulation.fast_step.PairStepper, or robosuite's
          env.step where its check refused: `TwoArmScene.fast_control_note` says why)

States and actions are per arm, right first: proprio [18] (9 per arm), actions [14] (7 per arm)
on a Panda pair with grippers; [14] (7) and [12] (6) without (TwoArmPegInHole);
`demofactory.build.run.dataset_info` writes their layouts.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from demofactory.build.pipeline import ShardWorker
from demofactory.build.records import ShardTask
from demofactory.generators.bimanual import generate_bimanual_attempt
from demofactory.generators.mimicgen import AttemptPlan, attempt_seed
from demofactory.generators.records import Attempt, BimanualDemo
from demofactory.simulation.bimanual import TwoArmScene
from demofactory.specs.adapters import bimanual_params
from demofactory.specs.spec import SceneSpec


class BimanualShardWorker(ShardWorker):
    """Owns one `TwoArmScene`; runs whole shards of a two-arm spec."""

    def __init__(
        self, spec: SceneSpec, demos: Sequence[BimanualDemo], scene: TwoArmScene | None = None
    ):
        super().__init__(spec, demos, scene if scene is not None else TwoArmScene(spec), ())
        self.params = bimanual_params(spec)
        # One line a worker: which loop its steps take (why robosuite's env.step, if so).
        log = logging.getLogger(__name__)
        if self.scene.fast_control:
            log.info("both robots step through the fast loop (PairStepper)")
        else:
            log.info("robosuite env.step is used: %s", self.scene.fast_control_note)

    def run_attempt(self, task: ShardTask, attempt_id: int) -> Attempt:
        """One two-arm attempt (nominal physics: a two-arm spec has no physics: section)."""
        plan = AttemptPlan(
            attempt_id, task.index, attempt_seed(self.spec.seed, task.index, attempt_id)
        )
        return generate_bimanual_attempt(self.scene, self.demos, plan, self.params)
