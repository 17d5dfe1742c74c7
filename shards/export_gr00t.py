"""Export a dataset for NVIDIA GR00T N1.x fine-tuning: LeRobot v2.1 plus ``meta/modality.json``.

    DIR: manifest.json, episodes.jsonl, shards                 export_source.load_source
      -> SourceEpisode: actions [T, A], states [T, S],
         JPEG frames per camera                                export_source.read_episodes
      -> per episode: data/chunk-CCC/episode_EEEEEE.parquet,
         videos/chunk-CCC/<video key>/episode_EEEEEE.mp4
         (lerobot_video.VideoFile), its episodes and
         episodes_stats lines                                  _Gr00tWriter.add
      -> meta/info.json, meta/episodes.jsonl, meta/episodes_stats.jsonl, meta/tasks.jsonl,
         meta/stats.json, meta/modality.json                   _write_meta
      -> .OUT.tmp-<pid>  --fsync, rename-->  OUT

What is written (the "GR00T LeRobot" flavour of LeRobot v2.1, as NVIDIA/Isaac-GR00T's
getting_started/LeRobot_compatible_data_schema.md and demo_data/robot_sim.PickNPlace lay it out):

- ``data/chunk-CCC/episode_EEEEEE.parquet``, one file an episode (chunk ``E // chunks_size``):
  one row a frame: ``observation.state`` and ``action`` (lists of float32, bit-equal to the
  shards), ``timestamp`` (float32, frame_index / fps), ``annotation.human.task_description``
  (int64: the index in meta/tasks.jsonl of the episode's instruction), ``task_index`` (the
  same), ``frame_index``, ``episode_index``, ``index`` (global) (int64).
- ``videos/chunk-CCC/observation.images.<camera>/episode_EEEEEE.mp4``: one H.264 (yuv420p)
  video a camera and episode at the dataset fps, frame n at n / fps.
- ``meta/modality.json``: ``state`` and ``action`` split into the source's layout parts
  (dataset_info.json ``state.layout`` / ``action.layout``: e.g. eef_pos [0, 3), eef_quat_xyzw
  [3, 7), gripper_qpos [7, 9)), each with ``start``/``end`` (Python slice), ``dtype``, a
  ``rotation_type`` for rotations (``quaternion``, ``axis_angle``) and, for actions,
  ``absolute`` (false for ``delta_*`` parts); ``video``: ``<camera>`` ->
  ``{"original_key": "observation.images.<camera>"}``; ``annotation``:
  ``{"human.task_description": {}}``.
- ``meta/tasks.jsonl``: ``{"task_index", "task"}``: every instruction and paraphrase, in order
  of first use. ``meta/episodes.jsonl``: ``{"episode_index", "tasks", "length"}``, tasks = the
  episode's instruction first, then its paraphrases (provenance ``paraphrases``, when given),
  plus the source's ``demofactory_episode_index`` and ``demofactory_seed``.
- ``meta/episodes_stats.jsonl``: per episode (LeRobot v2.1) ``{"episode_index", "stats"}``,
  every feature's min, max, mean, std, count and q01..q99 as `demofactory.shards.lerobot_stats`
  computes
  them (images per channel in [0, 1], [3, 1, 1]); ``meta/stats.json``: those aggregated over
  the episodes (LeRobot's ``aggregate_stats``). GR00T reads mean/std/min/max/q01/q99.
- ``meta/info.json``: LeRobot v2.1 (``codebase_version`` "v2.1", totals, paths, features) plus
  ``embodiment_tag``, the tag to fine-tune with (``--embodiment-tag``; GR00T's own for a robot
  it was not pretrained on is ``new_embodiment``).

Choices as in `demofactory.shards.export_lerobot`: episodes renumbered 0..N-1 in shard order, odd
frame
sizes padded to even, depth and segmentation not exported.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
from demofactory.shards.format import ACTION_KEY, STATE_KEY, DatasetError, ExportError, dumps_json
from demofactory.shards.global_stats import FrameColumns
from demofactory.shards.lerobot_meta import video_key
from demofactory.shards.lerobot_stats import feature_stats, image_stats, stats_to_json
from demofactory.shards.lerobot_video import VideoFile, even, probe_video
from demofactory.shards.quaternions import make_continuous, to_scalar_first

CODEBASE_VERSION = "v2.1"
DATA_PATH = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
VIDEO_PATH = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
STATE_FEATURE = "observation.state"
ANNOTATION = "human.task_description"  # modality.json key; the column is annotation.<key>
ANNOTATION_COLUMN = f"annotation.{ANNOTATION}"
# the frame's subtask instruction (spec subtasks[i].instruction), a second annotation key
SUBTASK_ANNOTATION = "human.subtask_description"
SUBTASK_COLUMN = f"annotation.{SUBTASK_ANNOTATION}"
INDEX_COLUMNS = ("frame_index", "episode_index", "index", "task_index")
# GR00T's EmbodimentTag values per release (gr00t/data/embodiment_tags.py at tag n1.5-release
# and on branch release, N1.6): a tag one release lacks is refused by that release's loader.
EMBODIMENTS = {
    "N1.5": ("new_embodiment", "gr1", "oxe_droid", "agibot_genie1"),
    "N1.6": (
        "new_embodiment",
        "gr1",
        "oxe_droid",
        "oxe_google",
        "oxe_widowx",
        "libero_panda",
        "robocasa_panda_omron",
        "unitree_g1",
        "behavior_r1_pro",
    ),
}
KNOWN_EMBODIMENTS = tuple(dict.fromkeys(tag for tags in EMBODIMENTS.values() for tag in tags))
DEFAULT_EMBODIMENT = "new_embodiment"


def default_embodiment(info: Mapping[str, Any]) -> str:
    """The tag a dataset exports under without --embodiment: `gr1` when every robot of it is
    a GR-1 (robosuite's GR1ArmsOnly, GR1FixedLowerBody: GR00T's own GR-1 tag, which both
    releases know), else `new_embodiment`."""
    robots = [r for r in str(info.get("robot", "")).split("+") if r]
    return "gr1" if robots and all(r.startswith("GR1") for r in robots) else DEFAULT_EMBODIMENT


# GR00T's default video backend in both releases (and one that reads every frame of these
# files at its timestamp); LeRobot's "pyav" is no backend name GR00T knows
VIDEO_BACKEND = "torchcodec"
# float64: GR00T's demo data declares it; as float32, 124/20 is 6.1999998 and a decoder that
# picks the frame played at t returns frame 123
TIMESTAMP_DTYPE = "float64"


def data_schema(subtasks: bool) -> pa.Schema:
    """The episode parquet's columns; `subtasks`: with the subtask annotation column."""
    return pa.schema(
        [
            (STATE_FEATURE, pa.list_(pa.float32())),
            (ACTION_KEY, pa.list_(pa.float32())),
            ("timestamp", pa.float64()),
            (ANNOTATION_COLUMN, pa.int64()),
        ]
        + ([(SUBTASK_COLUMN, pa.int64())] if subtasks else [])
        + [(name, pa.int64()) for name in INDEX_COLUMNS]
    )


def export_gr00t(
    dataset_dir: Path,
    out_dir: Path,
    *,
    embodiment: str | None = None,
    chunk_size: int = 1000,
    video_codec: str = "libx264",
    actions: ActionRelabeler | None = None,
) -> dict[str, Any]:
    """Write the dataset at `dataset_dir` as a GR00T LeRobot (v2.1) dataset in `out_dir`.

    embodiment: the embodiment tag recorded in meta/info.json, one of `KNOWN_EMBODIMENTS`;
        None: `default_embodiment` (gr1 for a GR-1 dataset, else new_embodiment)
    chunk_size: episodes per ``chunk-CCC`` folder (info.json ``chunks_size``)
    video_codec: an FFmpeg encoder PyAV has (libx264: H.264)
    actions: relabel the actions (`demofactory.shards.action_features`; None: the shards' own)

    `out_dir` must not exist or be empty; the export is built beside it and renamed into place
    once complete, so a failed export leaves nothing. Bad arguments raise `ExportError`,
    unreadable datasets `DatasetError`. Returns a summary: out_dir, codebase_version,
    embodiment, episodes, frames, tasks, video_keys.
    """
    if embodiment is not None:  # a bad tag is refused before the dataset is read
        _check_options(embodiment, chunk_size, video_codec)
    source = load_source(dataset_dir)
    if embodiment is None:
        embodiment = default_embodiment(source.info)
        _check_options(embodiment, chunk_size, video_codec)
    source, episodes = relabeled(source, read_episodes(source), actions)
    subtasks = any(has_subtasks(record) for record in source.records)
    modality = modality_json(source, subtasks)
    out = check_out_dir(Path(out_dir))
    with staged_export(out, source) as tmp:
        writer = _Gr00tWriter(tmp, source, chunk_size, video_codec, subtasks)
        for episode in episodes:
            writer.add(episode)
        _write_meta(tmp, source, writer, modality, embodiment)
        write_report(tmp, actions)
    return {
        "out_dir": out,
        "codebase_version": CODEBASE_VERSION,
        "embodiment": embodiment,
        "episodes": len(writer.episodes),
        "frames": writer.frames,
        "tasks": len(writer.tasks),
        "video_keys": [video_key(camera.name) for camera in source.cameras],
    }


def _check_options(embodiment: str, chunk_size: int, video_codec: str) -> None:
    if embodiment not in KNOWN_EMBODIMENTS:
        per_release = "; ".join(f"{r}: {', '.join(tags)}" for r, tags in EMBODIMENTS.items())
        raise ExportError(
            f"--embodiment {embodiment!r} is no GR00T embodiment tag (fine-tuning a robot GR00T "
            f"was not pretrained on: new_embodiment; {per_release})"
        )
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ExportError(
            f"chunk_size must be an int >= 1 (episodes per chunk folder), got {chunk_size!r}"
        )
    check_video_codec(video_codec)


# ---------------------------------------------------------------- modality.json


def _rotation_type(name: str) -> str | None:
    if "quat" in name:
        return "quaternion"
    if "axis_angle" in name:
        return "axis_angle"
    if "rot6d" in name or "rotation_6d" in name:
        return "rotation_6d"
    return None


def gr00t_state_layout(layout: Sequence[tuple[str, int]]) -> list[list]:
    """The state layout as exported: ``*_xyzw`` quaternion parts written scalar-first, renamed
    ``*_wxyz``."""
    return to_scalar_first(np.zeros((0, sum(n for _, n in layout))), layout)[1]


def gr00t_states(states: np.ndarray, layout: Sequence[tuple[str, int]]) -> np.ndarray:
    """An episode's [T, S] states as exported: quaternions continuous (each in the hemisphere
    of the step before), then scalar-first (wxyz), as GR00T's rotation transforms read them."""
    return to_scalar_first(make_continuous(states, layout), layout)[0]


def _parts(layout: Sequence[tuple[str, int]], action: bool) -> dict[str, dict[str, Any]]:
    parts: dict[str, dict[str, Any]] = {}
    start = 0
    for name, size in layout:
        entry: dict[str, Any] = {"start": start, "end": start + size}
        rotation = _rotation_type(name)
        if rotation is not None:
            entry["rotation_type"] = rotation
        if action:
            # a two-arm layout prefixes each part with its arm: right_delta_pos is relative too
            entry["absolute"] = not _unprefixed(name).startswith("delta")
        entry["dtype"] = "float32"
        parts[name] = entry
        start += size
    return parts


ARMS = ("right", "left")  # a two-arm layout's part prefixes (dataset_info.json, right first)


def _unprefixed(name: str) -> str:
    for arm in ARMS:
        if name.startswith(f"{arm}_"):
            return name[len(arm) + 1 :]
    return name


def arm_parts(parts: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]] | None:
    """A two-arm layout's parts grouped as GR00T's bimanual embodiments name them:
    ``<arm>_arm`` (eef pose or its delta) and ``<arm>_hand`` (the gripper), each a contiguous
    slice with one ``absolute`` flag; None when the parts are not all arm-prefixed, or a group
    is not contiguous or mixes absolute and relative parts (the fine parts are kept then).
    A merged arm part has no ``rotation_type`` (GR00T applies one to a whole part): the
    quaternion is ``<arm>_arm[3:7]`` (wxyz), the axis-angle ``<arm>_arm[3:6]``."""
    groups: dict[str, dict[str, Any]] = {}
    for name, entry in parts.items():
        arm = next((a for a in ARMS if name.startswith(f"{a}_")), None)
        if arm is None:
            return None
        key = f"{arm}_hand" if _unprefixed(name).startswith("gripper") else f"{arm}_arm"
        group = groups.get(key)
        if group is None:
            groups[key] = {k: v for k, v in entry.items() if k != "rotation_type"}
            continue
        if group["end"] != entry["start"] or group.get("absolute") != entry.get("absolute"):
            return None
        group["end"] = entry["end"]
    if {name.split("_")[0] for name in groups} != set(ARMS):
        return None
    return groups


def modality_json(source: Source, subtasks: bool = False) -> dict[str, Any]:
    """meta/modality.json: state (quaternions as wxyz) and action split along the source's
    layouts, the videos by camera, the task-description annotation and, with `subtasks`, the
    subtask-description one."""
    for key, layout in ((STATE_KEY, source.state_layout), (ACTION_KEY, source.action_layout)):
        names = [name for name, _ in layout]
        if len(set(names)) != len(names) or any(size < 1 for _, size in layout):
            raise DatasetError(
                f"dataset_info.json: {key}.layout needs distinct names and sizes >= 1 "
                f"for modality.json, got {list(layout)}"
            )
    annotation: dict[str, Any] = {ANNOTATION: {}}
    if subtasks:
        annotation[SUBTASK_ANNOTATION] = {}
    state = _parts(gr00t_state_layout(source.state_layout), action=False)
    action = _parts(source.action_layout, action=True)
    return {
        "state": arm_parts(state) or state,
        "action": arm_parts(action) or action,
        "video": {c.name: {"original_key": video_key(c.name)} for c in source.cameras},
        "annotation": annotation,
    }


# ---------------------------------------------------------------- data and videos


class _Gr00tWriter:
    """One parquet file and one mp4 a camera per episode; collects the metadata lines."""

    def __init__(self, root: Path, source: Source, chunk_size: int, codec: str, subtasks: bool):
        self.root, self.source, self.chunk_size, self.codec = root, source, chunk_size, codec
        self.subtasks, self.schema = subtasks, data_schema(subtasks)
        self.tasks: dict[str, int] = {}  # instruction or subtask instruction -> task_index
        self.episodes: list[dict[str, Any]] = []
        self.episodes_stats: list[dict[str, Any]] = []  # per episode: feature -> stats
        self.columns = FrameColumns()  # every frame of the numeric columns: meta/stats.json
        self.frames = 0
        self.video_sizes = {
            video_key(c.name): (even(c.width), even(c.height)) for c in source.cameras
        }

    def _task(self, text: str) -> int:
        return self.tasks.setdefault(text, len(self.tasks))

    def add(self, episode: SourceEpisode) -> None:
        index, chunk = len(self.episodes), len(self.episodes) // self.chunk_size
        task_index = self._task(episode.record.instruction)
        subtask_texts = frame_subtasks(episode) if self.subtasks else None
        subtask_indices = (
            None
            if subtask_texts is None
            else np.array([self._task(t) for t in subtask_texts], dtype=np.int64)
        )
        states = gr00t_states(episode.states, self.source.state_layout)
        columns = _columns(
            episode, states, index, self.frames, task_index, subtask_indices, self.source.fps
        )
        path = self.root / DATA_PATH.format(episode_chunk=chunk, episode_index=index)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table(columns, schema=self.schema), path, compression="snappy")
        numeric = [name for name in self.schema.names if name not in (STATE_FEATURE, ACTION_KEY)]
        stats = {
            STATE_FEATURE: feature_stats(states),
            ACTION_KEY: feature_stats(episode.actions),
            **{name: feature_stats(columns[name].to_numpy()) for name in numeric},
        }
        self.columns.add(STATE_FEATURE, states)
        self.columns.add(ACTION_KEY, episode.actions)
        for name in numeric:
            self.columns.add(name, columns[name].to_numpy())
        for camera in self.source.cameras:
            key = video_key(camera.name)
            pixels = [decode_jpeg(frame, camera) for frame in episode.frames[camera.name]]
            stats[key] = image_stats(pixels)
            video = VideoFile(
                self.root
                / VIDEO_PATH.format(episode_chunk=chunk, video_key=key, episode_index=index),
                *self.video_sizes[key],
                self.source.fps,
                self.codec,
            )
            try:
                video.append(pixels)
            finally:
                video.close()
        row: dict[str, Any] = {
            # the tasks its frames' task_index use (LeRobot's meaning); paraphrases apart
            "tasks": [episode.record.instruction],
            "length": episode.length,
        }
        paraphrases = episode.texts()[1:]
        if paraphrases:
            row["paraphrases"] = paraphrases
        if subtask_texts is not None:
            # GR00T N1.6's episode sub_tasks (its "sub_task" language key): end exclusive
            row["sub_tasks"] = _spans(subtask_texts)
        self.episodes.append(
            {
                "episode_index": index,
                **row,
                "demofactory_episode_index": episode.record.index,
                "demofactory_seed": episode.record.seed,
                # the robot of a mixed-robot dataset's episode (info.json's robot_type joins all)
                **_embodiment(episode.record.provenance),
            }
        )
        self.episodes_stats.append(stats)
        self.frames += episode.length


def _spans(texts: Sequence[str]) -> list[dict[str, Any]]:
    """Per-frame texts -> runs of one text: {"start", "end" (exclusive), "text"}."""
    spans: list[dict[str, Any]] = []
    for t, text in enumerate(texts):
        if spans and spans[-1]["text"] == text:
            spans[-1]["end"] = t + 1
        else:
            spans.append({"start": t, "end": t + 1, "text": text})
    return spans


def _columns(
    episode: SourceEpisode,
    states: np.ndarray,
    episode_index: int,
    first_index: int,
    task_index: int,
    subtask_indices: np.ndarray | None,
    fps: int,
) -> dict[str, pa.Array]:
    steps = np.arange(episode.length, dtype=np.int64)
    tasks = np.full(episode.length, task_index, dtype=np.int64)
    columns = {
        STATE_FEATURE: _list_column(states),
        ACTION_KEY: _list_column(episode.actions),
        # float64 frame_index / fps: round(t * fps) == frame_index exactly
        "timestamp": pa.array(steps / np.float64(fps)),
        ANNOTATION_COLUMN: pa.array(tasks),
    }
    if subtask_indices is not None:
        columns[SUBTASK_COLUMN] = pa.array(subtask_indices)
    columns.update(
        {
            "frame_index": pa.array(steps),
            "episode_index": pa.array(np.full(episode.length, episode_index, dtype=np.int64)),
            "index": pa.array(first_index + steps),
            "task_index": pa.array(tasks),
        }
    )
    return columns


def _list_column(values: np.ndarray) -> pa.Array:
    """[T, D] float32 -> a list<float32> column of T rows, the values bit for bit."""
    rows, dim = values.shape
    offsets = pa.array(np.arange(0, rows * dim + 1, dim, dtype=np.int32))
    return pa.ListArray.from_arrays(
        offsets, pa.array(np.ascontiguousarray(values, np.float32).reshape(-1))
    )


# ---------------------------------------------------------------- meta/


def _jsonl(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    path.write_text("".join(dumps_json(row) + "\n" for row in rows), encoding="utf-8")


def _write_meta(
    root: Path,
    source: Source,
    writer: _Gr00tWriter,
    modality: Mapping[str, Any],
    embodiment: str,
) -> None:
    meta = root / "meta"
    meta.mkdir(parents=True, exist_ok=True)
    _jsonl(meta / "episodes.jsonl", writer.episodes)
    _jsonl(
        meta / "episodes_stats.jsonl",
        [
            {"episode_index": i, "stats": stats_to_json(s)}
            for i, s in enumerate(writer.episodes_stats)
        ],
    )
    _jsonl(meta / "tasks.jsonl", [{"task_index": i, "task": t} for t, i in writer.tasks.items()])
    # GR00T's keys only, over every frame (N1.5 slices each stat per modality: LeRobot's count
    # [1] and q10/q50/q90 broke it); quantiles exact, not averages of the episodes' own
    gr00t_stats = {key: writer.columns.gr00t_stats(key) for key in writer.columns.keys()}
    (meta / "stats.json").write_text(dumps_json(gr00t_stats, indent=4) + "\n", encoding="utf-8")
    (meta / "modality.json").write_text(dumps_json(modality, indent=4) + "\n", encoding="utf-8")
    info = _info(source, writer, embodiment)
    (meta / "info.json").write_text(dumps_json(info, indent=4) + "\n", encoding="utf-8")


def _info(source: Source, writer: _Gr00tWriter, embodiment: str) -> dict[str, Any]:
    features: dict[str, Any] = {}
    for camera in source.cameras:
        key = video_key(camera.name)
        width, height = writer.video_sizes[key]
        first = writer.root / VIDEO_PATH.format(episode_chunk=0, video_key=key, episode_index=0)
        features[key] = {
            "dtype": "video",
            "shape": [height, width, 3],
            "names": ["height", "width", "channels"],
            # LeRobot v2.1 (and GR00T's demo data) name the depth flag video.is_depth_map
            "info": {
                **probe_video(first, codec=writer.codec),
                "video.video_backend": VIDEO_BACKEND,
                "video.is_depth_map": False,
            },
        }
    state_layout = gr00t_state_layout(source.state_layout)
    for key, layout in ((STATE_FEATURE, state_layout), (ACTION_KEY, source.action_layout)):
        names = [name if size == 1 else f"{name}_{i}" for name, size in layout for i in range(size)]
        features[key] = {"dtype": "float32", "shape": [len(names)], "names": names}
    features["timestamp"] = {"dtype": TIMESTAMP_DTYPE, "shape": [1], "names": None}
    features[ANNOTATION_COLUMN] = {"dtype": "int64", "shape": [1], "names": None}
    if writer.subtasks:
        features[SUBTASK_COLUMN] = {"dtype": "int64", "shape": [1], "names": None}
    for name in INDEX_COLUMNS:
        features[name] = {"dtype": "int64", "shape": [1], "names": None}
    episodes = len(writer.episodes)
    return {
        "codebase_version": CODEBASE_VERSION,
        "robot_type": source.info.get("robot"),
        "embodiment_tag": embodiment,
        "total_episodes": episodes,
        "total_frames": writer.frames,
        "total_tasks": len(writer.tasks),
        "total_videos": episodes * len(source.cameras),
        "total_chunks": -(-episodes // writer.chunk_size),
        "chunks_size": writer.chunk_size,
        "fps": source.fps,
        "splits": {"train": f"0:{episodes}"},
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH if source.cameras else None,
        "features": features,
    }


def _embodiment(provenance: Mapping[str, Any]) -> dict[str, str]:
    robot = provenance.get("embodiment")
    return {"demofactory_embodiment": robot} if isinstance(robot, str) and robot else {}
