"""`factory train-eval`: train a small behaviour-cloning policy on a dataset, then roll it out.

    factory train-eval out/lift_lowdim --spec scene_specs/lift_lowdim.yaml --rollouts 50 \\
        --out report.json

    dataset shards ──► make_loader(extra_keys=["sim_state"], no normalization), one pass
        ──► observation [N, D] (demofactory.train.policy: proprio + object poses from the stored
        MuJoCo state; a two-arm dataset: both arms' proprio, objects relative to each hand)
            action_chunk [N, H, 7 * arms], action_mask [N, H]   (held in memory: low-dimensional)
        ──► drop idle steps (pauses: nothing moves for the next 8 steps)
        ──► ChunkPolicy (MLP), masked L1 on normalized chunks, AdamW + cosine schedule,
            fixed step budget
        ──► rollouts in the spec's Scene (a TwoArmScene for task.two_arm): the generation's
            placement sampler and start state,
            evaluation seeds from their own namespace, success = the env's check held for k steps
        ──► one JSON report: data, training (time, loss curve),
            evaluation (per rollout seed/success/length)

Evaluation seeds: rollout i draws its placement from `default_rng(eval_seed(spec.seed, i))`, with
`eval_seed` hashing `SeedSequence(spec.seed, spawn_key=(0xE7A1, i))`. Generation seeds hash
`SeedSequence([spec.seed, shard, attempt])` (no spawn key), so the two never share a stream; the
report also checks that no evaluation seed equals a seed in the dataset's episodes.jsonl.

The verb reads top to bottom (load, train, roll out, report); what every policy kind shares
(the dataset's steps, the fit loop, rollouts, the report) is in `demofactory.train.core`, the model
in
`demofactory.train.policy`, the flags in `demofactory.train.config`; a mixed-robot dataset goes to
`demofactory.train.mixed`, `--policy vla` to `demofactory.train.vla_train`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch
from demofactory.build.output_dir import require_dataset_info
from demofactory.errors import UserError
from demofactory.robustness.eval_physics import describe, load_eval_physics
from demofactory.seeds.resolve import Resolved
from demofactory.simulation.render import FrameRenderer
from demofactory.train.config import TrainEvalConfig
from demofactory.train.core import (
    camera_view,
    check_dataset,
    dataset_camera,
    evaluate,
    idle_steps,
    load_training_data,
    make_report,
    train_policy,
)
from demofactory.train.mixed import train_eval_mixed
from demofactory.train.policy import make_obs_layout

# ---------------------------------------------------------------- the verb


def refuse_for_two_arms(config: TrainEvalConfig) -> None:
    """A UserError naming the first flag that a two-arm dataset does not take yet."""
    for flag, given in (
        ("--policy vla", config.policy == "vla"),
        ("--camera", config.camera is not None),
        ("--eval-physics", config.eval_physics is not None),
        ("--embodiment", config.embodiment is not None),
        ("--sensor-noise", config.sensor_noise is not None),
    ):
        if given:
            raise UserError(f"{flag}: not with a two-arm spec (task.two_arm) yet")


def train_eval(
    dataset: Path,
    resolved: Resolved,
    config: TrainEvalConfig,
    log: Callable[[str], None] = lambda s: None,
    save: Path | None = None,
) -> dict:
    """Load, train, evaluate; returns the JSON report (see the module docstring)."""
    if config.execute > config.horizon:
        raise UserError(
            f"--execute {config.execute}: expected at most --horizon ({config.horizon})"
        )
    if not resolved.demos:
        raise UserError(
            f"{resolved.spec.path}: seed_demos: rollouts start from the first seed demo; "
            "the spec lists none"
        )
    torch.set_num_threads(config.threads)
    if resolved.spec.task.two_arm is not None:
        refuse_for_two_arms(config)
    elif (
        config.embodiment is not None
        or len(require_dataset_info(dataset).get("embodiments") or {}) > 1
    ):
        return train_eval_mixed(dataset, resolved, config, log, save)  # one policy, several robots
    scene = resolved.scene
    info = check_dataset(dataset, scene)
    physics = None if config.eval_physics is None else load_eval_physics(config.eval_physics, scene)
    if config.policy == "vla" and physics is not None:
        raise UserError("--eval-physics: only with --policy mlp")
    if config.policy == "vla" and config.sensor_noise is not None:
        raise UserError("--sensor-noise: only with --policy mlp (the vla loader takes none yet)")
    if config.policy == "vla":
        from demofactory.train.vla_train import train_eval_vla  # transformers: only when asked for

        return train_eval_vla(dataset, resolved, config, info, log, save)
    if config.extra_camera is not None or config.shuffle_instructions:
        raise UserError("--extra-camera, --shuffle-instructions: only with --policy vla")
    if {"aux_objects", "fine_keypoints"} & config.model_fields_set:  # given, not defaulted
        raise UserError("--aux-objects, --fine-keypoints: only with --policy vla")
    camera = dataset_camera(info, config.camera, dataset) if config.camera is not None else None
    layout = make_obs_layout(
        scene.model,
        scene.bodies,
        1.0 / scene.spec.task.horizon if config.time_feature else None,
        arms=scene.arms if scene.spec.task.two_arm is not None else (),
    )
    t0 = time.perf_counter()
    data = load_training_data(
        dataset, layout, config.horizon, config.camera, sensor_noise=config.sensor_noise
    )
    total_steps = data.steps
    if config.drop_idle:
        data = data.select(~idle_steps(data, config.idle_window, config.idle_distance))
    load_s = time.perf_counter() - t0
    log(
        f"loaded {len(data.episodes)} episodes, {total_steps} steps "
        f"({total_steps - data.steps} idle dropped) "
        f"in {load_s:.1f} s"
    )
    policy, train = train_policy(data, config, on_log=lambda s, v: log(f"step {s}: loss {v:.4f}"))
    log(f"trained {config.steps} steps in {train.time_s:.1f} s, final loss {train.final_loss:.4f}")
    if save is not None:
        torch.save(
            {
                "state_dict": policy.state_dict(),
                "config": config.model_dump(),
                "layout": layout.__dict__,
            },
            save,
        )
    t1 = time.perf_counter()
    renderer = FrameRenderer(scene, [camera], scene.spec.render) if camera is not None else None
    try:
        view = (
            None
            if renderer is None
            else partial(camera_view, renderer, camera.name, scene.spec.render.jpeg_quality)
        )
        log(f"rollouts under {describe(physics)}")
        rollouts = evaluate(
            resolved,
            policy,
            layout,
            config,
            camera_view=view,
            physics=physics,
            on_rollout=lambda r: log(
                f"rollout seed {r['seed']}: {'success' if r['success'] else 'failure'} "
                f"in {r['steps']} steps"
            ),
        )
    finally:
        if renderer is not None:
            renderer.close()
    eval_s = time.perf_counter() - t1
    report = make_report(
        dataset, resolved, info, config, data, layout, policy, train, load_s, rollouts, eval_s
    )
    report.update(
        steps=total_steps, steps_trained_on=data.steps, idle_steps_dropped=total_steps - data.steps
    )
    report["eval_physics"] = None if physics is None else physics.to_json()
    return report
