"""What every `factory train-eval` policy shares: the dataset's steps, the fit loop, rollouts in
the spec's Scene under evaluation seeds, and the JSON report (see `demofactory.train.train_eval`).

The single-robot MLP (`demofactory.train.train_eval`), the mixed-robot policy
(`demofactory.train.mixed`)
and the VLA (`demofactory.train.vla_train`) import it; it imports none of them.
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
from demofactory.build.output_dir import require_dataset_info
from demofactory.errors import UserError
from demofactory.generators.mimicgen import sample_placement
from demofactory.generators.scene_api import Placement
from demofactory.robustness.eval_physics import EvalPhysics, rollout_physics
from demofactory.seeds.resolve import Resolved
from demofactory.shards import check_shards, load_episodes, load_manifest
from demofactory.shards.loader import make_loader
from demofactory.shards.metadata import load_dataset_info
from demofactory.shards.sensor_noise import resolve_sensor_noise
from demofactory.simulation.render import FrameRenderer, encode_jpeg
from demofactory.simulation.scene import Scene
from demofactory.specs.adapters import placement_params
from demofactory.specs.spec import CameraSpec
from demofactory.train.config import TrainEvalConfig
from demofactory.train.policy import (
    ACTION_DIM,
    PROPRIO_DIM,
    ChunkPolicy,
    ObsLayout,
    ensemble,
    finalize_action,
    make_observation,
    masked_l1,
    mean_std,
)
from PIL import Image

# Spawn key of evaluation seeds: disjoint from generation's SeedSequence([seed, shard, attempt]).
EVAL_NAMESPACE = 0xE7A1
SEED_DERIVATION = (
    "eval_seed(spec.seed, i) = hash of SeedSequence(spec.seed, spawn_key=(0xE7A1, i)), "
    "i = 0..rollouts-1"
)


@dataclass(frozen=True)
class TrainingData:
    """A dataset held in memory: obs [N, D] float32, chunks [N, H, A] float32 (A = 7 per arm),
    masks [N, H] bool, episode [N] int64 (global episode index of each step, steps of an episode
    adjacent and in order)."""

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
            "robot's state: use demofactory.train.mixed"
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
    (see drop_idle): no arm moves, when the actions are of several arms (7 each).

    Uses the observation's proprio part (per arm a, at 9a: eef position, dims 0..2; finger
    joints, dims 7..8) and each step's own gripper commands (the chunk's first action, the last
    of each arm's 7).
    """
    n = len(data.obs)
    idle = np.ones(n, dtype=bool)
    for arm in range(data.chunks.shape[-1] // ACTION_DIM):
        p = arm * PROPRIO_DIM
        eef, fingers = data.obs[:, p : p + 3], data.obs[:, p + 7 : p + 9]
        closed = data.chunks[:, 0, (arm + 1) * ACTION_DIM - 1] > 0
        for k in range(1, window + 1):  # step t against t + k, when in the same episode
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
    # a small MLP gains nothing from more; on busy cores they cost 10x
    torch.set_num_threads(config.threads)
    torch.manual_seed(config.seed)
    gen = torch.Generator().manual_seed(config.seed)
    image_shape = None if data.images is None else data.images.shape[1:]
    policy = ChunkPolicy(
        data.obs.shape[1],
        config.horizon,
        config.hidden,
        config.layers,
        action_dim=data.chunks.shape[-1],  # 7 a robot arm: 14 for a two-arm dataset
        image_shape=image_shape,
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
    # progress: which subtask checks ever held
    pending = progress_checks(scene)
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
        for label, holds in [c for c in pending if c[1]()]:
            pending.remove((label, holds))
            reached.append(label)
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


def progress_checks(scene: Scene) -> list[tuple[str, Callable[[], bool]]]:
    """The subtasks' end predicates as (label, check) pairs, in spec order: on a two-arm scene
    each checked with its subtask's arm as the hand and labelled `arm:predicate`."""
    subtasks = [s for s in scene.spec.subtasks if s.ends_when]
    if scene.spec.task.two_arm is None:
        return [(s.ends_when, partial(scene.holds, s.ends_when)) for s in subtasks]
    return [
        (f"{s.arm}:{s.ends_when}", partial(scene.holds_for, s.arm, s.ends_when)) for s in subtasks
    ]


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


def make_report(
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
        "arms": list(layout.arms) or None,  # a two-arm task's arms, right first (None: one arm)
        "action_dim": policy.action_dim,
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
