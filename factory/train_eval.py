"""`factory train-eval`: train a small behaviour-cloning policy on a dataset, then roll it out.

    factory train-eval out/lift_lowdim --spec scene_specs/lift_lowdim.yaml --rollouts 50 \\
        --out report.json

    dataset shards ──► make_loader(extra_keys=["sim_state"], no normalization), one pass
        ──► observation [N, D] (factory.policy: proprio + object poses from the stored MuJoCo state)
            action_chunk [N, H, 7], action_mask [N, H]          (held in memory: low-dimensional)
        ──► drop idle steps (pauses: nothing moves for the next 8 steps)
        ──► ChunkPolicy (MLP), masked L1 on normalized chunks, AdamW + cosine schedule,
            fixed step budget
        ──► rollouts in the spec's Scene: the generation's placement sampler and start state,
            evaluation seeds from their own namespace, success = the env's check held for k steps
        ──► one JSON report: data, training (time, loss curve),
            evaluation (per rollout seed/success/length)

Evaluation seeds: rollout i draws its placement from `default_rng(eval_seed(spec.seed, i))`, with
`eval_seed` hashing `SeedSequence(spec.seed, spawn_key=(0xE7A1, i))`. Generation seeds hash
`SeedSequence([spec.seed, shard, attempt])` (no spawn key), so the two never share a stream; the
report also checks that no evaluation seed equals a seed in the dataset's episodes.jsonl.

Length (~500 lines): one workflow read top to bottom (load, train, roll out, report); the model
is in `factory.policy` and the flags in `factory.train_eval_config` already.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from factory.adapters import placement_params
from factory.errors import UserError
from factory.eval_physics import EvalPhysics, describe, load_eval_physics, rollout_physics
from factory.policy import (
    ChunkPolicy,
    ObsLayout,
    ensemble,
    finalize_action,
    make_obs_layout,
    make_observation,
    masked_l1,
    mean_std,
)
from factory.render import FrameRenderer, encode_jpeg
from factory.resolve import Resolved
from factory.run import require_dataset_info
from factory.sim import Scene
from factory.spec import CameraSpec
from factory.train_eval_config import TrainEvalConfig
from generators.mimicgen import sample_placement
from generators.scene_api import Placement
from shards import check_shards, load_episodes, load_manifest
from shards.loader import make_loader
from shards.metadata import load_dataset_info
from shards.sensor_noise import resolve_sensor_noise

# Spawn key of evaluation seeds: disjoint from generation's SeedSequence([seed, shard, attempt]).
EVAL_NAMESPACE = 0xE7A1
SEED_DERIVATION = (
    "eval_seed(spec.seed, i) = hash of SeedSequence(spec.seed, spawn_key=(0xE7A1, i)), "
    "i = 0..rollouts-1"
)


@dataclass(frozen=True)
class TrainingData:
    """A dataset held in memory: obs [N, D] float32, chunks [N, H, 7] float32, masks [N, H] bool,
    episode [N] int64 (global episode index of each step, steps of an episode adjacent and in
    order)."""

    obs: np.ndarray
    chunks: np.ndarray
    masks: np.ndarray
    episode: np.ndarray
    episodes: tuple[int, ...]  # global episode indices, in stream order
    images: np.ndarray | None = None  # [N, 3, h, w] uint8 frames of one camera, or None

    def select(self, keep: np.ndarray) -> TrainingData:
        """The steps where `keep` [N] is True."""
        images = None if self.images is None else self.images[keep]
        return TrainingData(
            self.obs[keep],
            self.chunks[keep],
            self.masks[keep],
            self.episode[keep],
            self.episodes,
            images,
        )

    @property
    def steps(self) -> int:
        return len(self.obs)


@dataclass(frozen=True)
class TrainLog:
    time_s: float
    first_loss: float  # the first batch, before any update
    final_loss: float  # mean over the last 5 % of steps
    curve: list[tuple[int, float]]  # (step, mean loss since the previous point)
    parts: dict[str, float] | None = None  # a loss of several terms: each one's first and final


# ---------------------------------------------------------------- data


def check_dataset(dataset: Path, scene: Scene) -> dict:
    """The dataset's dataset_info.json, checked against the spec's env, and every shard against
    manifest.json (size, sha256): a damaged shard must not reach training (a DatasetError)."""
    info = require_dataset_info(dataset)
    check_shards(dataset, load_manifest(dataset))  # a DatasetError names the file
    spec = scene.spec
    if info.get("env") != spec.task.env or info.get("sim_state", {}).get("dim") != scene.state_size:
        raise UserError(
            f"{dataset}: dataset of {info.get('env')!r} "
            f"(sim_state dim {info.get('sim_state', {}).get('dim')}), "
            f"but --spec {spec.path} builds {spec.task.env!r} (state size {scene.state_size}); "
            "pass the spec it was made from"
        )
    robots = sorted(info.get("embodiments") or {})
    if len(robots) > 1:  # one model's state addresses: train_eval sends these to train_eval_mixed
        raise UserError(
            f"{dataset}: a mixed-robot dataset ({', '.join(robots)}); this check reads one "
            "robot's state: use factory.train_eval_mixed"
        )
    return info


def load_training_data(
    dataset: Path,
    layout: ObsLayout,
    horizon: int,
    camera: str | None = None,
    batch: int = 2048,
    sensor_noise: str | None = None,
    embodiment: str | None = None,
) -> TrainingData:
    """One pass of the streaming loader over `dataset`: observations, raw action chunks, masks
    (and frames); `sensor_noise`: TrainEvalConfig.sensor_noise's JSON, applied by the loader;
    `embodiment`: one robot's episodes of a mixed-robot dataset (None: all)."""
    cameras = [camera] if camera is not None else []
    try:
        noise = resolve_sensor_noise(
            None if sensor_noise is None else json.loads(sensor_noise), load_dataset_info(dataset)
        )
    except ValueError as err:
        raise UserError(f"--sensor-noise: {err} ({dataset})") from None
    stream = make_loader(
        dataset,
        cameras=cameras,
        action_horizon=horizon,
        normalization="none",
        extra_keys=["sim_state"],
        sensor_noise=noise,
        embodiment=embodiment,
    )
    loader = torch.utils.data.DataLoader(stream, batch_size=batch, num_workers=0)
    obs, chunks, masks, episode, images = [], [], [], [], []
    for item in loader:
        if camera is not None:
            images.append(item["images"][camera].numpy())
        obs.append(
            make_observation(
                item["state"].numpy(), item["sim_state"].numpy(), layout, item["step"].numpy()
            )
        )
        chunks.append(item["action_chunk"].numpy())
        masks.append(item["action_mask"].numpy())
        episode.append(item["episode"].numpy())
    if not obs:
        raise UserError(f"{dataset}: the loader yielded no samples")
    order = np.concatenate(episode)
    return TrainingData(
        np.concatenate(obs),
        np.concatenate(chunks),
        np.concatenate(masks),
        order,
        tuple(dict.fromkeys(order.tolist())),
        np.concatenate(images) if images else None,
    )


def idle_steps(data: TrainingData, window: int, distance: float) -> np.ndarray:
    """[N] bool: steps after which, for `window` steps of the same episode, nothing moves
    (see drop_idle).

    Uses the observation's proprio part (eef position, dims 0..2; finger joints, dims 7..8) and
    each step's own gripper command (the chunk's first action, last dim).
    """
    n = len(data.obs)
    eef, fingers, closed = data.obs[:, :3], data.obs[:, 7:9], data.chunks[:, 0, -1] > 0
    idle = np.ones(n, dtype=bool)
    for k in range(1, window + 1):  # compare step t with t + k, when t + k is in the same episode
        same = np.zeros(n, dtype=bool)
        same[: n - k] = data.episode[k:] == data.episode[: n - k]
        later = np.minimum(np.arange(n) + k, n - 1)
        still = (
            (np.linalg.norm(eef[later] - eef, axis=1) < distance)
            & (np.abs(fingers[later] - fingers).max(axis=1) < 1e-3)
            & (closed[later] == closed)
        )
        idle &= still | ~same
    return idle


# ---------------------------------------------------------------- training


def train_policy(
    data: TrainingData, config: TrainEvalConfig, on_log: Callable[[int, float], None] | None = None
) -> tuple[ChunkPolicy, TrainLog]:
    """Fit a ChunkPolicy to `data` for `config.steps` AdamW steps; seeded by `config.seed`."""
    torch.set_num_threads(
        config.threads
    )  # a small MLP gains nothing from more; on busy cores they cost 10x
    torch.manual_seed(config.seed)
    gen = torch.Generator().manual_seed(config.seed)
    image_shape = None if data.images is None else data.images.shape[1:]
    policy = ChunkPolicy(
        data.obs.shape[1], config.horizon, config.hidden, config.layers, image_shape=image_shape
    )
    policy.set_normalization(mean_std(data.obs), mean_std(data.chunks[:, 0]))
    with torch.no_grad():
        obs = policy.normalize_obs(torch.from_numpy(data.obs))
        chunks = policy.normalize_actions(torch.from_numpy(data.chunks))
        masks = torch.from_numpy(data.masks).float()
        images = None if data.images is None else torch.from_numpy(data.images)

    def batch_loss() -> torch.Tensor:
        idx = torch.randint(len(obs), (config.batch_size,), generator=gen)
        pixels = None if images is None else images[idx].float() / 255.0
        return masked_l1(policy(obs[idx], pixels), chunks[idx], masks[idx])

    return policy, fit(policy, batch_loss, config, on_log)


def fit(
    policy: torch.nn.Module,
    batch_loss: Callable[[], torch.Tensor],
    config: TrainEvalConfig,
    on_log: Callable[[int, float], None] | None = None,
) -> TrainLog:
    """`config.steps` AdamW steps on `batch_loss()` (a fresh batch each call), cosine-decayed
    learning rate; the loss curve in 20 windows. Leaves `policy` in eval mode."""
    opt = torch.optim.AdamW(policy.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=config.steps)
    every = max(1, config.steps // 20)
    curve, window, first = [], [], None
    start = time.perf_counter()
    for step in range(1, config.steps + 1):
        loss = batch_loss()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        schedule.step()
        value = loss.item()
        first = value if first is None else first
        window.append(value)
        if step % every == 0 or step == config.steps:
            curve.append((step, float(np.mean(window))))
            if on_log is not None:
                on_log(step, curve[-1][1])
            window = []
    elapsed = time.perf_counter() - start
    tail = max(1, config.steps // 20)
    final = float(np.mean([v for s, v in curve if s > config.steps - tail] or [curve[-1][1]]))
    policy.eval()
    return TrainLog(elapsed, float(first), final, curve)


# ---------------------------------------------------------------- evaluation


def eval_seed(spec_seed: int, index: int) -> int:
    """The seed of evaluation rollout `index`: a 63-bit int, like generation's `attempt_seed`."""
    state = np.random.SeedSequence(spec_seed, spawn_key=(EVAL_NAMESPACE, index)).generate_state(
        2, dtype=np.uint32
    )
    return int((int(state[0]) << 31) ^ int(state[1]))


@dataclass(frozen=True)
class StartState:
    """Where every rollout starts: the first seed demo's first state, and its objects' xy (m)."""

    state: np.ndarray  # [N]
    xy: dict[str, np.ndarray]


def start_state(resolved: Resolved) -> StartState:
    """The generation's start: `generate_attempt` resets to demos[0]'s first state before
    placing objects."""
    first = resolved.demos[0]
    return StartState(
        first.start_state, {name: poses[0][:2, 3] for name, poses in first.object_poses.items()}
    )


def run_rollout(
    scene: Scene,
    policy: ChunkPolicy,
    layout: ObsLayout,
    start: StartState,
    seed: int,
    config: TrainEvalConfig,
    camera_view: Callable[[], np.ndarray] | None = None,
    placement: Placement | None = None,
) -> dict:
    """One closed-loop episode from the placement drawn with `seed`: success, steps, placement.

    camera_view: for an image policy, returns the current frame [h, w, 3] uint8.
    placement: this one instead of a draw (benchmarks/bench_rebalance.py's uniform grid).
    """
    spec = scene.spec
    if placement is None:
        rng = np.random.default_rng(seed)
        placement = sample_placement(placement_params(spec.placement), start.xy, rng)
    scene.reset_to(start.state, placement)
    horizon = config.eval_horizon or spec.task.horizon
    hold = config.success_hold or spec.generation.success_hold_steps
    predictions: list[tuple[int, np.ndarray]] = []
    streak, plan, plan_start = 0, None, 0
    pending = [
        s.ends_when for s in spec.subtasks if s.ends_when
    ]  # progress: which subtask checks ever held
    reached: list[str] = []

    def predict(t: int) -> np.ndarray:
        obs = make_observation(scene.proprio(), scene.get_state(), layout, t)
        return policy.act(obs, None if camera_view is None else camera_view())

    for t in range(horizon):
        if config.temporal_ensemble is not None:
            predictions = [p for p in predictions if t - p[0] < config.horizon]
            predictions.append((t, predict(t)))
            raw = ensemble(predictions, t, config.temporal_ensemble)
        else:
            if plan is None or t - plan_start >= min(config.execute, config.horizon):
                plan, plan_start = predict(t), t
            raw = plan[t - plan_start]
        scene.step(finalize_action(raw))
        if not np.isfinite(scene.data.qpos).all():
            return {
                "seed": seed,
                "success": False,
                "steps": t + 1,
                "reached": reached,
                "placement": placement.to_json(),
                "reason": "simulator unstable",
            }
        for predicate in [p for p in pending if scene.holds(p)]:
            pending.remove(predicate)
            reached.append(predicate)
        streak = streak + 1 if scene.success() else 0
        if streak >= hold:
            return {
                "seed": seed,
                "success": True,
                "steps": t + 1,
                "reached": reached,
                "placement": placement.to_json(),
            }
    return {
        "seed": seed,
        "success": False,
        "steps": horizon,
        "reached": reached,
        "placement": placement.to_json(),
    }


def evaluate(
    resolved: Resolved,
    policy: ChunkPolicy,
    layout: ObsLayout,
    config: TrainEvalConfig,
    on_rollout: Callable[[dict], None] | None = None,
    camera_view: Callable[[], np.ndarray] | None = None,
    physics: EvalPhysics | None = None,
) -> list[dict]:
    """`config.rollouts` rollouts with seeds eval_seed(spec.seed, 0..n-1), in order; under
    `physics` (--eval-physics), each rollout's draw is in its result's "physics"."""
    start = start_state(resolved)
    results = []
    with rollout_physics(resolved.scene, physics) as set_for:
        for i in range(config.rollouts):
            seed = eval_seed(resolved.spec.seed, i)
            draw = set_for(seed)  # before run_rollout's reset, which applies it
            result = run_rollout(resolved.scene, policy, layout, start, seed, config, camera_view)
            if draw is not None:
                result["physics"] = draw
            results.append(result)
            if on_rollout is not None:
                on_rollout(result)
    return results


def dataset_camera(info: dict, name: str, dataset: Path) -> CameraSpec:
    """The dataset's camera `name` with its frame size (raises UserError naming the cameras it
    has)."""
    cameras = {c["name"]: c for c in info.get("cameras", [])}
    if name not in cameras:
        raise UserError(
            f"--camera {name}: {dataset} has no such camera "
            f"(it has: {', '.join(cameras) or 'none'})"
        )
    return CameraSpec(name=name, width=cameras[name]["width"], height=cameras[name]["height"])


def camera_view(renderer: FrameRenderer, name: str, jpeg_quality: int) -> np.ndarray:
    """The current frame of camera `name` [h, w, 3] uint8, through the JPEG round trip the
    dataset's frames took."""
    frame = renderer.render_current()[name]
    with Image.open(io.BytesIO(encode_jpeg(frame, jpeg_quality))) as image:
        return np.asarray(image.convert("RGB"))


# ---------------------------------------------------------------- the verb


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
    if (
        config.embodiment is not None
        or len(require_dataset_info(dataset).get("embodiments") or {}) > 1
    ):
        from factory.train_eval_mixed import train_eval_mixed  # one policy, several robots

        return train_eval_mixed(dataset, resolved, config, log, save)
    scene = resolved.scene
    info = check_dataset(dataset, scene)
    physics = None if config.eval_physics is None else load_eval_physics(config.eval_physics, scene)
    if config.policy == "vla" and physics is not None:
        raise UserError("--eval-physics: only with --policy mlp")
    if config.policy == "vla" and config.sensor_noise is not None:
        raise UserError("--sensor-noise: only with --policy mlp (the vla loader takes none yet)")
    if config.policy == "vla":
        from factory.vla_train import train_eval_vla  # transformers: only when asked for

        return train_eval_vla(dataset, resolved, config, info, log, save)
    if config.extra_camera is not None or config.shuffle_instructions:
        raise UserError("--extra-camera, --shuffle-instructions: only with --policy vla")
    if {"aux_objects", "fine_keypoints"} & config.model_fields_set:  # given, not defaulted
        raise UserError("--aux-objects, --fine-keypoints: only with --policy vla")
    camera = dataset_camera(info, config.camera, dataset) if config.camera is not None else None
    layout = make_obs_layout(
        scene.model, scene.bodies, 1.0 / scene.spec.task.horizon if config.time_feature else None
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
    report = _report(
        dataset, resolved, info, config, data, layout, policy, train, load_s, rollouts, eval_s
    )
    report.update(
        steps=total_steps, steps_trained_on=data.steps, idle_steps_dropped=total_steps - data.steps
    )
    report["eval_physics"] = None if physics is None else physics.to_json()
    return report


def _report(
    dataset, resolved, info, config, data, layout, policy, train, load_s, rollouts, eval_s
) -> dict:
    successes = sum(r["success"] for r in rollouts)
    dataset_seeds = (
        {e.seed for e in load_episodes(dataset)} if (dataset / "episodes.jsonl").exists() else set()
    )
    return {
        "dataset": str(dataset),
        "dataset_name": info.get("name"),
        "dataset_source": info.get("source", "generated"),
        "spec": str(resolved.spec.path),
        "env": resolved.spec.task.env,
        "episodes": len(data.episodes),
        "steps": data.steps,
        "observation": {
            "kind": "low_dim" if config.camera is None else f"low_dim+{config.camera}",
            "dim": layout.dim,
            "names": layout.names(),
            "image_shape": None if data.images is None else list(data.images.shape[1:]),
        },
        "policy": {
            "kind": "mlp_action_chunk",
            "hidden": config.hidden,
            "layers": config.layers,
            "horizon": config.horizon,
            "execute": config.execute,
            "temporal_ensemble": config.temporal_ensemble,
            "parameters": sum(p.numel() for p in policy.parameters()),
        },
        "config": config.model_dump(),
        "train_steps": config.steps,
        "batch_size": config.batch_size,
        "load_time_s": round(load_s, 2),
        "train_time_s": round(train.time_s, 2),
        "first_loss": round(train.first_loss, 5),
        "final_loss": round(train.final_loss, 5),
        "loss_curve": [[s, round(v, 5)] for s, v in train.curve],
        "rollouts": len(rollouts),
        "successes": successes,
        "success_rate": round(successes / len(rollouts), 4) if rollouts else None,
        "eval_horizon": config.eval_horizon or resolved.spec.task.horizon,
        "success_hold_steps": config.success_hold or resolved.spec.generation.success_hold_steps,
        "eval_seed_derivation": SEED_DERIVATION,
        "eval_seeds_disjoint_from_dataset": not (dataset_seeds & {r["seed"] for r in rollouts}),
        "eval_time_s": round(eval_s, 2),
        "per_rollout": rollouts,
    }
