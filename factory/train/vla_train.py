"""`factory train-eval --policy vla`: train the language-conditioned image policy, roll it out.

    factory train-eval out/lift_colour --spec scene_specs/lift_colour.yaml --policy vla \\
        --camera frontcam --steps 3000 --batch-size 64 --rollouts 50

    dataset shards ──► make_loader(cameras, no sim_state, no normalization), one pass
        ──► observation [N, 9 (+1)]: proprio (+ time) only      (ObsLayout with no objects)
            frames [N, C, 3, h, w] uint8, action_chunk [N, H, 7], action_mask [N, H]
            phrases per episode: its instruction + provenance["paraphrases"]
              (--shuffle-instructions: episodes' phrase lists permuted, seeded: the control)
        ──► drop idle steps (as for the MLP)
        ──► tokenizer fitted on every phrase (demofactory.train.vla.fit_tokenizer)
        ──► VlaPolicy, masked L1 on normalized chunks; per sample one of its episode's phrases
            drawn at random, frames shifted by up to SHIFT pixels (augmentation)
        ──► rollouts as for the MLP (same evaluation seeds, start state, success check), and per
            rollout the language of its own seed: episode_language(spec, seed) gives the
            instruction and the palette colours, painted into the scene before it is rendered
            (what generation does for the attempt with that seed)
        ──► the train-eval report, with policy.kind "vla" and each rollout's instruction
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from demofactory.errors import UserError
from demofactory.seeds.resolve import Resolved
from demofactory.shards import load_episodes
from demofactory.shards.loader import make_loader
from demofactory.simulation.render import FrameRenderer, encode_jpeg
from demofactory.specs.language import episode_language, paint_objects
from demofactory.specs.spec import CameraSpec
from demofactory.train.config import TrainEvalConfig
from demofactory.train.core import (
    TrainingData,
    TrainLog,
    dataset_camera,
    eval_seed,
    fit,
    idle_steps,
    make_report,
    run_rollout,
    start_state,
)
from demofactory.train.policy import (
    ObsLayout,
    make_obs_layout,
    make_observation,
    masked_l1,
    mean_std,
)
from demofactory.train.vla import (
    InstructedPolicy,
    VlaArch,
    VlaPolicy,
    encode_texts,
    fit_tokenizer,
    save_vla,
)
from PIL import Image
from tokenizers import Tokenizer
from torch.nn import functional as F

SHIFT = 4  # pixels: random-shift augmentation of 84x84 frames (DrQ's 4)
SHUFFLE_STREAM = 0x5F1  # SeedSequence key of the --shuffle-instructions permutation


def proprio_layout(time_scale: float | None) -> ObsLayout:
    """The observation of an image policy: the robot's own state (+ time), no object at all."""
    return ObsLayout((), (), time_scale)


def load_vla_data(
    dataset: Path,
    layout: ObsLayout,
    horizon: int,
    cameras: Sequence[str],
    batch: int = 512,
    objects: ObsLayout | None = None,
) -> tuple[TrainingData, dict[int, str], np.ndarray | None]:
    """One pass over `dataset`: proprio observations, frames [N, C, 3, h, w] of `cameras`,
    chunks and masks; each episode's instruction; and, with `objects` (a layout of the spec's
    objects), their positions [N, 3 * objects] read from the stored MuJoCo state: training
    targets of the auxiliary loss, never part of the observation (None without `objects`)."""
    stream = make_loader(
        dataset,
        cameras=list(cameras),
        action_horizon=horizon,
        normalization="none",
        extra_keys=["sim_state"] if objects is not None else [],
    )
    loader = torch.utils.data.DataLoader(stream, batch_size=batch, num_workers=0)
    obs, chunks, masks, episode, images, instructions = [], [], [], [], [], {}
    positions = []
    for item in loader:
        proprio = item["state"].numpy()
        no_objects = np.zeros((len(proprio), 0))  # the layout reads nothing from it
        obs.append(make_observation(proprio, no_objects, layout, item["step"].numpy()))
        images.append(np.stack([item["images"][c].numpy() for c in cameras], axis=1))
        chunks.append(item["action_chunk"].numpy())
        masks.append(item["action_mask"].numpy())
        episode.append(item["episode"].numpy())
        instructions.update(zip(item["episode"].tolist(), item["instruction"], strict=True))
        if objects is not None:
            positions.append(object_positions(item["sim_state"].numpy(), objects))
    if not obs:
        raise UserError(f"{dataset}: the loader yielded no samples")
    order = np.concatenate(episode)
    data = TrainingData(
        np.concatenate(obs),
        np.concatenate(chunks),
        np.concatenate(masks),
        order,
        tuple(dict.fromkeys(order.tolist())),
        np.concatenate(images),
    )
    return data, instructions, np.concatenate(positions) if objects is not None else None


def object_positions(sim_state: np.ndarray, objects: ObsLayout) -> np.ndarray:
    """Stored MuJoCo states [N, S] (time, qpos, qvel) -> the objects' world positions
    [N, 3 * objects] float32, read from their free joints as `make_observation` reads them."""
    columns = [sim_state[:, 1 + adr : 4 + adr] for adr in objects.qpos_adr]
    return np.concatenate(columns, axis=1).astype(np.float32)


def episode_phrases(
    dataset: Path, instructions: dict[int, str], shuffle: bool, seed: int
) -> dict[int, tuple[str, ...]]:
    """Per episode: its instruction, then the paraphrases its provenance lists.

    shuffle: the control of the language benchmark; each episode gets another episode's phrases
    (a seeded permutation), so the words no longer say which object the frames show being lifted.
    """
    paraphrases = {r.index: r.provenance.get("paraphrases", []) for r in load_episodes(dataset)}
    phrases = {
        ep: (text, *[p for p in paraphrases.get(ep, []) if p != text])
        for ep, text in instructions.items()
    }
    if not shuffle:
        return phrases
    episodes = sorted(phrases)
    rng = np.random.default_rng(np.random.SeedSequence([seed, SHUFFLE_STREAM]))
    order = rng.permutation(len(episodes))
    return {ep: phrases[episodes[j]] for ep, j in zip(episodes, order, strict=True)}


def random_shift(images: torch.Tensor, pad: int, gen: torch.Generator) -> torch.Tensor:
    """Frames [B, C, 3, h, w]: each sample translated by up to `pad` pixels (edges replicated)."""
    b, c, ch, h, w = images.shape
    padded = F.pad(images.reshape(b, c * ch, h, w), (pad, pad, pad, pad), mode="replicate")
    dx, dy = torch.randint(0, 2 * pad + 1, (2, b), generator=gen).tolist()
    crops = [
        padded[i, :, y : y + h, x : x + w] for i, (x, y) in enumerate(zip(dx, dy, strict=True))
    ]
    return torch.stack(crops).view(b, c, ch, h, w)


def train_vla(
    data: TrainingData,
    phrases: dict[int, tuple[str, ...]],
    config: TrainEvalConfig,
    on_log: Callable[[int, float], None] | None = None,
    positions: np.ndarray | None = None,
) -> tuple[VlaPolicy, Tokenizer, TrainLog]:
    """Fit a tokenizer to the phrases and a VlaPolicy to `data` for `config.steps` AdamW steps.

    positions: [N, 3 * objects], the objects' positions at each step; with
    `config.aux_objects` > 0 the loss adds that weight times the mean squared error of the
    policy's auxiliary head (keypoints -> positions, normalized).
    """
    aux = positions is not None and config.aux_objects > 0
    torch.set_num_threads(config.threads)
    torch.manual_seed(config.seed)
    gen = torch.Generator().manual_seed(config.seed)
    table = sorted({p for texts in phrases.values() for p in texts})
    tokenizer = fit_tokenizer(table)
    ids, mask = (torch.from_numpy(a) for a in encode_texts(tokenizer, table))
    row = {p: i for i, p in enumerate(table)}
    # Per step: the table rows of its episode's phrases, as (first, count) into `choices`.
    choices, first, count = [], {}, {}
    for ep, texts in phrases.items():
        first[ep], count[ep] = len(choices), len(texts)
        choices += [row[p] for p in texts]
    choices_t = torch.tensor(choices)
    step_first = torch.tensor([first[int(e)] for e in data.episode])
    step_count = torch.tensor([count[int(e)] for e in data.episode])
    arch = VlaArch(
        obs_dim=data.obs.shape[1],
        horizon=config.horizon,
        cameras=data.images.shape[1],
        image_shape=tuple(data.images.shape[2:]),
        vocab_size=tokenizer.get_vocab_size(),
        hidden=config.hidden,
        layers=config.layers,
        aux_dim=positions.shape[1] if aux else 0,
        fine_keypoints=config.fine_keypoints,
    )
    policy = VlaPolicy(arch)
    policy.set_normalization(mean_std(data.obs), mean_std(data.chunks[:, 0]))
    with torch.no_grad():
        obs = policy.normalize_obs(torch.from_numpy(data.obs))
        chunks = policy.normalize_actions(torch.from_numpy(data.chunks))
        masks = torch.from_numpy(data.masks).float()
    images = torch.from_numpy(data.images)
    if aux:
        mean, std = (torch.from_numpy(a) for a in mean_std(positions))
        targets = (torch.from_numpy(positions) - mean) / std
        policy.aux_mean.copy_(mean)
        policy.aux_std.copy_(std)
    action_losses, aux_errors = [], []  # per step: the action term, the aux head's error in m

    def batch_loss() -> torch.Tensor:
        idx = torch.randint(len(obs), (config.batch_size,), generator=gen)
        pick = (torch.rand(len(idx), generator=gen) * step_count[idx]).long()
        text_rows = choices_t[step_first[idx] + pick]
        pixels = random_shift(images[idx].float() / 255.0, SHIFT, gen)
        text = policy.embed(ids[text_rows], mask[text_rows])
        chunk, points = policy.forward_with_points(obs[idx], pixels, text)
        loss = masked_l1(chunk, chunks[idx], masks[idx])
        action_losses.append(loss.item())
        if aux:
            predicted = policy.aux(points)
            loss = loss + config.aux_objects * F.mse_loss(predicted, targets[idx])
            with torch.no_grad():  # metres, per coordinate: what the keypoints know
                aux_errors.append(((predicted - targets[idx]) * std).abs().mean().item())
        return loss

    log = fit(policy, batch_loss, config, on_log)
    tail = max(1, config.steps // 20)  # as fit's final_loss: the last 5 % of steps
    parts = {
        "first_action_loss": round(action_losses[0], 5),
        "final_action_loss": round(float(np.mean(action_losses[-tail:])), 5),
    }
    if aux:
        parts["first_aux_error_m"] = round(aux_errors[0], 5)
        parts["final_aux_error_m"] = round(float(np.mean(aux_errors[-tail:])), 5)
    return policy, tokenizer, replace(log, parts=parts)


def frames_view(renderer: FrameRenderer, names: Sequence[str], jpeg_quality: int) -> np.ndarray:
    """The current frames [C, h, w, 3] uint8 of cameras `names`, through the JPEG round trip
    the dataset's frames took."""
    rendered = renderer.render_current()
    out = []
    for name in names:
        with Image.open(io.BytesIO(encode_jpeg(rendered[name], jpeg_quality))) as image:
            out.append(np.asarray(image.convert("RGB")))
    return np.stack(out)


def evaluate_vla(
    resolved: Resolved,
    policy: VlaPolicy,
    tokenizer: Tokenizer,
    layout: ObsLayout,
    config: TrainEvalConfig,
    cameras: Sequence[CameraSpec],
    on_rollout: Callable[[dict], None] | None = None,
) -> list[dict]:
    """`config.rollouts` rollouts with seeds eval_seed(spec.seed, 0..n-1), each told the
    instruction of its own seed and showing that seed's colours."""
    spec, scene = resolved.spec, resolved.scene
    start = start_state(resolved)
    renderer = FrameRenderer(scene, cameras, spec.render)
    names = [c.name for c in cameras]
    results = []
    try:
        for i in range(config.rollouts):
            seed = eval_seed(spec.seed, i)
            language = episode_language(spec, seed)
            unpaint = paint_objects(scene, language.rgba)
            try:
                result = run_rollout(
                    scene,
                    InstructedPolicy(policy, tokenizer, language.instruction),
                    layout,
                    start,
                    seed,
                    config,
                    lambda: frames_view(renderer, names, spec.render.jpeg_quality),
                )
            finally:
                unpaint()
            result["instruction"] = language.instruction
            results.append(result)
            if on_rollout is not None:
                on_rollout(result)
    finally:
        renderer.close()
    return results


def train_eval_vla(
    dataset: Path,
    resolved: Resolved,
    config: TrainEvalConfig,
    info: dict,
    log: Callable[[str], None] = lambda s: None,
    save: Path | None = None,
) -> dict:
    """`train_eval` for `--policy vla` (the dataset already checked against the spec)."""
    if config.camera is None:
        names = ", ".join(c["name"] for c in info.get("cameras", [])) or "none"
        raise UserError(f"--policy vla: expected --camera NAME, a camera of {dataset} ({names})")
    names = [config.camera, *([config.extra_camera] if config.extra_camera else [])]
    cameras = [dataset_camera(info, name, dataset) for name in names]
    if len({(c.width, c.height) for c in cameras}) > 1:
        raise UserError(
            f"--extra-camera {config.extra_camera}: expected frames the size of --camera's"
        )
    scene = resolved.scene
    layout = proprio_layout(1.0 / scene.spec.task.horizon if config.time_feature else None)
    t0 = time.perf_counter()
    # The auxiliary targets: the spec's objects that move freely (a fixture's pose is known).
    free = {n: b for n, b in scene.bodies.items() if b in set(scene.free_bodies)}
    objects = make_obs_layout(scene.model, free) if config.aux_objects > 0 and free else None
    data, instructions, positions = load_vla_data(
        dataset, layout, config.horizon, names, objects=objects
    )
    total_steps = data.steps
    if config.drop_idle:
        keep = ~idle_steps(data, config.idle_window, config.idle_distance)
        data = data.select(keep)
        positions = None if positions is None else positions[keep]
    phrases = episode_phrases(dataset, instructions, config.shuffle_instructions, config.seed)
    load_s = time.perf_counter() - t0
    log(f"loaded {len(data.episodes)} episodes, {total_steps} steps in {load_s:.1f} s")
    policy, tokenizer, train = train_vla(
        data,
        phrases,
        config,
        on_log=lambda s, v: log(f"step {s}: loss {v:.4f}"),
        positions=positions,
    )
    log(f"trained {config.steps} steps in {train.time_s:.1f} s, final loss {train.final_loss:.4f}")
    if save is not None:
        save_vla(save, policy, tokenizer, config.model_dump(), layout.__dict__)
    t1 = time.perf_counter()
    rollouts = evaluate_vla(
        resolved,
        policy,
        tokenizer,
        layout,
        config,
        cameras,
        on_rollout=lambda r: log(
            f"rollout seed {r['seed']} ({r['instruction']!r}): "
            f"{'success' if r['success'] else 'failure'} in {r['steps']} steps"
        ),
    )
    report = make_report(
        dataset,
        resolved,
        info,
        config,
        data,
        layout,
        policy,
        train,
        load_s,
        rollouts,
        time.perf_counter() - t1,
    )
    arch = policy.arch
    report["observation"] = {
        "kind": "proprio+" + "+".join(names) + "+instruction",
        "dim": layout.dim,
        "names": layout.names(),
        "image_shape": [len(names), *arch.image_shape],
    }
    report["policy"] = {
        "kind": "vla",
        "text_encoder": f"BertModel hidden {arch.text_dim}, {arch.text_layers} layers (scratch)",
        "tokenizer": {"model": "WordLevel", "vocab_size": arch.vocab_size},
        "vision": f"per camera: 3 convs, FiLM by the text, {arch.keypoints} spatial-softmax "
        f"keypoints at 1/4 resolution and {arch.fine_keypoints} at 1/2",
        "hidden": arch.hidden,
        "layers": arch.layers,
        "horizon": config.horizon,
        "execute": config.execute,
        "temporal_ensemble": config.temporal_ensemble,
        "parameters": sum(p.numel() for p in policy.parameters()),
        "aux_objects": {
            "weight": config.aux_objects if arch.aux_dim else 0.0,
            "objects": list(objects.objects) if objects is not None and arch.aux_dim else [],
        },
    }
    report["loss_parts"] = train.parts  # the action term alone, and the aux head's error
    report["instructions"] = {
        "distinct": len({p for texts in phrases.values() for p in texts}),
        "shuffled": config.shuffle_instructions,
    }
    report.update(
        steps=total_steps, steps_trained_on=data.steps, idle_steps_dropped=total_steps - data.steps
    )
    return report
