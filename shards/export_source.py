"""The dataset as the exports read it: metadata checked first, then whole episodes decoded.

    DIR: dataset_info.json, manifest.json, episodes.jsonl                    load_source
      -> Source: fps, cameras, state/action layouts, episodes in shard order
         (shards checked against manifest.json's size and sha256 first)
    Source's shards, read by the strict reader (demofactory.shards.tario via read_members)
      -> RawSample -> RawEpisode: whole episodes, in tar order                group_episodes
      -> SourceEpisode: actions [T, A], states [T, S], sim_states [T, N],
         JPEG frames (and depth/segmentation PNGs) per camera, checked
         against episodes.jsonl                                              read_episodes

Shared by `demofactory.shards.export_lerobot` and `demofactory.shards.export_robomimic`.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from demofactory.shards.format import (
    ACTION_KEY,
    META_KEY,
    SIM_STATE_KEY,
    STATE_KEY,
    DatasetError,
    ExportError,
    depth_member,
    segmentation_member,
    shards_dir,
)
from demofactory.shards.manifest import check_shards, load_manifest
from demofactory.shards.metadata import EpisodeRecord, load_dataset_info, load_episodes
from demofactory.shards.stages import RawEpisode, group_episodes, read_members
from demofactory.shards.tario import ShardTask, group_samples
from PIL import Image


@dataclass(frozen=True)
class CameraInfo:
    """A camera of the source dataset; frames are width x height RGB.

    depth: it has depth members; segmentation: its label mode, "none" without.
    """

    name: str
    width: int
    height: int
    depth: bool = False
    segmentation: str = "none"


@dataclass(frozen=True)
class Source:
    """A dataset checked for export.

    dir:           the dataset directory
    info:          dataset_info.json
    fps:           control (and frame) rate, Hz
    cameras:       in dataset_info.json order
    state_layout:  (name, size) parts of state.npy, e.g. (("eef_pos", 3), ...)
    action_layout: (name, size) parts of action.npy
    records:       the episodes in the order the shards hold them (shard name, then index)
    shard_samples: shard file name -> samples, for the manifest's shards that hold any
    """

    dir: Path
    info: Mapping[str, Any]
    fps: int
    cameras: tuple[CameraInfo, ...]
    state_layout: tuple[tuple[str, int], ...]
    action_layout: tuple[tuple[str, int], ...]
    records: tuple[EpisodeRecord, ...]
    shard_samples: Mapping[str, int]


@dataclass(frozen=True, eq=False)
class SourceEpisode:
    """One episode as its shard holds it.

    actions [T, A] float32, states [T, S] float32, sim_states [T, N] float64;
    frames: camera name -> T JPEG-encoded frames; depth, segmentation: camera name -> T PNGs,
    for the cameras that have them (`demofactory.shards.format`).
    """

    record: EpisodeRecord
    actions: np.ndarray
    states: np.ndarray
    sim_states: np.ndarray
    frames: Mapping[str, tuple[bytes, ...]]
    depth: Mapping[str, tuple[bytes, ...]] = field(default_factory=dict)
    segmentation: Mapping[str, tuple[bytes, ...]] = field(default_factory=dict)

    @property
    def length(self) -> int:
        return len(self.actions)

    def texts(self) -> list[str]:
        """The instruction, then its paraphrases (provenance ``paraphrases``), each once."""
        found = self.record.provenance.get("paraphrases") or []
        if not isinstance(found, list) or not all(isinstance(p, str) for p in found):
            raise DatasetError(
                f"episodes.jsonl: episode {self.record.index}'s provenance 'paraphrases' must be "
                f"a list of strings, got {found!r}"
            )
        return list(dict.fromkeys([self.record.instruction, *found]))


def has_subtasks(record: EpisodeRecord) -> bool:
    """Whether the episode's provenance gives its subtasks' instructions."""
    return bool(record.provenance.get("subtask_instructions"))


def frame_subtasks(episode: SourceEpisode) -> list[str]:
    """Each frame's subtask instruction: provenance ``subtask_instructions`` (per spec subtask)
    at the steps provenance ``subtask_starts`` ([subtask, first step], in execution order)
    gives; the episode's instruction for an episode without them, or before the first start."""
    record = episode.record
    texts = record.provenance.get("subtask_instructions") or []
    starts = record.provenance.get("subtask_starts") or []
    where = f"episodes.jsonl: episode {record.index}'s provenance"
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise DatasetError(
            f"{where} 'subtask_instructions' must be a list of strings, got {texts!r}"
        )
    out = [record.instruction] * episode.length
    if not texts:
        return out
    for position, entry in enumerate(starts):
        try:
            subtask, first = int(entry[0]), int(entry[1])
            text = texts[subtask]
        except (TypeError, ValueError, IndexError):
            raise DatasetError(
                f"{where} 'subtask_starts'[{position}] must be [subtask index < "
                f"{len(texts)}, first step], got {entry!r}"
            ) from None
        for t in range(max(first, 0), episode.length):
            out[t] = text
    return out


def load_source(dataset_dir: Path) -> Source:
    """Read and check a dataset's metadata for export; a problem raises `DatasetError` naming the
    file (`ExportError` when there is no dataset there, or nothing in it to export)."""
    path = Path(dataset_dir)
    if not path.is_dir():
        raise ExportError(f"{path}: no such dataset directory")
    try:
        info = load_dataset_info(path)
        if info is None:
            raise ExportError(f"{path}: not a demofactory dataset (no dataset_info.json)")
        manifest = load_manifest(path)
        source = _check_source(path, info, load_episodes(path), manifest)
        check_shards(path, manifest, source.shard_samples)  # before a byte is exported
        return source
    except ExportError:
        raise
    except (OSError, DatasetError) as exc:  # a DatasetError still, with the dataset's path
        raise DatasetError(f"{path}: not a readable dataset ({exc})") from None


def _check_source(
    path: Path, info: Mapping[str, Any], records: Sequence[EpisodeRecord], manifest
) -> Source:
    fps = info.get("fps")
    if isinstance(fps, bool) or not isinstance(fps, int) or fps < 1:
        raise DatasetError(f"dataset_info.json: 'fps' must be an int >= 1, got {fps!r}")
    shard_samples = {shard.name: shard.samples for shard in manifest.shards if shard.samples > 0}
    if not shard_samples or not records:
        raise ExportError(
            f"{path}: holds no episodes (manifest.json or episodes.jsonl is empty); "
            "nothing to export"
        )
    listed: dict[str, int] = dict.fromkeys(shard_samples, 0)
    for record in records:
        if record.shard not in listed:
            raise DatasetError(
                f"episodes.jsonl: episode {record.index} is in {record.shard}, "
                "which manifest.json does not list (an unfinished run?)"
            )
        listed[record.shard] += record.length
    for name, steps in listed.items():
        if steps != shard_samples[name]:
            raise DatasetError(
                f"episodes.jsonl gives {name} {steps} steps, manifest.json {shard_samples[name]}"
            )
    return Source(
        dir=path,
        info=info,
        fps=fps,
        cameras=_cameras(info),
        state_layout=_layout(info, STATE_KEY),
        action_layout=_layout(info, ACTION_KEY),
        records=tuple(sorted(records, key=lambda record: (record.shard, record.index))),
        shard_samples=shard_samples,
    )


def _cameras(info: Mapping[str, Any]) -> tuple[CameraInfo, ...]:
    cameras = []
    for i, camera in enumerate(info.get("cameras") or []):
        try:
            name, width, height = str(camera["name"]), int(camera["width"]), int(camera["height"])
        except (KeyError, TypeError, ValueError):
            raise DatasetError(
                f"dataset_info.json: cameras[{i}] needs name, width and height, got {camera!r}"
            ) from None
        if width < 1 or height < 1:
            raise DatasetError(f"dataset_info.json: cameras[{i}] has size {width}x{height}")
        segmentation = (camera.get("segmentation") or {}).get("mode", "none")
        cameras.append(CameraInfo(name, width, height, bool(camera.get("depth")), segmentation))
    return tuple(cameras)


def _layout(info: Mapping[str, Any], key: str) -> tuple[tuple[str, int], ...]:
    part = info.get(key)
    try:
        layout = tuple((str(name), int(size)) for name, size in part["layout"])
        dim = int(part["dim"])
    except (KeyError, TypeError, ValueError):
        raise DatasetError(
            f"dataset_info.json: {key!r} needs 'dim' and 'layout' "
            f'(e.g. {{"dim": 9, "layout": [["eef_pos", 3], ...]}}), got {part!r}'
        ) from None
    if sum(size for _, size in layout) != dim:
        raise DatasetError(
            f"dataset_info.json: {key}.layout sizes sum to "
            f"{sum(size for _, size in layout)}, {key}.dim is {dim}"
        )
    return layout


def read_episodes(source: Source) -> Iterator[SourceEpisode]:
    """The episodes of `source`, read from its shards in order, each checked against episodes.jsonl.

    A shard that disagrees with the manifest or episodes.jsonl raises `DatasetError`.
    """
    urls = {name: str(shards_dir(source.dir) / name) for name in sorted(source.shard_samples)}
    expected = {urls[name]: samples for name, samples in source.shard_samples.items()}
    members = read_members(
        [ShardTask(url) for url in urls.values()], lambda suffix: True, expected=expected
    )
    # a stream of RawEpisode(task, ordinal, index, instruction, samples): whole episodes,
    # in tar order
    raw_episodes = group_episodes(group_samples(members))
    records = iter(source.records)
    for raw in raw_episodes:
        record = next(records, None)
        yield _decode_episode(raw, record, source.cameras)
    missing = [record.index for record in records]
    if missing:
        raise DatasetError(f"episodes.jsonl lists episodes {missing} that no shard holds")


def _decode_episode(
    raw: RawEpisode, record: EpisodeRecord | None, cameras: Sequence[CameraInfo]
) -> SourceEpisode:
    found = (raw.index, Path(raw.task.url).name, len(raw.samples), raw.instruction)
    if record is None or found != (record.index, record.shard, record.length, record.instruction):
        listed = (
            None
            if record is None
            else (record.index, record.shard, record.length, record.instruction)
        )
        raise DatasetError(
            f"{raw.task.url}: holds episode (index, shard, length, instruction) {found}, "
            f"episodes.jsonl lists {listed} next (run factory verify)"
        )
    return SourceEpisode(
        record=record,
        actions=np.stack([_npy(raw, sample.members, ACTION_KEY) for sample in raw.samples]).astype(
            np.float32
        ),
        states=np.stack([_npy(raw, sample.members, STATE_KEY) for sample in raw.samples]).astype(
            np.float32
        ),
        sim_states=np.stack(
            [_npy(raw, sample.members, SIM_STATE_KEY) for sample in raw.samples]
        ).astype(np.float64),
        frames={
            camera.name: tuple(
                _member(raw, sample.members, f"{camera.name}.jpg") for sample in raw.samples
            )
            for camera in cameras
        },
        depth={
            camera.name: tuple(
                _member(raw, sample.members, depth_member(camera.name)) for sample in raw.samples
            )
            for camera in cameras
            if camera.depth
        },
        segmentation={
            camera.name: tuple(
                _member(raw, sample.members, segmentation_member(camera.name))
                for sample in raw.samples
            )
            for camera in cameras
            if camera.segmentation != "none"
        },
    )


def _member(raw: RawEpisode, members: Mapping[str, bytes], suffix: str) -> bytes:
    if suffix not in members:
        raise DatasetError(
            f"{raw.task.url}: a step of episode {raw.index} has no {suffix}; "
            f"it has {sorted(s for s in members if s != f'{META_KEY}.json')}"
        )
    return members[suffix]


def _npy(raw: RawEpisode, members: Mapping[str, bytes], key: str) -> np.ndarray:
    return np.load(io.BytesIO(_member(raw, members, f"{key}.npy")), allow_pickle=False)


def decode_jpeg(data: bytes, camera: CameraInfo) -> np.ndarray:
    """One JPEG frame -> [H, W, 3] uint8 RGB; a size not the camera's raises `DatasetError`."""
    with Image.open(io.BytesIO(data)) as image:
        pixels = np.asarray(image.convert("RGB"))
    if pixels.shape != (camera.height, camera.width, 3):
        raise DatasetError(
            f"a {camera.name} frame is {pixels.shape[1]}x{pixels.shape[0]}, "
            f"dataset_info.json says {camera.width}x{camera.height}"
        )
    return pixels


# ------------------------------------------------------- what every export does around its files


def check_video_codec(video_codec: str) -> None:
    """ExportError unless PyAV has an encoder for `video_codec`."""
    import av  # imported here: verify and the loader read sources without PyAV's start-up

    if video_codec not in av.codecs_available:
        raise ExportError(
            f"video_codec {video_codec!r} is not an FFmpeg codec PyAV knows (e.g. 'libx264')"
        )
    try:
        av.codec.Codec(video_codec, "w")
    except (ValueError, av.error.FFmpegError):
        raise ExportError(
            f"video_codec {video_codec!r} has no encoder in this PyAV build (e.g. 'libx264')"
        ) from None


def check_out_dir(out: Path) -> Path:
    """`out` if it is new or an empty directory (its parent made); ExportError otherwise."""
    if out.exists() and not out.is_dir():
        raise ExportError(
            f"{out}: exists and is not a directory; choose a new or empty output directory"
        )
    if out.is_dir() and any(out.iterdir()):
        raise ExportError(f"{out}: exists and is not empty; choose a new or empty output directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    return out


def fsync_tree(root: Path) -> None:
    """fsync every file and folder under `root`.

    Called before an export's temporary folder is renamed into place, so that the export is
    never seen under its final name with data still in the page cache only.
    """
    for folder, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(folder, name), "rb") as f:
                os.fsync(f.fileno())
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def staged_export(out: Path, source: Source) -> Iterator[Path]:
    """A temporary folder beside `out` to build an export in, renamed onto `out` once the block
    ends without error (after an fsync of everything in it); removed on any error.

    `out` must be what `check_out_dir` returned. A `DatasetError` raised while reading the
    source is reported as the source not being a readable dataset.
    """
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)  # a leftover of this same process id
    try:
        yield tmp
        fsync_tree(tmp)
        os.rename(tmp, out)  # onto a missing or empty directory: atomic
    except DatasetError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise DatasetError(f"{source.dir}: not a readable dataset ({exc})") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
