"""The pipeline: from a validated spec to a dataset directory.

    scene spec ──► prepare: build env, load + annotate seed demos (driver, once)
               ──► generation.adr: probe and widen the physics ranges (driver, once;
                     demofactory.robustness.adr, kept in generation.json)
               ──► plan shards: shard i = attempts [i*k, (i+1)*k),
                     seeds from (spec seed, i, attempt)
               ──► ShardWorker.run_shard per shard (in a Ray actor, or in-process in tests):
                     generate attempts (physics only; each under its physics: draw,
                       in provenance.physics) ──► successes
                       ──► generation.robustness: replayed under N draws, or "fragile"
                       ──► per success, K appearance variants:
                             apply look ──► render ──► restore model
                       ──► write tar (episode a*K + k = variant k of attempt a)
               ──► driver, per finished shard: generation.json, then manifest.json
                     (the commit point)
               ──► finish: episodes.jsonl, stats.json

A shard's bytes depend only on the spec and its index, so a retried or resumed
shard is rewritten identically and a finished one is never redone.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from demofactory.build.failures import KEEP_PER_SHARD, save_failures
from demofactory.build.records import ShardResult, ShardTask
from demofactory.build.shard_output import shard_output
from demofactory.errors import UserError
from demofactory.generators.appearance import AppearanceDraw, AppearanceRandomizer, variant_rng
from demofactory.generators.mimicgen import (
    AttemptPlan,
    attempt_seed,
    failure_phase,
    generate_attempt,
)
from demofactory.generators.records import AnnotatedDemo, Attempt
from demofactory.robustness.adr import adr_physics
from demofactory.robustness.divergence import RobustnessFilter
from demofactory.shards import Episode, EpisodeRecord, write_shard
from demofactory.simulation.physics import (
    PhysicsDraw,
    draw_physics,
    physics_rng,
    recorded_physics,
)
from demofactory.simulation.render import FrameRenderer
from demofactory.simulation.scene import Scene
from demofactory.specs.adapters import appearance_params, mimicgen_params
from demofactory.specs.language import episode_language, paint_objects
from demofactory.specs.sections import PhysicsSpec
from demofactory.specs.spec import SceneSpec


def instruction_for(spec: SceneSpec, seed: int) -> str:
    return episode_language(spec, seed).instruction


def failure_kind(reason: str) -> str:
    """Group failure reasons by their first clause ("horizon", "simulator error", ...)."""
    return reason.split(":", 1)[0]


# A per-attempt filter: (scene, the annotated seed demos, the physics ranges attempts draw
# from, attempt) -> the attempt, kept as it is, with provenance added, or turned into a
# failure with its reason.
AttemptFilter = Callable[[Scene, Sequence[AnnotatedDemo], PhysicsSpec | None, Attempt], Attempt]


def attempt_filters(spec: SceneSpec) -> tuple[AttemptFilter, ...]:
    """The per-attempt filters `spec` asks for: generation.robustness (`RobustnessFilter`)."""
    robust = spec.generation.robustness
    if robust is None:
        return ()
    return (RobustnessFilter(robust, spec.generation.success_hold_steps),)


class ShardWorker:
    """Owns one Scene, one renderer and one appearance randomizer for its lifetime; runs whole
    shards.

    The same class runs inside a Ray actor (cluster/) and directly in tests.
    """

    def __init__(
        self,
        spec: SceneSpec,
        demos: Sequence[AnnotatedDemo],
        scene: Scene | None = None,
        filters: Sequence[AttemptFilter] | None = None,
    ):
        """`filters`: what each attempt passes through before it counts (default: those the spec
        asks for, `attempt_filters(spec)`)."""
        self.spec = spec
        self.filters = tuple(attempt_filters(spec) if filters is None else filters)
        self.demos = list(demos)
        self.scene = scene if scene is not None else Scene(spec)
        self.renderer = FrameRenderer(self.scene, spec.cameras, spec.render)
        # Binds the spec's surfaces now (a bad surface fails here); the bank is loaded by run_shard.
        self.appearance = AppearanceRandomizer(
            appearance_params(spec), self.scene.model, upload=self.renderer.upload_textures
        )
        self.params = mimicgen_params(spec)
        self._bank_loaded = False
        self.physics = spec.physics  # the ranges attempts draw from (ADR's, once loaded)
        # A mixed-robot dataset's state width: states zero-padded to it (None: as they are)
        self.state_width: int | None = None

    def worker_for(self, attempt_id: int) -> ShardWorker:
        """The worker that runs `attempt_id`: this one (a mixed-robot dataset's
        `demofactory.build.mixed_worker.MixedShardWorker` picks the attempt's robot's)."""
        return self

    def prepare(self, dataset_dir: Path) -> None:
        """What a shard of the dataset in `dataset_dir` needs loaded: texture bank, ADR ranges."""
        self.load_bank(dataset_dir)
        self.load_adr(dataset_dir)

    @property
    def variants(self) -> int:
        """K: episodes rendered per successful trajectory."""
        return self.spec.appearance.variants_per_trajectory

    def run_attempt(self, task: ShardTask, attempt_id: int) -> Attempt:
        """One attempt, under the physics its seed draws (kept applied for its rendering)."""
        plan = AttemptPlan(
            attempt_id, task.index, attempt_seed(self.spec.seed, task.index, attempt_id)
        )
        draw = self.draw_physics(plan.seed)
        self.scene.set_physics(draw)
        params = self.params
        if task.targets:  # generation.rebalance: drawn in the cells the driver asked for
            from demofactory.build.rebalance import targeted_params

            where = task.targets[task.attempt_ids.index(attempt_id)]
            params = targeted_params(self.spec, params, self.demos[0], where, plan.seed)
        attempt = generate_attempt(self.scene, self.demos, plan, params)
        if draw is not None:  # what a re-simulation needs, with placement and fixtures
            attempt.provenance["physics"] = draw.to_json()
        return attempt

    def generate(
        self, task: ShardTask, device: str | None = None, out_dir: Path | str | None = None
    ) -> list[Attempt]:
        """The attempts of `task` in its order, unfiltered and unrendered: what a batch stage's
        actor makes for a worker's `run_shard(..., attempts=)` (demofactory.cluster.runner).
        backend mjwarp: one batch of worlds on warp's `device` (None: CUDA when warp sees it,
        else its CPU device); cpu: the attempts one after another, as run_shard runs them.
        `out_dir`: the dataset (a folder or a store's URL), whose ADR ranges the physics draws
        come from, loaded first as run_shard loads them (None: already prepared)."""
        if out_dir is not None:
            self.prepare(shard_output(out_dir).local_dir)
        if self.spec.generation.backend == "mjwarp":
            from demofactory.build.batched import run_batch
            from demofactory.simulation.mjwarp import default_device

            return run_batch(self, task, device=device or default_device())
        return [self.worker_for(a).run_attempt(task, a) for a in task.attempt_ids]

    def filter_attempt(self, attempt: Attempt) -> Attempt:
        """The attempt after each of the worker's per-attempt filters, in order (a filter keeps
        it, adds provenance, or turns a success into a failure with its reason)."""
        for keep in self.filters:
            attempt = keep(self.scene, self.demos, self.physics, attempt)
        return attempt

    def draw_physics(self, seed: int) -> PhysicsDraw | None:
        """The physics of the attempt seeded `seed` (None: the spec has no physics: section)."""
        if self.physics is None:
            return None
        return draw_physics(self.physics, physics_rng(seed), self.scene.physics.gravity)

    def load_adr(self, dataset_dir: Path) -> None:
        """Take the physics ranges ADR settled on for the dataset (when the spec runs ADR)."""
        adr = self.spec.generation.adr
        if adr is None or not adr.enabled or self.spec.physics is None:
            return
        found = adr_physics(dataset_dir)
        if found is None:
            raise UserError(
                f"{dataset_dir}: generation.adr is on but generation.json holds no ADR result; "
                "run ADR (demofactory.robustness.adr.ensure_adr) before running shards"
            )
        self.physics = found

    def draw_variant(self, attempt: Attempt, variant: int) -> AppearanceDraw:
        """The look of variant `variant` of `attempt`: the model as it is for variant 0 when
        `keep_original`, else drawn from a seed derived from (spec seed, attempt seed, variant)."""
        if variant == 0 and self.spec.appearance.keep_original:
            return AppearanceDraw()
        return self.appearance.draw(variant_rng(self.spec.seed, attempt.seed, variant))

    def make_episode(self, attempt: Attempt, variant: int = 0) -> Episode:
        """Variant `variant` of a successful attempt, rendered under its own appearance.

        Episode index `attempt_id * K + variant` (K = variants_per_trajectory): unique in the
        dataset, ascending within a shard, and equal to the attempt id when K = 1. The model
        is restored before returning, so physics and later variants never see the change.
        """
        draw = self.draw_variant(attempt, variant)
        language = episode_language(self.spec, attempt.seed)  # colours drawn per attempt
        self.appearance.apply(draw)
        unpaint = paint_objects(self.scene, language.rgba)
        try:
            frames = self.renderer.render_frames(attempt.states)
        finally:
            unpaint()
            # GL copies of restored textures are re-uploaded by the next apply(), once.
            self.appearance.restore(sync=False)
        provenance = {
            **attempt.provenance,
            "trajectory": attempt.attempt_id,
            "variant": variant,
            "appearance": draw.to_json(),
        }
        if self.spec.scene is not None:
            provenance["language"] = language.to_json()
        if language.paraphrases:  # the spec's other phrasings, filled for this episode
            provenance["paraphrases"] = list(language.paraphrases)
        if language.subtasks:  # per spec subtask; the steps each starts at: "subtask_starts"
            provenance["subtask_instructions"] = list(language.subtasks)
        provenance["embodiment"] = self.spec.task.robot
        states = attempt.proprio
        if self.state_width is not None and states.shape[1] < self.state_width:
            states = np.pad(states, ((0, 0), (0, self.state_width - states.shape[1])))
        return Episode(
            index=attempt.attempt_id * self.variants + variant,
            shard=attempt.shard,
            instruction=language.instruction,
            seed=attempt.seed,
            actions=attempt.actions,
            states=states,
            sim_states=attempt.states,
            images=frames.images,
            depth=frames.depth,
            segmentation=frames.segmentation,
            provenance=provenance,
            embodiment=self.spec.task.robot,
        )

    def load_bank(self, dataset_dir: Path) -> None:
        """Give the randomizer the dataset's texture bank, once per worker (when the spec has
        one)."""
        textures = self.spec.appearance.textures
        if self._bank_loaded or textures is None or textures.bank is None:
            return
        # Imported here: only a spec with a bank needs it.
        from demofactory.generators.texture_bank import load_texture_bank

        bank = load_texture_bank(dataset_dir)
        if not bank:
            raise UserError(
                f"{dataset_dir}: appearance.textures.bank is set in the spec but the dataset "
                "holds no texture bank; make the bank before running shards"
            )
        self.appearance.bank = list(bank)
        self._bank_loaded = True

    def run_shard(
        self,
        task: ShardTask,
        out_dir: Path | str,
        on_attempt: Callable[[bool], None] | None = None,
        attempts: Sequence[Attempt] | None = None,
    ) -> ShardResult:
        """Generate, render and write one shard to `out_dir` (a directory, or a store's URL);
        returns its summary. `attempts`: the shard's attempts, already generated elsewhere
        (`generate`, on a batch stage's actor): only filtered, rendered and written here.

        `successes` counts successful attempts (physical trajectories); each one gives
        K episodes, one per appearance variant.
        """
        start = time.perf_counter()
        output = shard_output(out_dir)  # a local directory, or staging for an object store
        self.prepare(output.local_dir)
        episodes, failures, steps, successes, failed = [], Counter(), 0, 0, []
        subtasks = {
            str(i): {"reached": 0, "failed": 0, "retries": 0, "fallbacks": 0}
            for i in range(len(self.spec.subtasks))
        }
        robots: dict[str, dict[str, int]] = {}
        placements = []
        batched = None if attempts is None else list(attempts)
        if batched is None and self.spec.generation.backend == "mjwarp":  # one batch of worlds
            batched = self.generate(task)
        if batched is not None and [a.attempt_id for a in batched] != list(task.attempt_ids):
            raise ValueError(f"{task.name}: the attempts given are not the shard's")
        for position, attempt_id in enumerate(task.attempt_ids):
            worker = self.worker_for(attempt_id)  # this one, or the attempt's robot's
            if batched is not None:
                attempt = batched[position]
                # generated elsewhere: this scene takes the physics the attempt ran under, as
                # run_attempt leaves it applied for the rendering (None: the nominal one; a
                # two-arm scene has no physics draws)
                if hasattr(worker.scene, "set_physics"):
                    worker.scene.set_physics(recorded_physics(attempt.provenance))
            else:
                attempt = worker.run_attempt(task, attempt_id)
            tally = robots.setdefault(worker.spec.task.robot, {"attempts": 0, "successes": 0})
            tally["attempts"] += 1
            steps += attempt.length
            _count_subtasks(subtasks, attempt)
            attempt = worker.filter_attempt(attempt)  # e.g. generation.robustness
            placements.append(
                {
                    "attempt": attempt_id,
                    "kept": bool(attempt.success),
                    "placement": {
                        name: [round(v, 6) for v in offset]
                        for name, offset in attempt.provenance["placement"].items()
                    },
                }
            )
            if attempt.success:
                successes += 1
                tally["successes"] += 1
                episodes.extend(worker.make_episode(attempt, k) for k in range(self.variants))
            else:
                # "transit: ..." when a bridging motion disturbed an object first
                # (`factory inspect` shows both)
                failures[f"{failure_phase(attempt)}: {failure_kind(attempt.reason)}"] += 1
                if len(failed) < KEEP_PER_SHARD:
                    failed.append(attempt)
            if on_attempt is not None:
                on_attempt(attempt.success)
        info = write_shard(episodes, output.shards_dir(), task.index, self.spec.output.shard_layout)
        kept = save_failures(output.local_dir, task.index, failed)  # `factory preview --failures`
        output.publish(info.name, kept)
        return ShardResult(
            task=task,
            info=info,
            attempts=len(task.attempt_ids),
            successes=successes,
            failures=dict(sorted(failures.items())),
            episodes=tuple(EpisodeRecord.from_episode(e) for e in episodes),
            wall_s=time.perf_counter() - start,
            steps_simulated=steps,
            subtasks=subtasks,
            robots=dict(sorted(robots.items())) if self.spec.task.robots else {},
            render_detail=_render_detail(self),
            placements=tuple(placements),
        )

    def close(self) -> None:
        self.renderer.close()


def _count_subtasks(counts: dict[str, dict[str, int]], attempt: Attempt) -> None:
    for index in attempt.reached:
        counts[str(index)]["reached"] += 1
    for index, n in enumerate(attempt.retries):
        counts[str(index)]["retries"] += n
    if attempt.failed_subtask is not None:
        counts[str(attempt.failed_subtask)]["failed"] += 1
    # transit: plan's transits that found no path and took the direct bridge instead
    for fallback in attempt.provenance.get("transit_fallbacks", ()):
        row = counts[str(fallback["subtask"])]
        row["fallbacks"] = row.get("fallbacks", 0) + 1


def _render_detail(worker) -> dict:
    """What `render.detail` did to the meshes (DetailReport.to_json), {} when nothing: of the
    worker's renderer, or of a mixed-robot worker's first robot's that has one."""
    renderers = (
        [worker.renderer]
        if hasattr(worker, "renderer")
        else [w.renderer for w in getattr(worker, "workers", {}).values()]
    )
    for renderer in renderers:
        if renderer.detail.meshes:
            return renderer.detail.to_json()
    return {}
