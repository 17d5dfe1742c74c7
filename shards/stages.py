"""The loader's stages: records flowing between them, and one function per stage.

Each stage is a function from an iterator to an iterator (the webdataset style);
`demofactory.shards.loader.ShardDataset` composes them (its module docstring draws the whole
chain and explains splitting). Action chunks need the rest of the episode;
episodes are whole and in order inside a shard, so one episode a shard is held in
memory at a time (as JPEG bytes; frames are decoded only in the last stage).
"""

from __future__ import annotations

import io
import itertools
import json
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

import cv2
import numpy as np
import torch
from demofactory.shards.format import (
    ACTION_KEY,
    META_KEY,
    STATE_KEY,
    DatasetError,
    decode_depth_png,
    decode_segmentation_png,
)
from demofactory.shards.normalize import NORMALIZATIONS, STD_FLOOR, Normalizer  # noqa: F401 (STD_FLOOR: re-exported)
from demofactory.shards.store import open_url
from demofactory.shards.tario import (  # noqa: F401 (group_samples: re-exported, a stage)
    Member,
    RawSample,
    ShardTask,
    group_samples,
    iter_steps,
    iter_tar,
)
from PIL import Image

_ACTION_MEMBER = f"{ACTION_KEY}.npy"
_STATE_MEMBER = f"{STATE_KEY}.npy"
_META_MEMBER = f"{META_KEY}.json"
_META_FIELDS = frozenset({"episode", "step", "length", "instruction"})


# ---------------------------------------------------------------- records between stages
# ShardTask -> Member -> RawSample are defined by `demofactory.shards.tario`, the one strict tar
# reader,
# which verify, stats and preview share without importing torch.


@dataclass(frozen=True)
class RawEpisode:
    task: ShardTask
    ordinal: int  # position of the episode in its shard, from 0
    index: int  # global episode index
    instruction: str
    samples: tuple[RawSample, ...]  # steps 0..T-1
    embodiment: str = ""  # the robot its meta names ("" in datasets older than embodiments)


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
    # member suffix -> T depth/label PNGs
    pngs: Mapping[str, tuple[bytes, ...]] = field(default_factory=dict)
    embodiment_id: int = 0  # the robot's position in dataset_info.json's embodiments


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
    # member suffix -> this step's depth/label PNG
    pngs: Mapping[str, bytes] = field(default_factory=dict)
    embodiment_id: int = 0


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
    """This process's rank/world size (torch.distributed, else RANK/WORLD_SIZE) and worker."""
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
    """Shard URLs -> the tasks of `split`: whole shards, or one part of a shard (see the loader)."""
    n, count, index = len(urls), split.count, split.index
    if n >= count:
        for ordinal, url in enumerate(urls[index::count]):
            yield ShardTask(url, ordinal=ordinal)
    elif n > 0:
        shard = index % n
        readers = (count - shard + n - 1) // n  # splits s < count with s % n == shard
        yield ShardTask(urls[shard], part=index // n, parts=readers)


def resample_shards(
    urls: Sequence[str], rng: np.random.Generator, empty: set[str]
) -> Iterator[ShardTask]:
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
    check: Callable[[str], str | None] = lambda url: None,
) -> Iterator[Member]:
    """Tasks -> their shards' members whose suffix `wanted` accepts, in tar order.

    URLs are opened by `demofactory.shards.store.open_url` (paths, file:, pipe:, http(s): with
    webdataset's
    `gopen`; s3:, gs:, az: streamed through fsspec) and read by
    `demofactory.shards.tario.iter_steps`
    (either shard layout, as steps), which raises `TarFormatError` (a `DatasetError`) for a
    corrupt or truncated tar. `expected` maps a URL to its sample count in the manifest, a
    second check that also catches a valid tar holding the wrong samples. `check(url)` runs
    before a shard is opened (the loader's: size and sha256 against the manifest) and may name
    what to open instead (a store's shard: its checked copy in the cache); messages name the URL.
    """
    for task in tasks:
        opened = check(task.url) or task.url
        samples, last_key = 0, None
        with open_url(opened) as stream:
            for name, data in iter_steps(stream, task.url):
                key, _, suffix = name.partition(".")
                if key != last_key:
                    samples, last_key = samples + 1, key
                if wanted(suffix):
                    yield Member(task, name, data)
        if samples == 0:
            on_empty(task.url)
        if expected is not None and task.url in expected and samples != expected[task.url]:
            raise DatasetError(
                f"{task.url}: holds {samples} samples, manifest.json lists "
                f"{expected[task.url]}; the shard is truncated or corrupt (run "
                f"demofactory.shards.verify)"
            )


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
                f"{first['episode']}; episodes must be whole and in order (run "
                f"demofactory.shards.verify)"
            )
        steps.append(sample)
        if len(steps) == first["length"]:
            yield RawEpisode(
                sample.task,
                ordinal,
                first["episode"],
                first["instruction"],
                tuple(steps),
                first.get("embodiment", ""),
            )
            steps, ordinal = [], ordinal + 1
    if steps:
        raise _incomplete(steps[-1], first, len(steps))


def select_episodes(episodes: Iterable[RawEpisode]) -> Iterator[RawEpisode]:
    """Episodes -> those of the task's part (all of them when the task reads a whole shard)."""
    return (ep for ep in episodes if ep.ordinal % ep.task.parts == ep.task.part)


def keep_embodiment(episodes: Iterable[RawEpisode], embodiment: str) -> Iterator[RawEpisode]:
    """Episodes -> those of one embodiment (robot)."""
    return (ep for ep in episodes if ep.embodiment == embodiment)


def decode_episodes(
    episodes: Iterable[RawEpisode],
    cameras: Sequence[str] | None,
    normalizer: Normalizer,
    extra_keys: Sequence[str] = (),
    pngs: Sequence[str] = (),
    perturb: Callable[[EpisodeArrays], EpisodeArrays] | None = None,
    embodiment_ids: Mapping[str, int] | None = None,
) -> Iterator[EpisodeArrays]:
    """Raw episodes -> arrays: normalized actions [T, A] and states [T, S] float32, JPEG frames
    per camera, and the `extra_keys` members stacked as stored.

    `perturb` (the loader's sensor noise, `demofactory.shards.sensor_noise`) gets each episode with
    raw
    states and actions, before normalization. Each episode is normalized with its embodiment's
    statistics when the normalizer has them (`Normalizer.for_embodiment`); `embodiment_ids`:
    robot -> the id its steps carry (0 for a robot not in it)."""
    ids = embodiment_ids or {}
    for ep in episodes:
        names = cameras if cameras is not None else _jpeg_cameras(ep.samples[0])
        suffixes = [(camera, f"{camera}.jpg") for camera in names]
        arrays = EpisodeArrays(
            index=ep.index,
            instruction=ep.instruction,
            actions=np.stack([_npy(s, _ACTION_MEMBER) for s in ep.samples]),
            states=np.stack([_npy(s, _STATE_MEMBER) for s in ep.samples]),
            frames={c: tuple(_member(s, suffix) for s in ep.samples) for c, suffix in suffixes},
            extras={
                key: np.stack([_npy(s, f"{key}.npy") for s in ep.samples]) for key in extra_keys
            },
            pngs={suffix: tuple(_member(s, suffix) for s in ep.samples) for suffix in pngs},
            embodiment_id=ids.get(ep.embodiment, 0),
        )
        if perturb is not None:
            arrays = perturb(arrays)
        norm = normalizer.for_embodiment(ep.embodiment)
        yield replace(
            arrays,
            actions=norm.normalize(ACTION_KEY, arrays.actions),
            states=norm.normalize(STATE_KEY, arrays.states),
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
                embodiment_id=ep.embodiment_id,
            )


def shuffle(samples: Iterable[Any], bufsize: int, rng: np.random.Generator) -> Iterator[Any]:
    """Samples -> the same samples, each drawn at random from a buffer of `bufsize` (<= 1: kept)."""
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
            "images": {
                camera: _decode_jpeg(data, image_dtype) for camera, data in s.frames.items()
            },
            "state": torch.from_numpy(np.array(s.state, dtype=np.float32)),
            "action_chunk": torch.from_numpy(np.array(s.action_chunk, dtype=np.float32)),
            "action_mask": torch.from_numpy(np.array(s.action_mask, dtype=bool)),
            "instruction": s.instruction,
            "episode": s.episode,
            "step": s.step,
            "embodiment_id": s.embodiment_id,
        }
        item.update((key, torch.from_numpy(np.array(value))) for key, value in s.extras.items())
        for suffix, data in s.pngs.items():
            camera, _, kind = suffix[: -len(".png")].rpartition("_")  # "agentview_depth.png"
            if kind == "depth":
                item.setdefault("depth", {})[camera] = torch.from_numpy(
                    decode_depth_png(data)[None]
                )
            else:
                item.setdefault("segmentation", {})[camera] = torch.from_numpy(
                    decode_segmentation_png(data).astype(np.int64)
                )
        yield item


def _member(sample: RawSample, suffix: str) -> bytes:
    try:
        return sample.members[suffix]
    except KeyError:
        raise DatasetError(
            f"{sample.task.url}: sample {sample.key} has no {suffix}; "
            f"it has {sorted(sample.members)}"
        ) from None


def _npy(sample: RawSample, suffix: str) -> np.ndarray:
    data = _member(sample, suffix)
    try:
        return load_npy(data)
    except ValueError as exc:
        raise DatasetError(f"{sample.task.url}: {sample.key}.{suffix}: {exc}") from None


_NPY_MAGIC = b"\x93NUMPY"


def load_npy(data: bytes) -> np.ndarray:
    """The bytes of a .npy file -> a read-only array viewing them, as `np.load(allow_pickle=False)`.

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
        raise ValueError(
            f"holds {len(data) - end} bytes after its header, {dtype} {shape} needs "
            f"{count * dtype.itemsize}"
        )
    return np.frombuffer(data, dtype, count=count, offset=end).reshape(shape, order=order)


@lru_cache(maxsize=256)
def _npy_header(header: bytes) -> tuple[np.dtype, tuple[int, ...], str, int]:
    # header: the magic, version, length and dict of a .npy file
    # -> (dtype, shape, "C" or "F", count).
    fp = io.BytesIO(header)
    version = np.lib.format.read_magic(fp)
    read = (
        np.lib.format.read_array_header_1_0
        if version == (1, 0)
        else np.lib.format.read_array_header_2_0
    )
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
        f"{last.task.url}: episode {first['episode']} ends after {steps} of {first['length']} "
        "steps at the end of the shard; episodes must be whole inside one shard "
        "(run demofactory.shards.verify)"
    )


def _jpeg_cameras(sample: RawSample) -> list[str]:
    return sorted(suffix[: -len(".jpg")] for suffix in sample.members if suffix.endswith(".jpg"))


def _decode_jpeg(data: bytes, image_dtype: str) -> torch.Tensor:
    tensor = torch.from_numpy(_jpeg_planes(data))
    return tensor.float().div_(255.0) if image_dtype == "float32" else tensor


_JPEG_END = b"\xff\xd9"  # EOI: a JPEG cut short lacks it


def _jpeg_planes(data: bytes) -> np.ndarray:
    """A JPEG -> [3, H, W] uint8 RGB, a new writable array."""
    # OpenCV's decoder first: libjpeg-turbo called from C, 3.8x PIL's speed at 84 px and 2.4x at
    # 128 px (measured; PIL's Python-level marker parsing costs more than the decoding of a small
    # frame) and the same pixels (the same library and defaults: islow IDCT, fancy upsampling).
    # IMREAD_UNCHANGED: no EXIF rotation (PIL applies none) and no conversion of its own.
    if data[-2:] == _JPEG_END and _jpeg_components(data) == 3:
        bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
        if bgr is not None and bgr.ndim == 3 and bgr.shape[2] == 3:
            blue, green, red = cv2.split(bgr)  # planes, then one copy: 3x numpy's strided copy
            return np.stack((red, green, blue))
    # Grey or CMYK frames (OpenCV converts CMYK its own way), and damaged data, which OpenCV
    # would decode in part with a warning on stderr: PIL converts the former, raises for the latter.
    with Image.open(io.BytesIO(data)) as image:
        pixels = np.asarray(image if image.mode == "RGB" else image.convert("RGB"))
    # numpy for the transposing copy: torch's parallel copy of a small image costs milliseconds
    # of thread hand-offs in the main process.
    return np.array(pixels.transpose(2, 0, 1), order="C")


def _jpeg_components(data: bytes) -> int | None:
    """The colour components of a JPEG (3: YCbCr or RGB), from its frame header; None if none."""
    at = 2  # past SOI
    while at + 9 < len(data) and data[at] == 0xFF:
        marker = data[at + 1]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # SOFn, not DHT/JPG/DAC
            return data[at + 9]
        at += 2 + int.from_bytes(data[at + 2 : at + 4], "big")
    return None
