"""The metadata of a LeRobot v3.0 export: the layout's paths, info, stats, tasks and episodes.

    the source's cameras and layouts -> the data parquet's features and schema
                                                          frame_features, data_schema
    the writer's totals (episodes rows with their stats/* columns, tasks, frames, files,
    per-episode statistics)
      -> meta/episodes/chunk-000/file-000.parquet, meta/tasks.parquet
      -> meta/stats.json: the episodes' statistics aggregated      demofactory.shards.lerobot_stats
      -> meta/info.json: features (video info probed from the first file), totals, paths  _info

What each file holds is described in `demofactory.shards.export_lerobot`'s module docstring.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from demofactory.shards.export_source import Source, has_subtasks
from demofactory.shards.format import ACTION_KEY, dumps_json
from demofactory.shards.global_stats import FrameColumns, PixelCounts
from demofactory.shards.lerobot_stats import (  # noqa: F401 - also for the other exports, from here
    QUANTILE_KEYS,
    QUANTILES,
    Stats,
    aggregate_stats,
    episode_stats_columns,
    feature_stats,
    image_stats,
    sampled_frames,
    stats_to_json,
)
from demofactory.shards.lerobot_video import probe_video

CODEBASE_VERSION = "v3.0"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
TASKS_PATH = "meta/tasks.parquet"
INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"

INDEX_COLUMNS = ("frame_index", "episode_index", "index", "task_index")
SUBTASK_FEATURE = "subtask"  # the frame's subtask instruction (spec subtasks[i].instruction)


def video_key(camera: str) -> str:
    """The LeRobot feature of a camera, e.g. ``observation.images.agentview``."""
    return f"observation.images.{camera}"


def depth_key(camera: str) -> str:
    """A camera's depth feature, named as LeRobot names depth cameras: ``..._depth``."""
    return f"{video_key(camera)}_depth"


def segmentation_key(camera: str) -> str:
    """A camera's segmentation feature, ``observation.images.<camera>_seg``."""
    return f"{video_key(camera)}_seg"


def frame_features(source: Source) -> dict[str, dict[str, Any]]:
    """The info.json features stored in the data parquet, in column order: state, action,
    depth and segmentation images (PNG, as the shards hold them), timestamp, the indices."""
    features: dict[str, dict[str, Any]] = {}
    for key, layout in (
        ("observation.state", source.state_layout),
        (ACTION_KEY, source.action_layout),
    ):
        names = [name if size == 1 else f"{name}_{i}" for name, size in layout for i in range(size)]
        features[key] = {"dtype": "float32", "shape": [len(names)], "names": names}
    image_names = ["height", "width", "channels"]
    for camera in source.cameras:
        shape = [camera.height, camera.width, 1]
        if camera.depth:
            features[depth_key(camera.name)] = {
                "dtype": "image",
                "shape": shape,
                "names": image_names,
                "info": {"is_depth_map": True, "depth_unit": "mm"},
            }
        if camera.segmentation != "none":
            features[segmentation_key(camera.name)] = {
                "dtype": "image",
                "shape": shape,
                "names": image_names,
                "info": {"is_depth_map": False, "segmentation": camera.segmentation},
            }
    if any(has_subtasks(record) for record in source.records):
        # the frame's subtask instruction: a second task column, as text (LeRobot's string
        # feature), so that split and merge, which renumber task_index, leave it right
        features[SUBTASK_FEATURE] = {"dtype": "string", "shape": [1], "names": None}
    features["timestamp"] = {"dtype": "float32", "shape": [1], "names": None}
    for name in INDEX_COLUMNS:
        features[name] = {"dtype": "int64", "shape": [1], "names": None}
    return features


def hf_feature(feature: Mapping[str, Any]) -> dict[str, Any]:
    """A feature as ``datasets.Features.to_dict`` writes it (LeRobot's
    ``get_hf_features_from_features``, datasets 4.x)."""
    if feature["dtype"] == "image":
        return {"_type": "Image"}
    value = {"dtype": feature["dtype"], "_type": "Value"}
    if list(feature["shape"]) == [1]:
        return value
    return {"feature": value, "length": feature["shape"][0], "_type": "List"}


def data_schema(source: Source) -> pa.Schema:
    """The data parquet's schema: fixed_size_list<float>[N] vectors, images as datasets'
    struct<bytes, path>, and the ``huggingface`` metadata `datasets` reads the types from."""
    fields = []
    for key, feature in frame_features(source).items():
        if feature["dtype"] == "image":
            type_ = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
        elif feature["dtype"] == "string":
            type_ = pa.string()
        elif list(feature["shape"]) == [1]:
            type_ = pa.from_numpy_dtype(np.dtype(feature["dtype"]))
        else:
            type_ = pa.list_(pa.from_numpy_dtype(np.dtype(feature["dtype"])), feature["shape"][0])
        fields.append(pa.field(key, type_))
    hf = {"info": {"features": {k: hf_feature(f) for k, f in frame_features(source).items()}}}
    return pa.schema(fields, metadata={b"huggingface": json.dumps(hf).encode("utf-8")})


class ImageStats:
    """Per-channel statistics of RGB frames scaled to [0, 1], accumulated exactly in float64
    over every frame (no quantiles). Kept for the GR00T export; the LeRobot export uses
    `image_stats` per episode."""

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


class WrittenFiles(Protocol):
    """What the export's writer (`demofactory.shards.export_lerobot._LeRobotWriter`) knows at the
    end."""

    root: Path  # the export being built
    chunk_size: int  # files per chunk folder
    data_limit: float  # bytes: a data file rolls over past this
    video_limit: float  # bytes: ... or a video past this
    tasks: Mapping[str, int]  # instruction or paraphrase -> task_index
    episodes: Sequence[Mapping[str, Any]]  # the episodes rows
    frames: int  # over all episodes
    codec: str  # the videos' encoder
    video_sizes: Mapping[str, tuple[int, int]]  # video key -> (width, height), even
    episode_stats: Sequence[Mapping[str, Stats]]  # per episode: feature -> its statistics
    frame_columns: FrameColumns  # every frame of the vector and scalar features
    pixel_counts: PixelCounts  # the sampled pixels of the image features, counted
    pixel_scales: Mapping[str, float]  # image feature -> what its pixels are divided by


def write_meta(root: Path, source: Source, writer: WrittenFiles) -> None:
    """meta/episodes, meta/tasks.parquet, meta/stats.json and meta/info.json under `root`.

    meta/stats.json aggregates the episodes' statistics as LeRobot does (`aggregate_stats`),
    with the quantiles computed over all frames (the sampled pixels for images) instead of
    averaged over the episodes."""
    (root / "meta").mkdir(parents=True, exist_ok=True)
    episodes_path = root / EPISODES_PATH.format(chunk_index=0, file_index=0)
    episodes_path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(writer.episodes), episodes_path)
    pq.write_table(_tasks_table(writer.tasks), root / TASKS_PATH)
    lerobot_stats = stats_to_json(global_quantiles(aggregate_stats(writer.episode_stats), writer))
    (root / STATS_PATH).write_text(dumps_json(lerobot_stats, indent=4) + "\n", encoding="utf-8")
    info = _info(source, writer)
    (root / INFO_PATH).write_text(dumps_json(info, indent=4) + "\n", encoding="utf-8")


def global_quantiles(stats: dict[str, Stats], writer: WrittenFiles) -> dict[str, Stats]:
    """`stats` with q01..q99 of every feature replaced by exact quantiles over all frames."""
    qs = dict(zip(QUANTILE_KEYS, QUANTILES, strict=True))
    for key in writer.frame_columns.keys():
        if key in stats:
            found = writer.frame_columns.quantiles(key, list(qs.values()))
            stats[key].update({name: found[q] for name, q in qs.items()})
    for key in writer.pixel_counts.keys():
        if key in stats:
            scale = writer.pixel_scales[key]
            found = writer.pixel_counts.quantiles(key, list(qs.values()), scale)
            stats[key].update({name: found[q].reshape(-1, 1, 1) for name, q in qs.items()})
    return stats


def _tasks_table(tasks: Mapping[str, int]) -> pa.Table:
    """task -> task_index, as pandas' ``DataFrame(index=Index(tasks, name="task")).to_parquet``
    writes it."""
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


def _info(source: Source, writer: WrittenFiles) -> dict[str, Any]:
    features: dict[str, Any] = {}
    for camera in source.cameras:
        key = video_key(camera.name)
        width, height = writer.video_sizes[key]
        features[key] = {
            "dtype": "video",
            "shape": [height, width, 3],
            "names": ["height", "width", "channels"],
            "info": probe_video(
                writer.root / VIDEO_PATH.format(video_key=key, chunk_index=0, file_index=0),
                codec=writer.codec,
            ),
        }
    features.update(frame_features(source))
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
