"""Streaming loader for training: shards -> one sample a time step, with its action chunk.

    source: a dataset directory | shard paths or URLs | a brace pattern      resolve_shards
      -> ShardTask(url, part, parts): this rank/worker's shards             split_shards
                                                                            | resample_shards
      -> Member(task, name, data): the wanted tar members, in tar order,
         read by the strict reader (demofactory.shards.tario); an episode-layout
         shard's samples expanded to steps (demofactory.shards.shard_layout)            read_members
      -> RawSample(task, key, members): one time step                       group_samples
      -> RawEpisode(task, ordinal, samples): one whole episode, checked     group_episodes
      -> RawEpisode: only this split's part of each shard                   select_episodes
      -> EpisodeArrays: actions [T, A], states [T, S] normalized, JPEGs     decode_episodes
         (+ extra keys, e.g. sim_state [T, N], as stored); with sensor_noise,
         raw states noised and observations dropped/delayed before
         normalization
         demofactory.shards.sensor_noise.perturb_episode
      -> StepSample: action_chunk [H, A], action_mask [H], one per step     episode_steps
      -> StepSample, shuffled in a buffer                                   shuffle
      -> StepSample, this worker's share of epoch_length (resampled only)   take
      -> dict of tensors, ready for DataLoader's default collation          to_torch

Each stage is a function from an iterator to an iterator (the webdataset
style); they and the records between them live in `shards/stages.py` (ShardTask,
Member and RawSample in `shards/tario.py`). Action chunks need the rest of the
episode; episodes are whole and in order inside a shard, so one episode a shard
is held in memory at a time (as JPEG bytes; frames are decoded only in the last
stage).

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

Why one module: the configuration, the dataset and the resolution of its sources
(manifest, stats, dataset_info: cameras, depth, embodiments) are one public entry,
`make_loader`; the stages themselves are in `shards/stages.py`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
import torch
from braceexpand import braceexpand
from demofactory.shards.embodiment_stats import load_embodiment_stats
from demofactory.shards.format import (
    ACTION_KEY,
    MANIFEST_FILENAME,
    META_KEY,
    SHARDS_DIRNAME,
    SIM_STATE_KEY,
    STATS_FILENAME,
    DatasetError,
    depth_member,
    segmentation_member,
    shards_dir,
)
from demofactory.shards.manifest import check_shard, load_manifest
from demofactory.shards.metadata import load_dataset_info
from demofactory.shards.normalize import NORMALIZATIONS, STD_FLOOR, Normalizer  # noqa: F401 (STD_FLOOR: re-exported)
from demofactory.shards.sensor_noise import SensorNoise, perturb_episode, resolve_sensor_noise
from demofactory.shards.stages import (  # noqa: F401 (some re-exported: the records and stages callers know from here)
    _ACTION_MEMBER,
    _META_MEMBER,
    _STATE_MEMBER,
    EpisodeArrays,
    Member,
    RawEpisode,
    RawSample,
    ShardTask,
    Split,
    StepSample,
    _decode_jpeg,
    current_split,
    decode_episodes,
    episode_steps,
    group_episodes,
    group_samples,
    keep_embodiment,
    load_npy,
    read_members,
    resample_shards,
    select_episodes,
    shuffle,
    split_shards,
    take,
    to_torch,
)
from demofactory.shards.stats import DatasetStats, load_stats
from demofactory.shards.writer import ShardInfo

IMAGE_DTYPES = ("uint8", "float32")
_ITEM_KEYS = frozenset(
    {
        "images",
        "state",
        "action_chunk",
        "action_mask",
        "instruction",
        "episode",
        "step",
        "embodiment_id",
        "depth",
        "segmentation",
    }
)


# ---------------------------------------------------------------- configuration


@dataclass(frozen=True)
class LoaderConfig:
    """How `ShardDataset` turns shards into training samples; checked on construction.

    The one description of the loader's settings: `make_loader` takes them as its parameters
    (with these defaults) and its docstring is completed from this one.

    cameras:        cameras to decode, in order; None: every .jpg member (`make_loader`: those
                    of dataset_info.json, else every .jpg)
    action_horizon: H, the length of `action_chunk` (actions t..t+H-1 per sample), >= 1
    normalization:  one of NORMALIZATIONS: "none", "mean_std" or "quantile" (see `Normalizer`),
                    for state and actions
    shuffle_buffer: samples held for shuffling; 0 or 1: stream order, shards in order (> 1 also
                    shuffles the shard order each epoch)
    seed:           seeds shard order, shuffling and resampling, with epoch, rank and worker
    resampled:      draw shards with replacement, endlessly (or `epoch_length`)
    epoch_length:   resampled only: samples one rank yields per iteration (None: endless)
    image_dtype:    "uint8" (0..255) or "float32" (0..1) images, [3, H, W]
    extra_keys:     other per-step .npy members to yield unnormalized under their own key,
                    e.g. ["sim_state"] (the flattened MuJoCo state, for object poses)
    depth:          cameras whose depth to yield, item["depth"][camera]: float32 [1, H, W] metres
                    (0 = no reading); dataset_info.json must list depth for them
    segmentation:   cameras whose labels to yield, item["segmentation"][camera]: int64 [H, W]
                    (labels as stored, see demofactory.shards.format)
    sensor_noise:   a `SensorNoise` (`make_loader`: or its JSON dict): state noise and
                    per-episode bias in raw units (added before normalization), camera frame
                    drops, observation latency; seeded per (seed, epoch, episode), see
                    `demofactory.shards.sensor_noise`; None: off
    embodiment:     a mixed-robot dataset: only this robot's episodes (e.g. "Sawyer"); None: all.
                    Every item carries "embodiment_id" (int: the robot's position in
                    dataset_info.json's embodiments; 0 in a single-robot dataset), and when
                    stats.json has per-robot statistics (`embodiments`), each episode is
                    normalized with its own robot's
    """

    cameras: tuple[str, ...] | None
    action_horizon: int = 16
    normalization: str = "mean_std"
    shuffle_buffer: int = 0
    seed: int = 0
    resampled: bool = False
    epoch_length: int | None = None
    image_dtype: str = "uint8"
    extra_keys: tuple[str, ...] = ()
    depth: tuple[str, ...] = ()
    segmentation: tuple[str, ...] = ()
    sensor_noise: SensorNoise | None = None
    embodiment: str | None = None

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
            raise ValueError(
                "epoch_length needs resampled=True (a finite epoch is one pass over the shards)"
            )
        if self.epoch_length is not None and self.epoch_length < 1:
            raise ValueError(f"epoch_length must be >= 1, got {self.epoch_length}")
        if isinstance(self.extra_keys, str):
            raise TypeError(
                f"extra_keys must be a list of names, got the string {self.extra_keys!r}"
            )
        clashes = [k for k in self.extra_keys if k in _ITEM_KEYS or k in (ACTION_KEY, META_KEY)]
        if clashes:
            raise ValueError(
                f"extra_keys {clashes} clash with the loader's own keys; expected member names "
                f"such as {SIM_STATE_KEY!r}"
            )
        if self.sensor_noise is not None and not isinstance(self.sensor_noise, SensorNoise):
            raise TypeError(
                "sensor_noise must be a SensorNoise or None, got "
                f"{type(self.sensor_noise).__name__}"
            )

    def to_json(self) -> dict[str, Any]:
        """Every setting, JSON-ready: what a training report records about its data."""
        return {
            f.name: value.to_json() if isinstance(value, SensorNoise) else value
            for f in fields(self)
            for value in [getattr(self, f.name)]
        }


# ---------------------------------------------------------------- the dataset


class ShardDataset(torch.utils.data.IterableDataset):
    """The training stream of one dataset; for `DataLoader(num_workers>=0)`, default collation.

    Each item is a dict:
        images:       camera -> uint8 [3, H, W] (or float32 in [0, 1], per `image_dtype`)
        state:        [S] float32, normalized
        action_chunk: [H, A] float32, normalized actions of steps t..t+H-1 of the episode,
                      past the episode's end the last action repeated
        action_mask:  [H] bool, False on the padding
        instruction:  str
        episode:      int, global episode index
        step:         int, t
        embodiment_id: int, the episode's robot (its position in dataset_info.json's
                      embodiments; 0 when the dataset records none)
        <key>:        for each of `extra_keys` (e.g. "sim_state": [N] float64), this step's
                      array as stored
    Call `set_epoch(epoch)` before each epoch to change the shard order, the
    shuffling and the sensor noise (with persistent DataLoader workers the workers
    keep the epoch they started with). `config.to_json()` reports every setting.
    """

    def __init__(
        self,
        urls: Sequence[str],
        config: LoaderConfig,
        normalizer: Normalizer,
        shard_samples: Mapping[str, int] | None = None,
        shard_infos: Mapping[str, ShardInfo] | None = None,
        embodiment_ids: Mapping[str, int] | None = None,
    ):
        """`shard_samples`: URL -> samples per the manifest, checked as each shard is read whole.
        `shard_infos`: URL -> its manifest entry; each such shard's size and sha256 are checked
        before its first sample is read (once per process), so a damaged one stops the loader
        with a `DatasetError` naming it instead of reaching training. A store URL's shard is
        read from the object cache, where it is checked as it lands
        (demofactory.shards.remote.cached_shard):
        hashing it as it streams would find the damage only after its samples were yielded."""
        super().__init__()
        if not urls:
            raise ValueError("ShardDataset needs at least one shard URL")
        self.urls = tuple(urls)
        self.shard_samples = dict(shard_samples or {})
        self.shard_infos = dict(shard_infos or {})
        self._checked: dict[str, str] = {}  # URL -> what to open: itself, or its cached copy
        self.config = config
        self.normalizer = normalizer
        self.embodiment_ids = dict(embodiment_ids or {})  # robot -> its id in every item
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
        pngs = [depth_member(c) for c in cfg.depth] + [
            segmentation_member(c) for c in cfg.segmentation
        ]
        wanted = _wanted_members(cfg.cameras, (*cfg.extra_keys, *pngs))
        stages: list[Callable[[Iterable[Any]], Iterable[Any]]] = [
            partial(
                read_members,
                wanted=wanted,
                on_empty=empty.add,
                expected=self.shard_samples,
                check=self._check_shard,
            ),  # -> Member
            group_samples,  # -> RawSample, one a step
            group_episodes,  # -> RawEpisode, whole
            select_episodes,  # -> RawEpisode of this split
        ]
        if cfg.embodiment is not None:
            stages.append(partial(keep_embodiment, embodiment=cfg.embodiment))  # -> one robot's
        stages += [
            partial(
                decode_episodes,
                cameras=cfg.cameras,
                normalizer=self.normalizer,
                extra_keys=cfg.extra_keys,
                pngs=pngs,
                perturb=self._perturb(),
                embodiment_ids=self.embodiment_ids,
            ),  # -> EpisodeArrays
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

    def _perturb(self) -> Callable[[EpisodeArrays], EpisodeArrays] | None:
        noise = self.config.sensor_noise
        if noise is None or not noise.active:  # off: the stage is skipped, samples unchanged
            return None
        return partial(perturb_episode, noise=noise, epoch=self.epoch)

    def _check_shard(self, url: str) -> str:
        info = self.shard_infos.get(url)
        if info is None:
            return url
        if url not in self._checked:
            self._checked[url] = _checked_copy(url, info)
        return self._checked[url]

    def _epoch_order(self) -> list[str]:
        # The same permutation in every rank and worker, so that the split stays a partition.
        urls = list(self.urls)
        if self.config.shuffle_buffer > 1:
            np.random.default_rng([self.config.seed, self.epoch]).shuffle(urls)
        return urls

    def _rng(self, split: Split, stream: int) -> np.random.Generator:
        return np.random.default_rng(
            [self.config.seed, self.epoch, split.rank, split.worker, stream]
        )


def make_loader(
    source: str | os.PathLike | Sequence[str | os.PathLike],
    cameras: Sequence[str] | None = None,
    action_horizon: int = LoaderConfig.action_horizon,
    normalization: str = LoaderConfig.normalization,
    shuffle_buffer: int = LoaderConfig.shuffle_buffer,
    seed: int = LoaderConfig.seed,
    resampled: bool = LoaderConfig.resampled,
    epoch_length: int | None = LoaderConfig.epoch_length,
    *,
    stats: str | os.PathLike | DatasetStats | None = None,
    image_dtype: str = LoaderConfig.image_dtype,
    extra_keys: Sequence[str] = LoaderConfig.extra_keys,
    depth: Sequence[str] = LoaderConfig.depth,
    segmentation: Sequence[str] = LoaderConfig.segmentation,
    sensor_noise: SensorNoise | Mapping[str, Any] | None = LoaderConfig.sensor_noise,
    embodiment: str | None = LoaderConfig.embodiment,
) -> ShardDataset:
    """A `ShardDataset` over `source`; wrap it in `torch.utils.data.DataLoader`.

    source:         a dataset directory (its manifest.json lists the shards) or the URL of one
                    in object storage (s3://bucket/prefix: shards streamed), a shard path or
                    URL, a brace pattern (``DIR/shards/shard-{000000..000003}.tar``), or a
                    list of those
    stats:          dataset directory or stats.json path; None: the source's dataset directory

    Every other parameter is a field of `LoaderConfig`, checked there:
    """
    with resolve_shards(source) as (urls, root, counts, infos):
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
            sensor_noise=resolve_sensor_noise(sensor_noise, info),
            embodiment=_resolve_embodiment(embodiment, info),
        )
        loaded = None if normalization == "none" else _load_stats(stats, root)
        per_robot = {}
        if loaded is not None:
            per_robot = {
                robot: DatasetStats(keys=keys, extra={})
                for robot, keys in load_embodiment_stats(loaded.extra).items()
            }
        return ShardDataset(
            urls,
            config,
            Normalizer(normalization, loaded, per_robot),
            shard_samples=counts,
            shard_infos=infos,
            embodiment_ids={
                r: int(e["id"]) for r, e in ((info or {}).get("embodiments") or {}).items()
            },
        )


def _settings_doc() -> str:
    """LoaderConfig's description of its fields (for make_loader's docstring)."""
    doc = LoaderConfig.__doc__ or ""
    return doc[doc.index("    cameras:") :] if "    cameras:" in doc else ""


if make_loader.__doc__ is not None:  # None under python -OO
    make_loader.__doc__ += "\n" + _settings_doc()


def _resolve_embodiment(embodiment: str | None, info: Mapping[str, Any] | None) -> str | None:
    """`embodiment`, checked against dataset_info.json's embodiments when there is one."""
    if embodiment is None:
        return None
    known = sorted((info or {}).get("embodiments") or {})
    if info is not None and embodiment not in known:
        raise ValueError(
            f"embodiment {embodiment!r} is not in this dataset; its embodiments: "
            f"{', '.join(known) or 'none recorded'}"
        )
    return embodiment


@contextmanager
def resolve_shards(
    source: str | os.PathLike | Sequence[str | os.PathLike],
) -> Iterator[tuple[list[str], Path | None, dict[str, int], dict[str, ShardInfo]]]:
    """Shard URLs of `source`, the folder holding its dataset's small files (None when the
    shards are not under one; for a dataset, a private snapshot of them,
    demofactory.shards.snapshot, gone
    when the context ends), and, for a dataset, each URL's sample count and manifest entry.

    A dataset (a directory, or a store's URL) gives its manifest's shards that hold samples, in
    name order; one a `factory run` is writing raises `DatasetBusy` (one line).
    """
    if isinstance(source, (str, os.PathLike)):
        text = os.fspath(source)
        if (not _has_scheme(text) and Path(source).is_dir()) or _is_dataset_url(text):
            from demofactory.shards.snapshot import reading

            with reading(text, shards=False) as snapshot:
                yield _dataset_shards(text, snapshot)
            return
        sources = [source]
    else:
        sources = list(source)
    urls = [url for item in sources for url in braceexpand(os.fspath(item))]
    if not urls:
        raise ValueError(f"no shards in {source!r}")
    yield urls, _dataset_root(urls), {}, {}


# ---------------------------------------------------------------- helpers


def _dataset_shards(
    location: str, snapshot: Path
) -> tuple[list[str], Path, dict[str, int], dict[str, ShardInfo]]:
    """A dataset's shards with samples, named where they are (DIR/shards/NAME, or the store's
    URL of each), as its snapshot's manifest lists them."""
    manifest = load_manifest(snapshot)
    base = location.rstrip("/") if _has_scheme(location) else str(shards_dir(Path(location)))
    if _has_scheme(location):
        base = f"{base}/{SHARDS_DIRNAME}"
    infos = {f"{base}/{info.name}": info for info in manifest.shards if info.samples > 0}
    if not infos:
        raise DatasetError(f"{location}: manifest.json lists no shard with samples")
    counts = {url: info.samples for url, info in infos.items()}
    return list(infos), snapshot, counts, infos


def _checked_copy(url: str, info: ShardInfo) -> str:
    """What to open for the shard at `url`, checked against its manifest entry (`info`): the
    path itself (size and sha256 checked), or a store's shard's verified copy in the cache."""
    if not _has_scheme(url):
        check_shard(Path(url).parent.parent, info)
        return url
    from demofactory.shards.remote import cached_shard
    from demofactory.shards.store import Store

    root = url.rsplit("/", 2)[0]
    cached = cached_shard(Store(root, check=False), info)
    if cached is None:
        raise DatasetError(
            f"{url}: not the bytes {MANIFEST_FILENAME} lists (size or sha256 differ): the shard "
            "changed after it was written (run factory verify; factory run redoes it)"
        )
    return str(cached)


def _is_dataset_url(url: str) -> bool:
    # A URL that names a folder (no brace pattern, not a .tar) is a stored dataset's root.
    return _has_scheme(url) and not url.endswith(".tar") and "{" not in url


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


def _resolve_cameras(
    cameras: Sequence[str] | None, info: Mapping[str, Any] | None
) -> tuple[str, ...] | None:
    known = [c["name"] for c in info.get("cameras", [])] if info is not None else None
    if cameras is None:
        return tuple(known) if known is not None else None
    if isinstance(cameras, str):
        raise TypeError(f"cameras must be a list of names, got the string {cameras!r}")
    unknown = [c for c in cameras if known is not None and c not in known]
    if unknown:
        raise ValueError(f"unknown cameras {unknown}; dataset_info.json lists {known}")
    return tuple(cameras)


def _resolve_kind(
    cameras: Sequence[str], info: Mapping[str, Any] | None, kind: str
) -> tuple[str, ...]:
    """Cameras asked for depth or segmentation, checked against dataset_info.json if present."""
    if isinstance(cameras, str):
        raise TypeError(f"{kind} must be a list of camera names, got the string {cameras!r}")
    if info is not None:
        having = [c["name"] for c in info.get("cameras", []) if c.get(kind)]
        missing = [c for c in cameras if c not in having]
        if missing:
            raise ValueError(
                f"{kind} asked for cameras {missing}; dataset_info.json lists {kind} for {having}"
            )
    return tuple(cameras)


def _load_stats(stats: str | os.PathLike | DatasetStats | None, root: Path | None) -> DatasetStats:
    if isinstance(stats, DatasetStats):
        return stats
    if stats is None and root is None:
        raise ValueError(
            "normalization needs stats.json and the shards are not inside a dataset "
            "directory; pass stats=DATASET_DIR or normalization='none'"
        )
    folder = Path(stats) if stats is not None else root
    if folder.name == STATS_FILENAME:
        folder = folder.parent
    loaded = load_stats(folder)
    if loaded is None:
        raise FileNotFoundError(
            f"{folder / STATS_FILENAME}: not found; normalization needs it "
            "(or pass normalization='none')"
        )
    return loaded


def _wanted_members(
    cameras: Sequence[str] | None, extra_keys: Sequence[str] = ()
) -> Callable[[str], bool]:
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
