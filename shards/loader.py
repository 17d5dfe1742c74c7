"""Streaming loader for training: shards -> one sample a time step, with its action chunk, as tensors.

    source: a dataset directory | shard paths or URLs | a brace pattern      resolve_shards
      -> ShardTask(url, part, parts): this rank/worker's shards             split_shards | resample_shards
      -> Member(task, name, data): the wanted tar members, in tar order     read_members
      -> RawSample(task, key, members): one time step                       group_samples
      -> RawEpisode(task, ordinal, samples): one whole episode, checked     group_episodes
      -> RawEpisode: only this split's part of each shard                   select_episodes
      -> EpisodeArrays: actions [T, A], states [T, S] normalized, JPEGs     decode_episodes
         (+ extra keys, e.g. sim_state [T, N], as stored)
      -> StepSample: action_chunk [H, A], action_mask [H], one per step     episode_steps
      -> StepSample, shuffled in a buffer                                   shuffle
      -> StepSample, this worker's share of epoch_length (resampled only)   take
      -> dict of tensors, ready for DataLoader's default collation          to_torch

Each stage is a function from an iterator to an iterator (the webdataset
style). Action chunks need the rest of the episode; episodes are whole and in
order inside a shard, so one episode a shard is held in memory at a time (as
JPEG bytes; frames are decoded only in the last stage).

Splitting (finite mode). Rank and world size come from torch.distributed when
it is initialized, else from the RANK/WORLD_SIZE environment variables (which
torchrun sets and DataLoader workers inherit); the worker from
`torch.utils.data.get_worker_info`. Split ``rank * num_workers + worker`` of
``world_size * num_workers`` then reads:

- shards >= splits: every splits-th shard, starting at its own index. Each step
  is read exactly once. Splits can differ by up to a shard's worth of steps;
  DDP, which needs equal batch counts per rank, should use resampled mode.
- shards < splits: shard ``split % shards``, keeping only the episodes whose
  position in the shard, modulo the number of splits reading that shard, is the
  split's turn. Each step is still yielded exactly once; a shard is read (not
  decoded) several times, and a split may get no episodes at all.

Resampled mode: each split draws shards with replacement from its own seeded
RNG and reads each draw whole, forever; with `epoch_length`, one rank's
DataLoader yields exactly `epoch_length` samples an iteration, spread over its
workers. Shards that turn out to hold no samples are dropped from the draw.
"""

from __future__ import annotations

import io
import itertools
import json
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache, partial
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
import torch
from braceexpand import braceexpand
from PIL import Image
from webdataset.gopen import gopen

from shards.format import (
    ACTION_KEY,
    META_KEY,
    SHARDS_DIRNAME,
    SIM_STATE_KEY,
    STATE_KEY,
    STATS_FILENAME,
    DatasetError,
    decode_depth_png,
    decode_segmentation_png,
    depth_member,
    segmentation_member,
    shards_dir,
)
from shards.manifest import load_manifest
from shards.metadata import load_dataset_info
from shards.normalize import NORMALIZATIONS, STD_FLOOR, Normalizer  # noqa: F401 (STD_FLOOR: re-exported)
from shards.stats import DatasetStats, load_stats
from shards.tario import iter_tar

IMAGE_DTYPES = ("uint8", "float32")

_ACTION_MEMBER = f"{ACTION_KEY}.npy"
_STATE_MEMBER = f"{STATE_KEY}.npy"
_META_MEMBER = f"{META_KEY}.json"
_META_FIELDS = frozenset({"episode", "step", "length", "instruction"})
_ITEM_KEYS = frozenset({"images", "state", "action_chunk", "action_mask", "instruction", "episode", "step",
                        "depth", "segmentation"})


# ---------------------------------------------------------------- configuration


@dataclass(frozen=True)
class LoaderConfig:
    """How `ShardDataset` turns shards into training samples; checked on construction."""

    cameras: tuple[str, ...] | None  # cameras to decode, in this order; None: every .jpg member
    action_horizon: int = 16  # H: actions t..t+H-1 per sample, >= 1
    normalization: str = "mean_std"  # one of NORMALIZATIONS, applied to state and actions
    shuffle_buffer: int = 0  # samples held for shuffling; 0 or 1: stream order, shards in order
    seed: int = 0  # with the epoch, rank and worker: every random draw
    resampled: bool = False  # draw shards with replacement, forever (or epoch_length)
    epoch_length: int | None = None  # resampled only: samples a rank yields per iteration
    image_dtype: str = "uint8"  # "uint8" [3, H, W] 0..255, or "float32" [3, H, W] in [0, 1]
    extra_keys: tuple[str, ...] = ()  # other per-step .npy members to yield as stored, e.g. ("sim_state",)
    depth: tuple[str, ...] = ()  # cameras whose depth to yield: float32 [1, H, W] metres
    segmentation: tuple[str, ...] = ()  # cameras whose segmentation labels to yield: int64 [H, W]

    def __post_init__(self) -> None:
        if self.action_horizon < 1:
            raise ValueError(f"action_horizon must be >= 1, got {self.action_horizon}")
        for name, value, valid in (
            ("normalization", self.normalization, NORMALIZATIONS),
            ("image_dtype", self.image_dtype, IMAGE_DTYPES),
        ):
            if value not in valid:
                raise ValueError(f"{name} must be one of {list(valid)}, got {value!r}")
        if self.shuffle_buffer < 0:
            raise ValueError(f"shuffle_buffer must be >= 0, got {self.shuffle_buffer}")
        if self.epoch_length is not None and not self.resampled:
            raise ValueError("epoch_length needs resampled=True (a finite epoch is one pass over the shards)")
        if self.epoch_length is not None and self.epoch_length < 1:
            raise ValueError(f"epoch_length must be >= 1, got {self.epoch_length}")
        if isinstance(self.extra_keys, str):
            raise TypeError(f"extra_keys must be a list of names, got the string {self.extra_keys!r}")
        clashes = [k for k in self.extra_keys if k in _ITEM_KEYS or k in (ACTION_KEY, META_KEY)]
        if clashes:
            raise ValueError(f"extra_keys {clashes} clash with the loader's own keys; expected member names "
                             f"such as {SIM_STATE_KEY!r}")


# ---------------------------------------------------------------- records between stages


@dataclass(frozen=True)
class ShardTask:
    """One shard for one split to read: keep episodes whose position % parts == part.

    ordinal numbers the tasks of one stream, so two draws of the same shard differ.
    """

    url: str
    part: int = 0
    parts: int = 1
    ordinal: int = 0


@dataclass(frozen=True)
class Member:
    task: ShardTask
    name: str  # "<key>.<suffix>", e.g. "e00000042_t0007.agentview.jpg"
    data: bytes


@dataclass(frozen=True)
class RawSample:
    task: ShardTask
    key: str
    members: Mapping[str, bytes]  # suffix ("action.npy", "agentview.jpg", ...) -> bytes


@dataclass(frozen=True)
class RawEpisode:
    task: ShardTask
    ordinal: int  # position of the episode in its shard, from 0
    index: int  # global episode index
    instruction: str
    samples: tuple[RawSample, ...]  # steps 0..T-1


@dataclass(frozen=True)
class EpisodeArrays:
    """actions [T, A] and states [T, S] float32 (normalized); frames: camera -> T JPEGs;
    extras: key -> [T, ...] arrays as stored (unnormalized)."""

    index: int
    instruction: str
    actions: np.ndarray
    states: np.ndarray
    frames: Mapping[str, tuple[bytes, ...]]
    extras: Mapping[str, np.ndarray] = field(default_factory=dict)
    pngs: Mapping[str, tuple[bytes, ...]] = field(default_factory=dict)  # member suffix -> T depth/label PNGs


@dataclass(frozen=True)
class StepSample:
    """One training sample before decoding: action_chunk [H, A] float32, action_mask [H] bool."""

    episode: int
    step: int
    instruction: str
    state: np.ndarray
    action_chunk: np.ndarray
    action_mask: np.ndarray
    frames: Mapping[str, bytes]
    extras: Mapping[str, np.ndarray] = field(default_factory=dict)  # key -> this step's array
    pngs: Mapping[str, bytes] = field(default_factory=dict)  # member suffix -> this step's depth/label PNG


@dataclass(frozen=True)
class Split:
    """Which part of the data this process reads: worker `worker` of rank `rank`."""

    rank: int = 0
    world_size: int = 1
    worker: int = 0
    num_workers: int = 1

    @property
    def index(self) -> int:
        return self.rank * self.num_workers + self.worker

    @property
    def count(self) -> int:
        return self.world_size * self.num_workers


def current_split() -> Split:
    """This process's rank/world size (torch.distributed, else RANK/WORLD_SIZE) and DataLoader worker."""
    rank, world_size = 0, 1
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        rank, world_size = torch.distributed.get_rank(), torch.distributed.get_world_size()
    elif "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in 0..{world_size - 1} (RANK/WORLD_SIZE)")
    info = torch.utils.data.get_worker_info()
    worker, num_workers = (info.id, info.num_workers) if info is not None else (0, 1)
    return Split(rank, world_size, worker, num_workers)


# ---------------------------------------------------------------- stages


def split_shards(urls: Sequence[str], split: Split) -> Iterator[ShardTask]:
    """Shard URLs -> the tasks of `split`: whole shards, or one part of one shard (see the module doc)."""
    n, count, index = len(urls), split.count, split.index
    if n >= count:
        for ordinal, url in enumerate(urls[index::count]):
            yield ShardTask(url, ordinal=ordinal)
    elif n > 0:
        shard = index % n
        readers = (count - shard + n - 1) // n  # splits s < count with s % n == shard
        yield ShardTask(urls[shard], part=index // n, parts=readers)


def resample_shards(urls: Sequence[str], rng: np.random.Generator, empty: set[str]) -> Iterator[ShardTask]:
    """Shard URLs -> an endless stream of tasks drawn with replacement, skipping URLs in `empty`.

    `empty` is filled by `read_members` as shards turn out to hold nothing.
    """
    for ordinal in itertools.count():
        candidates = [url for url in urls if url not in empty]
        if not candidates:
            raise DatasetError(f"resampled loader: none of the {len(urls)} shards holds a sample")
        yield ShardTask(candidates[int(rng.integers(len(candidates)))], ordinal=ordinal)


def read_members(
    tasks: Iterable[ShardTask],
    wanted: Callable[[str], bool],
    on_empty: Callable[[str], Any] = lambda url: None,
    expected: Mapping[str, int] | None = None,
) -> Iterator[Member]:
    """Tasks -> their shards' members whose suffix `wanted` accepts, in tar order.

    URLs are opened with webdataset's `gopen` (paths, file:, pipe:, http(s):) and
    read by `shards.tario.iter_tar`, which raises `DatasetError` for a corrupt or
    truncated tar. `expected` maps a URL to its sample count in the manifest, a
    second check that also catches a valid tar holding the wrong samples.
    """
    for task in tasks:
        samples, last_key = 0, None
        with gopen(task.url) as stream:
            for name, data in iter_tar(stream, task.url):
                key, _, suffix = name.partition(".")
                if key != last_key:
                    samples, last_key = samples + 1, key
                if wanted(suffix):
                    yield Member(task, name, data)
        if samples == 0:
            on_empty(task.url)
        if expected is not None and task.url in expected and samples != expected[task.url]:
            raise DatasetError(f"{task.url}: holds {samples} samples, manifest.json lists "
                               f"{expected[task.url]}; the shard is truncated or corrupt (run shards.verify)")


def group_samples(members: Iterable[Member]) -> Iterator[RawSample]:
    """Members -> samples: adjacent members with the same key (up to the first dot) of the same task."""
    for (task, key), group in itertools.groupby(members, key=lambda m: (m.task, m.name.partition(".")[0])):
        parts: dict[str, bytes] = {}
        for member in group:
            suffix = member.name.partition(".")[2]
            if suffix in parts:
                raise DatasetError(f"{task.url}: member {member.name} appears twice")
            parts[suffix] = member.data
        yield RawSample(task, key, parts)


def group_episodes(samples: Iterable[RawSample]) -> Iterator[RawEpisode]:
    """Samples -> whole episodes; steps must run 0..length-1 in order, inside one shard."""
    steps: list[RawSample] = []
    first: dict[str, Any] = {}
    task, ordinal = None, 0
    for sample in samples:
        if sample.task is not task and sample.task != task:  # `is`: skips the dataclass __eq__
            if steps:
                raise _incomplete(steps[-1], first, len(steps))
            task, ordinal = sample.task, 0
        meta = _read_meta(sample)
        if not steps:
            first = meta
        if meta["step"] != len(steps) or meta["episode"] != first["episode"]:
            raise DatasetError(
                f"{sample.task.url}: sample {sample.key} follows step {len(steps) - 1} of episode "
                f"{first['episode']}; episodes must be whole and in order (run shards.verify)"
            )
        steps.append(sample)
        if len(steps) == first["length"]:
            yield RawEpisode(sample.task, ordinal, first["episode"], first["instruction"], tuple(steps))
            steps, ordinal = [], ordinal + 1
    if steps:
        raise _incomplete(steps[-1], first, len(steps))


def select_episodes(episodes: Iterable[RawEpisode]) -> Iterator[RawEpisode]:
    """Episodes -> those of the task's part (all of them when the task reads a whole shard)."""
    return (ep for ep in episodes if ep.ordinal % ep.task.parts == ep.task.part)


def decode_episodes(
    episodes: Iterable[RawEpisode], cameras: Sequence[str] | None, normalizer: Normalizer,
    extra_keys: Sequence[str] = (), pngs: Sequence[str] = (),
) -> Iterator[EpisodeArrays]:
    """Raw episodes -> arrays: normalized actions [T, A] and states [T, S] float32, JPEG frames per camera,
    and the `extra_keys` members stacked as stored."""
    for ep in episodes:
        names = cameras if cameras is not None else _jpeg_cameras(ep.samples[0])
        suffixes = [(camera, f"{camera}.jpg") for camera in names]
        actions = np.stack([_npy(s, _ACTION_MEMBER) for s in ep.samples])
        states = np.stack([_npy(s, _STATE_MEMBER) for s in ep.samples])
        yield EpisodeArrays(
            index=ep.index,
            instruction=ep.instruction,
            actions=normalizer.normalize(ACTION_KEY, actions),
            states=normalizer.normalize(STATE_KEY, states),
            frames={c: tuple(_member(s, suffix) for s in ep.samples) for c, suffix in suffixes},
            extras={key: np.stack([_npy(s, f"{key}.npy") for s in ep.samples]) for key in extra_keys},
            pngs={suffix: tuple(_member(s, suffix) for s in ep.samples) for suffix in pngs},
        )


def episode_steps(episodes: Iterable[EpisodeArrays], horizon: int) -> Iterator[StepSample]:
    """Episodes -> one sample a step: actions t..t+H-1, padded past the end with the last action."""
    for ep in episodes:
        length = len(ep.actions)
        padded = np.concatenate([ep.actions, np.repeat(ep.actions[-1:], horizon - 1, axis=0)])
        masks = np.arange(length)[:, None] + np.arange(horizon) < length  # [T, H]: t + k < T
        for t in range(length):
            yield StepSample(
                episode=ep.index,
                step=t,
                instruction=ep.instruction,
                state=ep.states[t],
                action_chunk=padded[t : t + horizon],
                action_mask=masks[t],
                frames={camera: frames[t] for camera, frames in ep.frames.items()},
                extras={key: values[t] for key, values in ep.extras.items()},
                pngs={suffix: frames[t] for suffix, frames in ep.pngs.items()},
            )


def shuffle(samples: Iterable[Any], bufsize: int, rng: np.random.Generator) -> Iterator[Any]:
    """Samples -> the same samples, each drawn at random from a buffer of `bufsize` (<= 1: unchanged)."""
    if bufsize <= 1:
        yield from samples
        return
    buffer: list[Any] = []
    for sample in samples:
        buffer.append(sample)
        if len(buffer) >= bufsize:
            i = int(rng.integers(len(buffer)))
            buffer[i], buffer[-1] = buffer[-1], buffer[i]
            yield buffer.pop()
    rng.shuffle(buffer)
    yield from buffer


def take(samples: Iterable[Any], n: int) -> Iterator[Any]:
    """Samples -> the first `n`."""
    return itertools.islice(samples, n)


def to_torch(samples: Iterable[StepSample], image_dtype: str) -> Iterator[dict[str, Any]]:
    """StepSamples -> dicts of tensors (see `ShardDataset`), JPEGs decoded to [3, H, W]."""
    for s in samples:
        item = {
            "images": {camera: _decode_jpeg(data, image_dtype) for camera, data in s.frames.items()},
            "state": torch.from_numpy(np.array(s.state, dtype=np.float32)),
            "action_chunk": torch.from_numpy(np.array(s.action_chunk, dtype=np.float32)),
            "action_mask": torch.from_numpy(np.array(s.action_mask, dtype=bool)),
            "instruction": s.instruction,
            "episode": s.episode,
            "step": s.step,
        }
        item.update((key, torch.from_numpy(np.array(value))) for key, value in s.extras.items())
        for suffix, data in s.pngs.items():
            camera, _, kind = suffix[: -len(".png")].rpartition("_")  # "agentview_depth.png"
            if kind == "depth":
                item.setdefault("depth", {})[camera] = torch.from_numpy(decode_depth_png(data)[None])
            else:
                item.setdefault("segmentation", {})[camera] = torch.from_numpy(
                    decode_segmentation_png(data).astype(np.int64))
        yield item


# ---------------------------------------------------------------- the dataset


class ShardDataset(torch.utils.data.IterableDataset):
    """The training stream of one dataset; works with `DataLoader(num_workers>=0)` and default collation.

    Each item is a dict:
        images:       camera -> uint8 [3, H, W] (or float32 in [0, 1], per `image_dtype`)
        state:        [S] float32, normalized
        action_chunk: [H, A] float32, normalized actions of steps t..t+H-1 of the episode,
                      past the episode's end the last action repeated
        action_mask:  [H] bool, False on the padding
        instruction:  str
        episode:      int, global episode index
        step:         int, t
        <key>:        for each of `extra_keys` (e.g. "sim_state": [N] float64), this step's array as stored
    Call `set_epoch(epoch)` before each epoch to change the shard order and
    shuffling (with persistent DataLoader workers the workers keep the epoch
    they started with).
    """

    def __init__(
        self,
        urls: Sequence[str],
        config: LoaderConfig,
        normalizer: Normalizer,
        shard_samples: Mapping[str, int] | None = None,
    ):
        """`shard_samples`: URL -> samples per the manifest, checked as each shard is read whole."""
        super().__init__()
        if not urls:
            raise ValueError("ShardDataset needs at least one shard URL")
        self.urls = tuple(urls)
        self.shard_samples = dict(shard_samples or {})
        self.config = config
        self.normalizer = normalizer
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self.iter_split(current_split())

    def iter_split(self, split: Split) -> Iterator[dict[str, Any]]:
        """The samples of one split (what `__iter__` yields in that rank and worker)."""
        cfg = self.config
        empty: set[str] = set()
        if cfg.resampled:
            tasks = resample_shards(self.urls, self._rng(split, 0), empty)
        else:
            tasks = split_shards(self._epoch_order(), split)
        pngs = [depth_member(c) for c in cfg.depth] + [segmentation_member(c) for c in cfg.segmentation]
        wanted = _wanted_members(cfg.cameras, (*cfg.extra_keys, *pngs))
        stages: list[Callable[[Iterable[Any]], Iterable[Any]]] = [
            partial(read_members, wanted=wanted, on_empty=empty.add, expected=self.shard_samples),  # -> Member
            group_samples,  # -> RawSample, one a step
            group_episodes,  # -> RawEpisode, whole
            select_episodes,  # -> RawEpisode of this split
            partial(decode_episodes, cameras=cfg.cameras, normalizer=self.normalizer,
                    extra_keys=cfg.extra_keys, pngs=pngs),  # -> EpisodeArrays
            partial(episode_steps, horizon=cfg.action_horizon),  # -> StepSample
            partial(shuffle, bufsize=cfg.shuffle_buffer, rng=self._rng(split, 1)),  # -> StepSample
        ]
        if cfg.resampled and cfg.epoch_length is not None:
            stages.append(partial(take, n=_worker_quota(cfg.epoch_length, split)))  # -> StepSample
        stages.append(partial(to_torch, image_dtype=cfg.image_dtype))  # -> dict of tensors
        stream: Iterable[Any] = tasks
        for stage in stages:
            stream = stage(stream)
        return iter(stream)

    def _epoch_order(self) -> list[str]:
        # The same permutation in every rank and worker, so that the split stays a partition.
        urls = list(self.urls)
        if self.config.shuffle_buffer > 1:
            np.random.default_rng([self.config.seed, self.epoch]).shuffle(urls)
        return urls

    def _rng(self, split: Split, stream: int) -> np.random.Generator:
        return np.random.default_rng([self.config.seed, self.epoch, split.rank, split.worker, stream])


def make_loader(
    source: str | os.PathLike | Sequence[str | os.PathLike],
    cameras: Sequence[str] | None = None,
    action_horizon: int = 16,
    normalization: str = "mean_std",
    shuffle_buffer: int = 0,
    seed: int = 0,
    resampled: bool = False,
    epoch_length: int | None = None,
    *,
    stats: str | os.PathLike | DatasetStats | None = None,
    image_dtype: str = "uint8",
    extra_keys: Sequence[str] = (),
    depth: Sequence[str] = (),
    segmentation: Sequence[str] = (),
) -> ShardDataset:
    """A `ShardDataset` over `source`; wrap it in `torch.utils.data.DataLoader`.

    source:         a dataset directory (its manifest.json lists the shards), a shard path or
                    URL, a brace pattern (``DIR/shards/shard-{000000..000003}.tar``), or a list of those
    cameras:        cameras to decode, in order; None: those of dataset_info.json (else every .jpg)
    action_horizon: H, the length of `action_chunk`
    normalization:  "none", "mean_std" or "quantile" (see `Normalizer`), for state and actions
    shuffle_buffer: samples held for shuffling (> 1 also shuffles the shard order each epoch)
    seed:           seeds shard order, shuffling and resampling, with epoch, rank and worker
    resampled:      draw shards with replacement, endlessly
    epoch_length:   resampled only: samples one rank yields per iteration (None: endless)
    stats:          dataset directory or stats.json path; None: the source's dataset directory
    image_dtype:    "uint8" (0..255) or "float32" (0..1) images, [3, H, W]
    extra_keys:     other per-step .npy members to yield unnormalized under their own key,
                    e.g. ["sim_state"] (the flattened MuJoCo state, for object poses)
    depth:          cameras whose depth to yield, item["depth"][camera]: float32 [1, H, W] metres
                    (0 = no reading); dataset_info.json must list depth for them
    segmentation:   cameras whose labels to yield, item["segmentation"][camera]: int64 [H, W]
                    (labels as stored, see shards.format)
    """
    urls, root, counts = resolve_shards(source)
    info = load_dataset_info(root) if root is not None else None
    config = LoaderConfig(
        cameras=_resolve_cameras(cameras, info),
        action_horizon=action_horizon,
        normalization=normalization,
        shuffle_buffer=shuffle_buffer,
        seed=seed,
        resampled=resampled,
        epoch_length=epoch_length,
        image_dtype=image_dtype,
        extra_keys=tuple(extra_keys) if not isinstance(extra_keys, str) else extra_keys,
        depth=_resolve_kind(depth, info, "depth"),
        segmentation=_resolve_kind(segmentation, info, "segmentation"),
    )
    loaded = None if normalization == "none" else _load_stats(stats, root)
    return ShardDataset(urls, config, Normalizer(normalization, loaded), shard_samples=counts)


def resolve_shards(
    source: str | os.PathLike | Sequence[str | os.PathLike],
) -> tuple[list[str], Path | None, dict[str, int]]:
    """Shard URLs of `source`, its dataset directory (None when the shards are not under one),
    and, for a dataset directory, each URL's sample count from the manifest.

    A dataset directory gives its manifest's shards that hold samples, in name order.
    """
    if isinstance(source, (str, os.PathLike)):
        if not _has_scheme(os.fspath(source)) and Path(source).is_dir():
            counts = _manifest_counts(Path(source))
            return list(counts), Path(source), counts
        sources = [source]
    else:
        sources = list(source)
    urls = [url for item in sources for url in braceexpand(os.fspath(item))]
    if not urls:
        raise ValueError(f"no shards in {source!r}")
    return urls, _dataset_root(urls), {}


# ---------------------------------------------------------------- helpers


def _manifest_counts(dataset_dir: Path) -> dict[str, int]:
    manifest = load_manifest(dataset_dir)
    counts = {str(shards_dir(dataset_dir) / info.name): info.samples
              for info in manifest.shards if info.samples > 0}
    if not counts:
        raise DatasetError(f"{dataset_dir}: manifest.json lists no shard with samples")
    return counts


def _has_scheme(url: str) -> bool:
    return len(urlparse(url).scheme) > 1  # a one-letter scheme is a Windows drive


def _dataset_root(urls: Sequence[str]) -> Path | None:
    # Local shards inside one DIR/shards folder belong to dataset DIR.
    if any(_has_scheme(url) for url in urls):
        return None
    folders = {Path(url).resolve().parent for url in urls}
    if len(folders) != 1 or next(iter(folders)).name != SHARDS_DIRNAME:
        return None
    return next(iter(folders)).parent


def _resolve_cameras(cameras: Sequence[str] | None, info: Mapping[str, Any] | None) -> tuple[str, ...] | None:
    known = [c["name"] for c in info.get("cameras", [])] if info is not None else None
    if cameras is None:
        return tuple(known) if known is not None else None
    if isinstance(cameras, str):
        raise TypeError(f"cameras must be a list of names, got the string {cameras!r}")
    unknown = [c for c in cameras if known is not None and c not in known]
    if unknown:
        raise ValueError(f"unknown cameras {unknown}; dataset_info.json lists {known}")
    return tuple(cameras)


def _resolve_kind(cameras: Sequence[str], info: Mapping[str, Any] | None, kind: str) -> tuple[str, ...]:
    """Cameras asked for depth or segmentation, checked against dataset_info.json when there is one."""
    if isinstance(cameras, str):
        raise TypeError(f"{kind} must be a list of camera names, got the string {cameras!r}")
    if info is not None:
        having = [c["name"] for c in info.get("cameras", []) if c.get(kind)]
        missing = [c for c in cameras if c not in having]
        if missing:
            raise ValueError(f"{kind} asked for cameras {missing}; dataset_info.json lists {kind} for {having}")
    return tuple(cameras)


def _load_stats(stats: str | os.PathLike | DatasetStats | None, root: Path | None) -> DatasetStats:
    if isinstance(stats, DatasetStats):
        return stats
    if stats is None and root is None:
        raise ValueError("normalization needs stats.json and the shards are not inside a dataset "
                         "directory; pass stats=DATASET_DIR or normalization='none'")
    folder = Path(stats) if stats is not None else root
    if folder.name == STATS_FILENAME:
        folder = folder.parent
    loaded = load_stats(folder)
    if loaded is None:
        raise FileNotFoundError(f"{folder / STATS_FILENAME}: not found; normalization needs it "
                                "(or pass normalization='none')")
    return loaded


def _wanted_members(cameras: Sequence[str] | None, extra_keys: Sequence[str] = ()) -> Callable[[str], bool]:
    # extra_keys: .npy keys, or whole member suffixes (depth/label PNGs: "agentview_depth.png")
    fixed = {_ACTION_MEMBER, _STATE_MEMBER, _META_MEMBER}
    fixed |= {key if key.endswith(".png") else f"{key}.npy" for key in extra_keys}
    if cameras is None:
        return lambda suffix: suffix in fixed or suffix.endswith(".jpg")
    fixed |= {f"{camera}.jpg" for camera in cameras}
    return fixed.__contains__


def _worker_quota(epoch_length: int, split: Split) -> int:
    share, rest = divmod(epoch_length, split.num_workers)
    return share + (1 if split.worker < rest else 0)


def _member(sample: RawSample, suffix: str) -> bytes:
    try:
        return sample.members[suffix]
    except KeyError:
        raise DatasetError(
            f"{sample.task.url}: sample {sample.key} has no {suffix}; it has {sorted(sample.members)}"
        ) from None


def _npy(sample: RawSample, suffix: str) -> np.ndarray:
    data = _member(sample, suffix)
    try:
        return load_npy(data)
    except ValueError as exc:
        raise DatasetError(f"{sample.task.url}: {sample.key}.{suffix}: {exc}") from None


_NPY_MAGIC = b"\x93NUMPY"


def load_npy(data: bytes) -> np.ndarray:
    """The bytes of a .npy file -> a read-only array viewing them; like `np.load(allow_pickle=False)`.

    Each distinct header is parsed once (numpy parses it with `ast.literal_eval`,
    which costs more than the rest of reading a small array). Object arrays
    (pickles) and malformed data raise ValueError.
    """
    if data[:6] != _NPY_MAGIC or len(data) < 10:
        raise ValueError("not a .npy file (no \\x93NUMPY magic)")
    if data[6] == 1:
        end = 10 + int.from_bytes(data[8:10], "little")
    elif data[6] == 2:
        end = 12 + int.from_bytes(data[8:12], "little")
    else:  # 3.0 (utf-8 field names) and later: rare, uncached
        return np.load(io.BytesIO(data), allow_pickle=False)
    dtype, shape, order, count = _npy_header(data[:end])
    if len(data) != end + count * dtype.itemsize:
        raise ValueError(f"holds {len(data) - end} bytes after its header, {dtype} {shape} needs "
                         f"{count * dtype.itemsize}")
    return np.frombuffer(data, dtype, count=count, offset=end).reshape(shape, order=order)


@lru_cache(maxsize=256)
def _npy_header(header: bytes) -> tuple[np.dtype, tuple[int, ...], str, int]:
    # header: the magic, version, length and dict of a .npy file -> (dtype, shape, "C" or "F", count).
    fp = io.BytesIO(header)
    version = np.lib.format.read_magic(fp)
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, fortran_order, dtype = read(fp)
    if dtype.hasobject:
        raise ValueError(f"holds an object array ({dtype}); pickled objects are refused")
    return dtype, shape, "F" if fortran_order else "C", math.prod(shape)


def _read_meta(sample: RawSample) -> dict[str, Any]:
    meta = json.loads(_member(sample, _META_MEMBER))
    if not meta.keys() >= _META_FIELDS:
        missing = sorted(_META_FIELDS - meta.keys())
        raise DatasetError(f"{sample.task.url}: {sample.key}.meta.json lacks {missing}")
    return meta


def _incomplete(last: RawSample, first: Mapping[str, Any], steps: int) -> DatasetError:
    return DatasetError(
        f"{last.task.url}: episode {first['episode']} ends after {steps} of {first['length']} steps "
        "at the end of the shard; episodes must be whole inside one shard (run shards.verify)"
    )


def _jpeg_cameras(sample: RawSample) -> list[str]:
    return sorted(suffix[: -len(".jpg")] for suffix in sample.members if suffix.endswith(".jpg"))


def _decode_jpeg(data: bytes, image_dtype: str) -> torch.Tensor:
    with Image.open(io.BytesIO(data)) as image:
        pixels = np.asarray(image if image.mode == "RGB" else image.convert("RGB"))  # [H, W, 3] uint8
    # numpy for the transposing copy: torch's parallel copy of a small image costs milliseconds
    # of thread hand-offs in the main process.
    tensor = torch.from_numpy(np.array(pixels.transpose(2, 0, 1), order="C"))  # a writable copy
    return tensor.float().div_(255.0) if image_dtype == "float32" else tensor

