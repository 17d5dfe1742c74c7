"""Export a dataset as a LeRobot dataset in the v3.0 layout, without importing lerobot.

    DIR: manifest.json, episodes.jsonl, shards                                load_source
      -> SourceEpisode: actions [T, A], states [T, S], JPEG frames per camera    read_episodes
      -> per episode: rows appended to data/chunk-C/file-F.parquet, frames
         appended to videos/<key>/chunk-C/file-F.mp4, one episodes row          _LeRobotWriter.add
      -> meta/info.json, meta/stats.json, meta/tasks.parquet,
         meta/episodes/chunk-000/file-000.parquet                             _write_meta
      -> .OUT.tmp-<pid>  --fsync, rename-->  OUT

What is written (LeRobot v3.0, ``codebase_version`` "v3.0"):

- ``data/chunk-CCC/file-FFF.parquet``: one row a frame: ``observation.state`` and
  ``action`` (list<float32>, bit-equal to the shards), ``timestamp`` (float32,
  frame_index / fps), ``frame_index``, ``episode_index``, ``index`` (global) and
  ``task_index`` (int64).
- ``videos/observation.images.<camera>/chunk-CCC/file-FFF.mp4``: the episodes of a
  data file, concatenated, at the dataset fps (yuv420p, constant frame rate,
  frame n at n / fps). An episode's frames are those with ``from_timestamp <= t <
  to_timestamp`` in its episodes row.
- ``meta/episodes/chunk-000/file-000.parquet``: per episode ``episode_index``,
  ``tasks``, ``length``, ``data/chunk_index``, ``data/file_index``,
  ``dataset_from_index``, ``dataset_to_index`` (global, end exclusive), per
  camera ``videos/<key>/{chunk_index,file_index,from_timestamp,to_timestamp}``,
  ``meta/episodes/{chunk_index,file_index}``, and the source's
  ``demofactory/episode_index`` and ``demofactory/seed``.
- ``meta/tasks.parquet``: ``task`` -> ``task_index``, with pandas metadata making
  ``task`` the index (what LeRobot's ``pd.read_parquet`` expects).
- ``meta/stats.json``: state and action from our stats.json (mean, std, min,
  max, q01, q99, count); images per channel in [0, 1] over every frame, shaped
  [3, 1, 1] as LeRobot's. No per-episode ``stats/*`` columns are written.

Choices:
- Depth and segmentation images (cameras that have them) are not exported yet: LeRobot
  v3.0 has no lossless per-frame image feature besides video, and H.264 would round the
  16-bit depth. Use the robomimic export (or the shards) for them.
- LeRobot looks episodes up by position, so ``episode_index`` is renumbered
  0..N-1 in the order the shards hold them (shard name, then index).
- yuv420p needs an even width and height: an odd frame is padded by repeating
  its last column or row, and the feature's shape is the padded (video) size.
- Data and video files roll over together, at an episode boundary, once the
  current data file passes `data_file_size_mb` (uncompressed) or a video passes
  `video_file_size_mb` (what the encoder has emitted so far); file number n is
  chunk ``n // chunk_size``, file ``n % chunk_size``. LeRobot rolls data and
  videos over independently; the episodes rows hold both indices either way.
"""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from factory.errors import UserError
from shards.format import (
    ACTION_KEY,
    META_KEY,
    SIM_STATE_KEY,
    STATE_KEY,
    DatasetError,
    depth_member,
    dumps_json,
    segmentation_member,
    shards_dir,
)
from shards.loader import RawEpisode, ShardTask, group_episodes, group_samples, read_members
from shards.manifest import check_shards, load_manifest
from shards.metadata import EpisodeRecord, load_dataset_info, load_episodes
from shards.stats import load_stats

CODEBASE_VERSION = "v3.0"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
TASKS_PATH = "meta/tasks.parquet"
INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"

VIDEO_CRF = 18  # x264 constant quality: ~41 dB PSNR against the source JPEGs in the tests
VIDEO_GOP = 2  # LeRobot's default keyframe interval: any frame decodes after at most one other

_STATS_FIELDS = ("mean", "std", "min", "max", "q01", "q99")
_INDEX_COLUMNS = ("frame_index", "episode_index", "index", "task_index")
DATA_SCHEMA = pa.schema(
    [
        ("observation.state", pa.list_(pa.float32())),
        (ACTION_KEY, pa.list_(pa.float32())),
        ("timestamp", pa.float32()),
    ]
    + [(name, pa.int64()) for name in _INDEX_COLUMNS]
)


# ---------------------------------------------------------------- reading the source dataset


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
    for the cameras that have them (`shards.format`).
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


def load_source(dataset_dir: Path) -> Source:
    """Read and check a dataset's metadata for export; any problem raises `UserError` naming the file."""
    path = Path(dataset_dir)
    if not path.is_dir():
        raise UserError(f"{path}: no such dataset directory")
    try:
        info = load_dataset_info(path)
        if info is None:
            raise UserError(f"{path}: not a demofactory dataset (no dataset_info.json)")
        manifest = load_manifest(path)
        source = _check_source(path, info, load_episodes(path), manifest)
        check_shards(path, manifest, source.shard_samples)  # before a byte is exported
        return source
    except (OSError, DatasetError) as exc:
        raise UserError(f"{path}: not a readable dataset ({exc})") from None


def _check_source(
    path: Path, info: Mapping[str, Any], records: Sequence[EpisodeRecord], manifest
) -> Source:
    fps = info.get("fps")
    if isinstance(fps, bool) or not isinstance(fps, int) or fps < 1:
        raise DatasetError(f"dataset_info.json: 'fps' must be an int >= 1, got {fps!r}")
    shard_samples = {shard.name: shard.samples for shard in manifest.shards if shard.samples > 0}
    if not shard_samples or not records:
        raise UserError(
            f"{path}: holds no episodes (manifest.json or episodes.jsonl is empty); nothing to export"
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
    # a stream of RawEpisode(task, ordinal, index, instruction, samples): whole episodes, in tar order
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
    """One JPEG frame -> [H, W, 3] uint8 RGB; a size other than the camera's raises `DatasetError`."""
    with Image.open(io.BytesIO(data)) as image:
        pixels = np.asarray(image.convert("RGB"))
    if pixels.shape != (camera.height, camera.width, 3):
        raise DatasetError(
            f"a {camera.name} frame is {pixels.shape[1]}x{pixels.shape[0]}, "
            f"dataset_info.json says {camera.width}x{camera.height}"
        )
    return pixels


# ---------------------------------------------------------------- the export


def export_lerobot(
    dataset_dir: Path,
    out_dir: Path,
    *,
    chunk_size: int = 1000,
    video_codec: str = "libx264",
    data_file_size_mb: float = 100.0,
    video_file_size_mb: float = 200.0,
) -> dict[str, Any]:
    """Write the dataset at `dataset_dir` as a LeRobot v3.0 dataset in `out_dir`.

    chunk_size:         files per ``chunk-CCC`` folder (info.json ``chunks_size``)
    video_codec:        an FFmpeg encoder PyAV has (libx264: H.264)
    data_file_size_mb:  start a new data/video file once a data file passes this
    video_file_size_mb: ... or once one camera's video passes this

    `out_dir` must not exist or be empty; the export is built beside it and
    renamed into place once complete, so a failed export leaves nothing. Bad
    arguments and unreadable datasets raise `UserError`. Returns a summary:
    out_dir, codebase_version, episodes, frames, tasks, data_files, video_keys.
    """
    _check_options(chunk_size, video_codec, data_file_size_mb, video_file_size_mb)
    source = load_source(dataset_dir)
    stats = _source_stats(source)
    out = _check_out_dir(Path(out_dir))
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)  # a leftover of this same process id
    try:
        writer = _LeRobotWriter(
            tmp, source, chunk_size, video_codec, data_file_size_mb, video_file_size_mb
        )
        try:
            for episode in read_episodes(source):
                writer.add(episode)
        finally:
            writer.close()
        _write_meta(tmp, source, writer, stats)
        _fsync_tree(tmp)
        os.rename(tmp, out)  # onto a missing or empty directory: atomic
    except DatasetError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise UserError(f"{source.dir}: not a readable dataset ({exc})") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {
        "out_dir": out,
        "codebase_version": CODEBASE_VERSION,
        "episodes": len(writer.episodes),
        "frames": writer.frames,
        "tasks": len(writer.tasks),
        "data_files": writer.files,
        "video_keys": [video_key(camera.name) for camera in source.cameras],
    }


def video_key(camera: str) -> str:
    """The LeRobot feature of a camera, e.g. ``observation.images.agentview``."""
    return f"observation.images.{camera}"


def _check_options(chunk_size: int, video_codec: str, data_mb: float, video_mb: float) -> None:
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise UserError(
            f"chunk_size must be an int >= 1 (files per chunk folder, e.g. 1000), got {chunk_size!r}"
        )
    for name, value in (("data_file_size_mb", data_mb), ("video_file_size_mb", video_mb)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise UserError(f"{name} must be a number > 0 (e.g. 100), got {value!r}")
    if video_codec not in av.codecs_available:
        raise UserError(
            f"video_codec {video_codec!r} is not an FFmpeg codec PyAV knows (e.g. 'libx264')"
        )
    try:
        av.codec.Codec(video_codec, "w")
    except (ValueError, av.error.FFmpegError):
        raise UserError(
            f"video_codec {video_codec!r} has no encoder in this PyAV build (e.g. 'libx264')"
        ) from None


def _check_out_dir(out: Path) -> Path:
    if out.exists() and not out.is_dir():
        raise UserError(
            f"{out}: exists and is not a directory; choose a new or empty output directory"
        )
    if out.is_dir() and any(out.iterdir()):
        raise UserError(f"{out}: exists and is not empty; choose a new or empty output directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    return out


def _source_stats(source: Source) -> dict[str, Any]:
    try:
        stats = load_stats(source.dir)
    except DatasetError as exc:
        raise UserError(f"{source.dir}: not a readable dataset ({exc})") from None
    missing = [key for key in (STATE_KEY, ACTION_KEY) if stats is None or key not in stats.keys]
    if missing:
        raise UserError(f"{source.dir}: stats.json lacks {missing} (run factory verify)")
    return {key: stats.keys[key] for key in (STATE_KEY, ACTION_KEY)}


class _LeRobotWriter:
    """Data files and videos of one export, written episode by episode; collects the episodes rows."""

    def __init__(
        self,
        root: Path,
        source: Source,
        chunk_size: int,
        codec: str,
        data_mb: float,
        video_mb: float,
    ):
        self.root, self.source, self.chunk_size, self.codec = root, source, chunk_size, codec
        self.data_limit, self.video_limit = data_mb * 2**20, video_mb * 2**20
        self.tasks: dict[str, int] = {}  # instruction -> task_index, in order of first use
        self.episodes: list[dict[str, Any]] = []
        self.frames = 0
        self.files = 0  # data files opened so far; the current one is number files - 1
        self.image_stats = {video_key(camera.name): _ImageStats() for camera in source.cameras}
        self.video_sizes = {
            video_key(c.name): (_even(c.width), _even(c.height)) for c in source.cameras
        }
        self._data: pq.ParquetWriter | None = None
        self._data_bytes = 0
        self._videos: dict[str, _VideoFile] = {}

    def add(self, episode: SourceEpisode) -> None:
        """Append one episode's rows and frames, starting new files first when the current ones are full."""
        if self._data is None or self._full():
            self._next_files()
        chunk, file = self._chunk_file()
        task_index = self.tasks.setdefault(episode.record.instruction, len(self.tasks))
        table = _frame_table(episode, len(self.episodes), self.frames, task_index, self.source.fps)
        self._data.write_table(table)
        self._data_bytes += table.nbytes
        row: dict[str, Any] = {
            "episode_index": len(self.episodes),
            "tasks": [episode.record.instruction],
            "length": episode.length,
            "data/chunk_index": chunk,
            "data/file_index": file,
            "dataset_from_index": self.frames,
            "dataset_to_index": self.frames + episode.length,
        }
        for camera in self.source.cameras:
            key = video_key(camera.name)
            pixels = [decode_jpeg(frame, camera) for frame in episode.frames[camera.name]]
            self.image_stats[key].add(pixels)
            start, end = self._videos[key].append(pixels)
            row.update(
                {
                    f"videos/{key}/chunk_index": chunk,
                    f"videos/{key}/file_index": file,
                    f"videos/{key}/from_timestamp": start,
                    f"videos/{key}/to_timestamp": end,
                }
            )
        row.update(
            {
                "meta/episodes/chunk_index": 0,
                "meta/episodes/file_index": 0,
                "demofactory/episode_index": episode.record.index,
                "demofactory/seed": episode.record.seed,
            }
        )
        self.episodes.append(row)
        self.frames += episode.length

    def close(self) -> None:
        """Finish the current data file and videos."""
        if self._data is not None:
            self._data.close()
            self._data = None
        for video in self._videos.values():
            video.close()
        self._videos = {}

    def _full(self) -> bool:
        return self._data_bytes >= self.data_limit or any(
            v.bytes >= self.video_limit for v in self._videos.values()
        )

    def _chunk_file(self) -> tuple[int, int]:
        return divmod(self.files - 1, self.chunk_size)

    def _next_files(self) -> None:
        self.close()
        self.files += 1
        chunk, file = self._chunk_file()
        path = self.root / DATA_PATH.format(chunk_index=chunk, file_index=file)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._data = pq.ParquetWriter(path, DATA_SCHEMA, compression="snappy")
        self._data_bytes = 0
        for camera in self.source.cameras:
            key = video_key(camera.name)
            path = self.root / VIDEO_PATH.format(video_key=key, chunk_index=chunk, file_index=file)
            self._videos[key] = _VideoFile(
                path, *self.video_sizes[key], self.source.fps, self.codec
            )


def _frame_table(
    episode: SourceEpisode, episode_index: int, first_index: int, task_index: int, fps: int
) -> pa.Table:
    steps = np.arange(episode.length, dtype=np.int64)
    columns = {
        "observation.state": _list_column(episode.states),
        ACTION_KEY: _list_column(episode.actions),
        "timestamp": pa.array((steps / fps).astype(np.float32)),
        "frame_index": pa.array(steps),
        "episode_index": pa.array(np.full(episode.length, episode_index, dtype=np.int64)),
        "index": pa.array(first_index + steps),
        "task_index": pa.array(np.full(episode.length, task_index, dtype=np.int64)),
    }
    return pa.table(columns, schema=DATA_SCHEMA)


def _list_column(values: np.ndarray) -> pa.Array:
    """[T, D] float32 -> a list<float32> column of T rows, the values bit for bit."""
    rows, dim = values.shape
    offsets = pa.array(np.arange(0, rows * dim + 1, dim, dtype=np.int32))
    return pa.ListArray.from_arrays(
        offsets, pa.array(np.ascontiguousarray(values, np.float32).reshape(-1))
    )


def _even(n: int) -> int:
    return n + n % 2


class _VideoFile:
    """One mp4 being written: frames appended at `fps` (frame n at n / fps), in yuv420p."""

    def __init__(self, path: Path, width: int, height: int, fps: int, codec: str):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fps, self.frames, self.bytes = fps, 0, 0
        self._container = av.open(str(path), mode="w", format="mp4")
        self._stream = self._container.add_stream(
            codec, rate=fps, options={"crf": str(VIDEO_CRF), "g": str(VIDEO_GOP)}
        )
        self._stream.width, self._stream.height = width, height
        self._stream.pix_fmt = "yuv420p"

    def append(self, frames: Sequence[np.ndarray]) -> tuple[float, float]:
        """Encode [H, W, 3] uint8 frames; returns their (from, to) timestamps in seconds, to exclusive."""
        start = self.frames
        for pixels in frames:
            frame = av.VideoFrame.from_ndarray(_pad_even(pixels), format="rgb24")
            frame.pts, frame.time_base = self.frames, Fraction(1, self.fps)
            self._mux(self._stream.encode(frame))
            self.frames += 1
        return start / self.fps, self.frames / self.fps

    def close(self) -> None:
        self._mux(self._stream.encode(None))  # flush the encoder's delayed frames
        self._container.close()

    def _mux(self, packets: Sequence[av.Packet]) -> None:
        for packet in packets:
            self.bytes += packet.size
            self._container.mux(packet)


def _pad_even(pixels: np.ndarray) -> np.ndarray:
    # Repeating the edge (rather than black, as the preview does) keeps the padding
    # from bleeding a dark fringe into the real pixels through chroma subsampling.
    h, w = pixels.shape[:2]
    if h % 2 == 0 and w % 2 == 0:
        return pixels
    return np.pad(pixels, ((0, h % 2), (0, w % 2), (0, 0)), mode="edge")


class _ImageStats:
    """Per-channel statistics of RGB frames scaled to [0, 1], accumulated exactly in float64."""

    def __init__(self) -> None:
        self.frames, self.pixels = 0, 0
        self.sum, self.sumsq = np.zeros(3), np.zeros(3)
        self.min, self.max = np.full(3, np.inf), np.full(3, -np.inf)

    def add(self, frames: Sequence[np.ndarray]) -> None:
        for pixels in frames:
            values = pixels.reshape(-1, 3).astype(np.float64) / 255.0
            self.sum += values.sum(axis=0)
            self.sumsq += np.square(values).sum(axis=0)
            self.min = np.minimum(self.min, values.min(axis=0))
            self.max = np.maximum(self.max, values.max(axis=0))
            self.frames, self.pixels = self.frames + 1, self.pixels + len(values)

    def to_json(self) -> dict[str, Any]:
        """LeRobot's image statistics: each [3, 1, 1] (channel first), count [frames]."""
        mean = self.sum / self.pixels
        std = np.sqrt(np.maximum(self.sumsq / self.pixels - np.square(mean), 0.0))
        shaped = {
            name: [[[float(v)]] for v in values]
            for name, values in (("mean", mean), ("std", std), ("min", self.min), ("max", self.max))
        }
        return {**shaped, "count": [self.frames]}


# ---------------------------------------------------------------- metadata


def _write_meta(
    root: Path, source: Source, writer: _LeRobotWriter, stats: Mapping[str, Any]
) -> None:
    (root / "meta").mkdir(parents=True, exist_ok=True)
    episodes_path = root / EPISODES_PATH.format(chunk_index=0, file_index=0)
    episodes_path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(writer.episodes), episodes_path)
    pq.write_table(_tasks_table(writer.tasks), root / TASKS_PATH)
    lerobot_stats = {
        "observation.state": _key_stats(stats[STATE_KEY]),
        ACTION_KEY: _key_stats(stats[ACTION_KEY]),
        **{key: image_stats.to_json() for key, image_stats in writer.image_stats.items()},
    }
    (root / STATS_PATH).write_text(dumps_json(lerobot_stats, indent=4) + "\n", encoding="utf-8")
    info = _info(source, writer)
    (root / INFO_PATH).write_text(dumps_json(info, indent=4) + "\n", encoding="utf-8")


def _key_stats(key_stats: Any) -> dict[str, Any]:
    return {
        **{name: getattr(key_stats, name) for name in _STATS_FIELDS},
        "count": [key_stats.count],
    }


def _tasks_table(tasks: Mapping[str, int]) -> pa.Table:
    """task -> task_index, as pandas' ``DataFrame(index=Index(tasks, name="task")).to_parquet`` writes it."""
    table = pa.table(
        {
            "task_index": pa.array(list(tasks.values()), pa.int64()),
            "task": pa.array(list(tasks), pa.string()),
        }
    )
    pandas_meta = {
        "index_columns": ["task"],
        "column_indexes": [
            {
                "name": None,
                "field_name": None,
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": {"encoding": "UTF-8"},
            }
        ],
        "columns": [
            {
                "name": "task_index",
                "field_name": "task_index",
                "pandas_type": "int64",
                "numpy_type": "int64",
                "metadata": None,
            },
            {
                "name": "task",
                "field_name": "task",
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": None,
            },
        ],
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.3",
    }
    return table.replace_schema_metadata({b"pandas": dumps_json(pandas_meta).encode("utf-8")})


def _info(source: Source, writer: _LeRobotWriter) -> dict[str, Any]:
    features: dict[str, Any] = {}
    for camera in source.cameras:
        key = video_key(camera.name)
        width, height = writer.video_sizes[key]
        features[key] = {
            "dtype": "video",
            "shape": [height, width, 3],
            "names": ["height", "width", "channels"],
            "info": _probe_video(
                writer.root / VIDEO_PATH.format(video_key=key, chunk_index=0, file_index=0),
                source.fps,
            ),
        }
    for key, layout in (
        ("observation.state", source.state_layout),
        (ACTION_KEY, source.action_layout),
    ):
        names = [name if size == 1 else f"{name}_{i}" for name, size in layout for i in range(size)]
        features[key] = {"dtype": "float32", "shape": [len(names)], "names": names}
    features["timestamp"] = {"dtype": "float32", "shape": [1], "names": None}
    for name in _INDEX_COLUMNS:
        features[name] = {"dtype": "int64", "shape": [1], "names": None}
    return {
        "codebase_version": CODEBASE_VERSION,
        "robot_type": source.info.get("robot"),
        "total_episodes": len(writer.episodes),
        "total_frames": writer.frames,
        "total_tasks": len(writer.tasks),
        "chunks_size": writer.chunk_size,
        "data_files_size_in_mb": _number(writer.data_limit / 2**20),
        "video_files_size_in_mb": _number(writer.video_limit / 2**20),
        "fps": source.fps,
        "splits": {"train": f"0:{len(writer.episodes)}"},
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH if source.cameras else None,
        "features": features,
    }


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def _probe_video(path: Path, fps: int) -> dict[str, Any]:
    """The ``info`` of a video feature, read back from the file as LeRobot does."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        return {
            "video.height": stream.codec_context.height,
            "video.width": stream.codec_context.width,
            "video.codec": stream.codec_context.name,
            "video.pix_fmt": stream.codec_context.pix_fmt,
            "video.is_depth_map": False,
            "video.fps": fps,
            "video.channels": 3,
            "has_audio": len(container.streams.audio) > 0,
        }


def _fsync_tree(root: Path) -> None:
    # Before the rename, so that the export is never seen under its final name with
    # data still in the page cache only.
    for folder, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(folder, name), "rb") as f:
                os.fsync(f.fileno())
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
