"""`factory train-eval` on a mixed-robot dataset: one policy for all its robots, or one robot's.

    factory train-eval out/lift_mixed_lowdim --spec scene_specs/mixed/lift_mixed_lowdim.yaml \\
        --rollouts 20                              # one policy, rolled out on every robot
    ... --embodiment Sawyer                        # the Sawyer's episodes only, rolled out on it

    dataset_info.json embodiments {robot: {id, state layout, sim_state dim}}
        ──► per robot trained on (all, or --embodiment's): load_training_data(embodiment=robot)
            with that robot's ObsLayout (its own scene's free-joint qpos addresses: the IIWA's
            differ from the Panda's); proprio as stored, zero-padded to the widest robot's
            ──► observation [N, D] + the robot's one-hot [E] (E: the dataset's robots, by id)
        ──► EmbodimentPolicy: a ChunkPolicy whose observations are normalized with their own
            robot's mean/std (picked by the one-hot); actions with one mean/std over all steps
        ──► train_policy's recipe (same loss, optimizer, steps, batches, seed)
        ──► per robot rolled out on: evaluate() in that robot's Scene (its start state and
            placement sampler; seeds eval_seed(spec.seed, i): the same placements on every robot)
        ──► the single-robot report's fields, plus per_robot {robot: success, rollouts, ...}

Rolling out, a robot's live proprio is zero-padded to the dataset's width and its one-hot
appended (`OnRobot`), so it sees the observation its stored steps gave.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from demofactory.build.output_dir import require_dataset_info
from demofactory.errors import UserError
from demofactory.seeds.resolve import Resolved
from demofactory.shards import check_shards, load_episodes, load_manifest
from demofactory.train.config import TrainEvalConfig
from demofactory.train.core import (
    TrainingData,
    evaluate,
    fit,
    idle_steps,
    load_training_data,
    make_report,
)
from demofactory.train.policy import ChunkPolicy, make_obs_layout, masked_l1, mean_std


class EmbodimentPolicy(ChunkPolicy):
    """A ChunkPolicy over observations [B, D + E] whose last E dims are a robot one-hot: the first
    D are normalized with that robot's own mean/std ([E, D] buffers), the one-hot is left as is."""

    def __init__(self, obs_dim: int, robots: int, horizon: int, hidden: int, layers: int):
        super().__init__(obs_dim + robots, horizon, hidden, layers)
        self.robots = robots
        self.register_buffer("robot_obs_mean", torch.zeros(robots, obs_dim))
        self.register_buffer("robot_obs_std", torch.ones(robots, obs_dim))

    def set_robot_normalization(self, robot: int, mean: np.ndarray, std: np.ndarray) -> None:
        self.robot_obs_mean[robot] = torch.as_tensor(mean)
        self.robot_obs_std[robot] = torch.as_tensor(std)

    def normalize_obs(self, obs: torch.Tensor) -> torch.Tensor:
        d = obs.shape[-1] - self.robots
        ids = obs[..., d:].argmax(-1)
        own = (obs[..., :d] - self.robot_obs_mean[ids]) / self.robot_obs_std[ids]
        return torch.cat([own, obs[..., d:]], dim=-1)


class OnRobot:
    """The policy as one robot sees it in a rollout: its observation [own proprio, rest] ->
    [proprio zero-padded to `width`, rest, one-hot]; `act` as ChunkPolicy.act."""

    def __init__(self, policy: EmbodimentPolicy, robot_id: int, own: int, width: int):
        self.policy, self.own, self.width = policy, own, width
        self.one_hot = np.eye(policy.robots, dtype=np.float32)[robot_id]

    def act(self, obs: np.ndarray, image: np.ndarray | None = None) -> np.ndarray:
        pad = np.zeros(self.width - self.own, dtype=np.float32)
        return self.policy.act(
            np.concatenate([obs[: self.own], pad, obs[self.own :], self.one_hot]), image
        )


def robot_resolved(resolved: Resolved, robot: str) -> Resolved:
    """The spec's env and demos for `robot` (a UserError when the spec does not list it)."""
    if robot in resolved.robots:
        return resolved.robots[robot]
    if not resolved.robots and resolved.spec.task.robot == robot:
        return resolved
    listed = sorted(resolved.robots) or [resolved.spec.task.robot]
    raise UserError(
        f"--spec {resolved.spec.path}: task.robots lists {', '.join(listed)}, not {robot}, a "
        "robot of the dataset; pass the spec the dataset was made from"
    )


def check_mixed_dataset(dataset: Path, resolved: Resolved, config: TrainEvalConfig) -> dict:
    """dataset_info.json's embodiments {robot: entry}, each robot's env checked against the spec,
    every shard against manifest.json; the flags this path does not take refused."""
    for flag, value in (
        ("--policy vla", config.policy == "vla"),
        ("--camera", config.camera is not None),
        ("--eval-physics", config.eval_physics is not None),
        ("--extra-camera", config.extra_camera is not None),
        ("--shuffle-instructions", config.shuffle_instructions),
    ):
        if value:
            raise UserError(f"{flag}: not with a mixed-robot dataset or --embodiment yet")
    info = require_dataset_info(dataset)
    check_shards(dataset, load_manifest(dataset))
    robots = info.get("embodiments") or {}
    if config.embodiment is not None and config.embodiment not in robots:
        raise UserError(
            f"--embodiment {config.embodiment}: {dataset} has no such robot "
            f"(it has: {', '.join(sorted(robots)) or 'none recorded'})"
        )
    for robot, entry in robots.items():
        scene = robot_resolved(resolved, robot).scene
        dim = (entry.get("sim_state") or {}).get("dim")
        if info.get("env") != scene.spec.task.env or dim != scene.state_size:
            raise UserError(
                f"{dataset}: {robot}'s episodes are of {info.get('env')!r} (sim_state dim {dim}), "
                f"but --spec {resolved.spec.path} builds {scene.spec.task.env!r} on {robot} "
                f"(state size {scene.state_size}); pass the spec it was made from"
            )
    return info


def load_mixed(
    dataset: Path, resolved: Resolved, config: TrainEvalConfig, robots: list[str], ids: dict
) -> tuple[dict[str, TrainingData], dict, int]:
    """Per robot trained on: its steps (idle ones dropped when asked), its layout; and the
    number of steps before dropping."""
    data, layouts, total = {}, {}, 0
    scale = 1.0 / resolved.spec.task.horizon if config.time_feature else None
    for robot in robots:
        scene = robot_resolved(resolved, robot).scene
        layouts[robot] = make_obs_layout(scene.model, scene.bodies, scale)
        part = load_training_data(
            dataset,
            layouts[robot],
            config.horizon,
            sensor_noise=config.sensor_noise,
            embodiment=robot,
        )
        total += part.steps
        if config.drop_idle:
            part = part.select(~idle_steps(part, config.idle_window, config.idle_distance))
        one_hot = np.zeros((part.steps, len(ids)), dtype=np.float32)
        one_hot[:, ids[robot]] = 1.0
        data[robot] = TrainingData(
            np.concatenate([part.obs, one_hot], axis=1),
            part.chunks,
            part.masks,
            part.episode,
            part.episodes,
        )
    return data, layouts, total


def train_mixed(
    data: dict[str, TrainingData],
    ids: dict[str, int],
    config: TrainEvalConfig,
    on_log: Callable[[int, float], None] | None = None,
):
    """train_policy's recipe on every robot's steps at once, observations normalized per robot."""
    torch.set_num_threads(config.threads)
    torch.manual_seed(config.seed)
    gen = torch.Generator().manual_seed(config.seed)
    obs_np = np.concatenate([d.obs for d in data.values()])
    chunks_np = np.concatenate([d.chunks for d in data.values()])
    dim = obs_np.shape[1] - len(ids)
    policy = EmbodimentPolicy(dim, len(ids), config.horizon, config.hidden, config.layers)
    policy.set_normalization(mean_std(obs_np), mean_std(chunks_np[:, 0]))
    for robot, part in data.items():
        policy.set_robot_normalization(ids[robot], *mean_std(part.obs[:, :dim]))
    with torch.no_grad():
        obs = policy.normalize_obs(torch.from_numpy(obs_np))
        chunks = policy.normalize_actions(torch.from_numpy(chunks_np))
        masks = torch.from_numpy(np.concatenate([d.masks for d in data.values()])).float()

    def batch_loss() -> torch.Tensor:
        idx = torch.randint(len(obs), (config.batch_size,), generator=gen)
        return masked_l1(policy(obs[idx]), chunks[idx], masks[idx])

    return policy, fit(policy, batch_loss, config, on_log)


def train_eval_mixed(
    dataset: Path,
    resolved: Resolved,
    config: TrainEvalConfig,
    log: Callable[[str], None] = lambda s: None,
    save: Path | None = None,
) -> dict:
    """Load, train, roll out on each robot; the report (see the module docstring)."""
    info = check_mixed_dataset(dataset, resolved, config)
    entries = info.get("embodiments") or {}
    ids = {robot: int(entry["id"]) for robot, entry in entries.items()}
    ids = dict(sorted(ids.items(), key=lambda kv: kv[1]))
    robots = [config.embodiment] if config.embodiment is not None else list(ids)
    width = int(info["state"]["dim"])
    t0 = time.perf_counter()
    data, layouts, total = load_mixed(dataset, resolved, config, robots, ids)
    load_s = time.perf_counter() - t0
    for robot, part in data.items():
        log(f"{robot}: {len(part.episodes)} episodes, {part.steps} steps kept")
    policy, train = train_mixed(data, ids, config, lambda s, v: log(f"step {s}: loss {v:.4f}"))
    log(f"trained {config.steps} steps in {train.time_s:.1f} s, final loss {train.final_loss:.4f}")
    if save is not None:
        torch.save(
            {
                "state_dict": policy.state_dict(),
                "config": config.model_dump(),
                "embodiments": ids,
                "layouts": {r: layout.__dict__ for r, layout in layouts.items()},
            },
            save,
        )
    seeds = {e.seed for e in load_episodes(dataset)}
    per_robot, everything, t1 = {}, [], time.perf_counter()
    for robot in robots:
        own = robot_resolved(resolved, robot)
        t = time.perf_counter()
        rollouts = evaluate(
            own,
            OnRobot(policy, ids[robot], own.scene.proprio().shape[0], width),
            layouts[robot],
            config,
            on_rollout=lambda r, robot=robot: log(
                f"{robot} rollout seed {r['seed']}: "
                f"{'success' if r['success'] else 'failure'} in {r['steps']} steps"
            ),
        )
        hits = sum(r["success"] for r in rollouts)
        per_robot[robot] = {
            "id": ids[robot],
            "episodes": len(data[robot].episodes),
            "steps_trained_on": data[robot].steps,
            "rollouts": len(rollouts),
            "successes": hits,
            "success_rate": round(hits / len(rollouts), 4) if rollouts else None,
            "eval_seeds_disjoint_from_dataset": not (seeds & {r["seed"] for r in rollouts}),
            "eval_time_s": round(time.perf_counter() - t, 2),
        }
        log(f"{robot}: {hits} of {len(rollouts)} rollouts succeeded")
        everything += [{**r, "robot": robot} for r in rollouts]
    merged = TrainingData(
        np.concatenate([d.obs for d in data.values()]),
        np.concatenate([d.chunks for d in data.values()]),
        np.concatenate([d.masks for d in data.values()]),
        np.concatenate([d.episode for d in data.values()]),
        tuple(e for d in data.values() for e in d.episodes),
    )
    report = make_report(
        dataset,
        resolved,
        info,
        config,
        merged,
        layouts[robots[0]],
        policy,
        train,
        load_s,
        everything,
        time.perf_counter() - t1,
    )
    report["observation"] = {
        "kind": "low_dim+embodiment",
        "dim": merged.obs.shape[1],
        "proprio_width": width,
        "embodiments": list(ids),
        "normalization": "per robot (observations), over all steps (actions)",
    }
    report["policy"]["kind"] = "mlp_action_chunk_embodiment"
    report.update(
        embodiments=list(ids),
        trained_on=robots,
        per_robot=per_robot,
        steps=total,
        steps_trained_on=merged.steps,
        idle_steps_dropped=total - merged.steps,
        eval_physics=None,
    )
    return report
