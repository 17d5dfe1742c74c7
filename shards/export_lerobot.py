"""Export a dataset as a LeRobot dataset in the v3.0 layout, without importing lerobot.

    DIR: manifest.json, episodes.jsonl, shards                 export_source.load_source
      -> SourceEpisode: actions [T, A], states [T, S],
         JPEG frames per camera                                export_source.read_episodes
      -> per episode: rows appended to data/chunk-C/file-F.parquet, frames
         appended to videos/<key>/chunk-C/file-F.mp4
         (lerobot_video.VideoFile), one episodes row           _LeRobotWriter.add
      -> meta/info.json, meta/stats.json, meta/tasks.parquet,
         meta/episodes/chunk-000/file-000.parquet              lerobot_meta.write_meta
      -> .OUT.tmp-<pid>  --fsync, rename-->  OUT

What is written (LeRobot v3.0, ``codebase_version`` "v3.0"):

- ``data/chunk-CCC/file-FFF.parquet``: one row a frame: ``observation.state`` and
  ``action`` (fixed_size_list<float32>[N], bit-equal to the shards), for cameras with
  depth / segmentation ``observation.images.<camera>_depth`` / ``..._seg`` (datasets'
  Image storage, struct<bytes, path>, holding the shards' PNGs unchanged), ``timestamp``
  (float32, frame_index / fps), ``frame_index``, ``episode_index``, ``index`` (global)
  and ``task_index`` (int64). The schema's ``huggingface`` metadata gives the
  ``datasets.Features`` (``lerobot_meta.data_schema``).
- ``videos/observation.images.<camera>/chunk-CCC/file-FFF.mp4``: the episodes of a
  data file, concatenated, at the dataset fps (yuv420p, constant frame rate,
  frame n at n / fps). An episode's frames are those with ``from_timestamp <= t <
  to_timestamp`` in its episodes row.
- ``meta/episodes/chunk-000/file-000.parquet``: per episode ``episode_index``,
  ``tasks`` (its instruction, then its paraphrases), ``length``, ``data/chunk_index``,
  ``data/file_index``, ``dataset_from_index``, ``dataset_to_index`` (global, end exclusive), per
  camera ``videos/<key>/{chunk_index,file_index,from_timestamp,to_timestamp}``,
  ``stats/<feature>/<stat>`` for every feature (min, max, mean, std, count, q01, q10,
  q50, q90, q99, as `demofactory.shards.lerobot_stats` computes them), ``meta/episodes/{chunk_index,
  file_index}``, and the source's ``demofactory/episode_index`` and ``demofactory/seed``.
- ``meta/tasks.parquet``: ``task`` -> ``task_index`` for every instruction and paraphrase, with
  pandas metadata making ``task`` the index (what LeRobot's ``pd.read_parquet`` expects); a
  frame's ``task_index`` is its episode's instruction, so a trainer can draw a paraphrase from
  the episode's ``tasks``.
- ``meta/stats.json``: the episodes' statistics aggregated as LeRobot's ``aggregate_stats``
  does; RGB images per channel in [0, 1], depth in millimetres, shaped [C, 1, 1].
- ``meta/info.json``: video features' ``info`` as lerobot 0.6 writes it (stream fields,
  then the encoder's ``video.g``, ``video.crf``, ``video.preset``, ...; ``is_depth_map``).

Choices:
- Depth and segmentation are ``image`` features (lossless PNG in the parquet, as LeRobot
  stores ``image`` features), not videos: H.264 would round 16-bit depth. Depth is marked
  ``is_depth_map`` with ``depth_unit`` "mm"; labels are 8-bit (object) or 16-bit (geom, body).
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
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from demofactory.shards.action_features import ActionRelabeler, relabeled, write_report
from demofactory.shards.export_source import (
    Source,
    SourceEpisode,
    check_out_dir,
    check_video_codec,
    decode_jpeg,
    frame_subtasks,
    has_subtasks,
    load_source,
    read_episodes,
    staged_export,
)
from demofactory.shards.format import (
    ACTION_KEY,
    STATE_KEY,
    DatasetError,
    ExportError,
    segmentation_bits,
)
from demofactory.shards.global_stats import FrameColumns, PixelCounts
from demofactory.shards.lerobot_meta import (
    CODEBASE_VERSION,
    DATA_PATH,
    SUBTASK_FEATURE,
    VIDEO_PATH,
    Stats,
    data_schema,
    depth_key,
    episode_stats_columns,
    feature_stats,
    image_stats,
    sampled_frames,
    segmentation_key,
    video_key,
    write_meta,
)
from demofactory.shards.lerobot_video import VideoFile, even
from demofactory.shards.quaternions import make_continuous
from demofactory.shards.stats import load_stats
from PIL import Image

# ---------------------------------------------------------------- the export


def export_lerobot(
    dataset_dir: Path,
    out_dir: Path,
    *,
    chunk_size: int = 1000,
    video_codec: str = "libx264",
    data_file_size_mb: float = 100.0,
    video_file_size_mb: float = 200.0,
    actions: ActionRelabeler | None = None,
) -> dict[str, Any]:
    """Write the dataset at `dataset_dir` as a LeRobot v3.0 dataset in `out_dir`.

    chunk_size:         files per ``chunk-CCC`` folder (info.json ``chunks_size``)
    video_codec:        an FFmpeg encoder PyAV has (libx264: H.264)
    data_file_size_mb:  start a new data/video file once a data file passes this
    video_file_size_mb: ... or once one camera's video passes this
    actions:            relabel the actions (`demofactory.shards.action_features`; None: the shards'
    own)

    `out_dir` must not exist or be empty; the export is built beside it and
    renamed into place once complete, so a failed export leaves nothing. Bad
    arguments raise `ExportError`, unreadable datasets `DatasetError`. Returns a summary:
    out_dir, codebase_version, episodes, frames, tasks, data_files, video_keys.
    """
    _check_options(chunk_size, video_codec, data_file_size_mb, video_file_size_mb)
    source = load_source(dataset_dir)
    _source_stats(source)  # refuses a dataset without stats.json, as before
    source, episodes = relabeled(source, read_episodes(source), actions)
    out = check_out_dir(Path(out_dir))
    with staged_export(out, source) as tmp:
        writer = _LeRobotWriter(
            tmp, source, chunk_size, video_codec, data_file_size_mb, video_file_size_mb
        )
        try:
            for episode in episodes:
                writer.add(episode)
        finally:
            writer.close()
        write_meta(tmp, source, writer)
        write_report(tmp, actions)
    return {
        "out_dir": out,
        "codebase_version": CODEBASE_VERSION,
        "episodes": len(writer.episodes),
        "frames": writer.frames,
        "tasks": len(writer.tasks),
        "data_files": writer.files,
        "video_keys": [video_key(camera.name) for camera in source.cameras],
    }


def _check_options(chunk_size: int, video_codec: str, data_mb: float, video_mb: float) -> None:
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ExportError(
            "chunk_size must be an int >= 1 (files per chunk folder, e.g. 1000), "
            f"got {chunk_size!r}"
        )
    for name, value in (("data_file_size_mb", data_mb), ("video_file_size_mb", video_mb)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ExportError(f"{name} must be a number > 0 (e.g. 100), got {value!r}")
    check_video_codec(video_codec)


def _source_stats(source: Source) -> dict[str, Any]:
    # meta/stats.json is computed from the exported rows; stats.json is only required, as
    # factory verify requires it.
    try:
        stats = load_stats(source.dir)
    except DatasetError as exc:
        raise DatasetError(f"{source.dir}: not a readable dataset ({exc})") from None
    missing = [key for key in (STATE_KEY, ACTION_KEY) if stats is None or key not in stats.keys]
    if missing:
        raise ExportError(f"{source.dir}: stats.json lacks {missing} (run factory verify)")
    return {key: stats.keys[key] for key in (STATE_KEY, ACTION_KEY)}


class _LeRobotWriter:
    """Data files and videos of one export, written episode by episode; collects episodes rows."""

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
        self.subtasks = any(has_subtasks(record) for record in source.records)
        self.frame_columns = FrameColumns()  # for meta/stats.json's quantiles over all frames
        self.pixel_counts = PixelCounts()
        self.pixel_scales: dict[str, float] = {}
        self.episodes: list[dict[str, Any]] = []
        self.frames = 0
        self.files = 0  # data files opened so far; the current one is number files - 1
        self.episode_stats: list[dict[str, Stats]] = []
        self.schema = data_schema(source)
        self.video_sizes = {
            video_key(c.name): (even(c.width), even(c.height)) for c in source.cameras
        }
        self._data: pq.ParquetWriter | None = None
        self._data_bytes = 0
        self._videos: dict[str, VideoFile] = {}

    def add(self, episode: SourceEpisode) -> None:
        """Append one episode's rows and frames; new files first when the current ones are full."""
        if self._data is None or self._full():
            self._next_files()
        chunk, file = self._chunk_file()
        # the tasks its frames use (LeRobot's meaning): split and merge rebuild from them
        task_index = self.tasks.setdefault(episode.record.instruction, len(self.tasks))
        # quaternions in the hemisphere of the step before: no q -> -q jumps
        states = make_continuous(episode.states, self.source.state_layout)
        subtasks = frame_subtasks(episode) if self.subtasks else None
        table = _frame_table(
            episode,
            states,
            subtasks,
            self.source,
            self.schema,
            (len(self.episodes), self.frames, task_index),
        )
        self._data.write_table(table)
        self._data_bytes += table.nbytes
        stats = _column_stats(episode, states, self.source, table, self)
        row: dict[str, Any] = {
            "episode_index": len(self.episodes),
            "tasks": [episode.record.instruction],
            "paraphrases": episode.texts()[1:],  # the spec's other phrasings, a column apart
            "length": episode.length,
            "data/chunk_index": chunk,
            "data/file_index": file,
            "dataset_from_index": self.frames,
            "dataset_to_index": self.frames + episode.length,
        }
        for camera in self.source.cameras:
            key = video_key(camera.name)
            pixels = [decode_jpeg(frame, camera) for frame in episode.frames[camera.name]]
            stats[key] = image_stats(pixels)
            self._count_pixels(key, pixels, 255.0)
            start, end = self._videos[key].append(pixels)
            row.update(
                {
                    f"videos/{key}/chunk_index": chunk,
                    f"videos/{key}/file_index": file,
                    f"videos/{key}/from_timestamp": start,
                    f"videos/{key}/to_timestamp": end,
                }
            )
        stats = {key: stats[key] for key in _stats_order(self.source, stats)}
        self.episode_stats.append(stats)
        row.update(episode_stats_columns(stats))
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

    def _count_pixels(self, key: str, frames, scale: float) -> None:
        self.pixel_counts.add(key, sampled_frames(frames))
        self.pixel_scales[key] = scale

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
        self._data = pq.ParquetWriter(path, self.schema, compression="snappy")
        self._data_bytes = 0
        for camera in self.source.cameras:
            key = video_key(camera.name)
            path = self.root / VIDEO_PATH.format(video_key=key, chunk_index=chunk, file_index=file)
            self._videos[key] = VideoFile(path, *self.video_sizes[key], self.source.fps, self.codec)


def _frame_table(
    episode: SourceEpisode,
    states: np.ndarray,
    subtasks: list[str] | None,
    source: Source,
    schema: pa.Schema,
    indices: tuple[int, int, int],
) -> pa.Table:
    """indices: the episode's index, its first frame's global index, its task_index."""
    episode_index, first_index, task_index = indices
    steps = np.arange(episode.length, dtype=np.int64)
    columns = {
        "observation.state": _list_column(states),
        ACTION_KEY: _list_column(episode.actions),
    }
    for camera in source.cameras:
        if camera.depth:
            columns[depth_key(camera.name)] = _png_column(episode.depth[camera.name])
        if camera.segmentation != "none":
            columns[segmentation_key(camera.name)] = _png_column(episode.segmentation[camera.name])
    if subtasks is not None:
        columns[SUBTASK_FEATURE] = pa.array(subtasks, pa.string())
    columns.update(
        {
            "timestamp": pa.array((steps / source.fps).astype(np.float32)),
            "frame_index": pa.array(steps),
            "episode_index": pa.array(np.full(episode.length, episode_index, dtype=np.int64)),
            "index": pa.array(first_index + steps),
            "task_index": pa.array(np.full(episode.length, task_index, dtype=np.int64)),
        }
    )
    return pa.table(columns, schema=schema)


def _column_stats(
    episode: SourceEpisode,
    states: np.ndarray,
    source: Source,
    table: pa.Table,
    writer: _LeRobotWriter,
) -> dict[str, Stats]:
    """Statistics of the episode's parquet columns (LeRobot computes them for every feature
    but text); every frame's values and sampled pixels also go to `writer`'s accumulators."""
    stats = {
        "observation.state": feature_stats(states),
        ACTION_KEY: feature_stats(episode.actions),
    }
    writer.frame_columns.add("observation.state", states)
    writer.frame_columns.add(ACTION_KEY, episode.actions)
    for name in ("timestamp", "frame_index", "episode_index", "index", "task_index"):
        values = table.column(name).to_numpy()
        stats[name] = feature_stats(values)
        writer.frame_columns.add(name, values)
    # Depth keeps millimetres (LeRobot leaves depth unscaled); 8-bit labels / 255, as LeRobot's
    # loader (ToTensor) gives them; 16-bit labels as they are.
    for camera in source.cameras:
        if camera.depth:
            planes = [_png_plane(data) for data in episode.depth[camera.name]]
            stats[depth_key(camera.name)] = image_stats(planes, 1.0)
            writer._count_pixels(depth_key(camera.name), planes, 1.0)
        if camera.segmentation != "none":
            planes = [_png_plane(data) for data in episode.segmentation[camera.name]]
            scale = 255.0 if segmentation_bits(camera.segmentation) == 8 else 1.0
            stats[segmentation_key(camera.name)] = image_stats(planes, scale)
            writer._count_pixels(segmentation_key(camera.name), planes, scale)
    return stats


def _stats_order(source: Source, stats: dict[str, Stats]) -> list[str]:
    # LeRobot's order: the features (videos first, as info.json lists them), then the defaults.
    videos = [video_key(camera.name) for camera in source.cameras]
    rest = [key for key in stats if key not in videos]
    defaults = ["timestamp", "frame_index", "episode_index", "index", "task_index"]
    return videos + [k for k in rest if k not in defaults] + defaults


def _png_column(pngs: tuple[bytes, ...]) -> pa.Array:
    """PNG frames -> datasets' Image storage, struct<bytes, path>, the bytes as the shards hold
    them (lossless)."""
    return pa.array(
        [{"bytes": data, "path": None} for data in pngs],
        pa.struct([("bytes", pa.binary()), ("path", pa.string())]),
    )


def _png_plane(data: bytes) -> np.ndarray:
    """A depth or label PNG -> [H, W, 1] as stored (uint8 or uint16)."""
    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image)[..., None]


def _list_column(values: np.ndarray) -> pa.Array:
    """[T, D] float32 -> a fixed_size_list<float32>[D] column of T rows, the values bit for bit."""
    _, dim = values.shape
    return pa.FixedSizeListArray.from_arrays(
        pa.array(np.ascontiguousarray(values, np.float32).reshape(-1)), dim
    )
