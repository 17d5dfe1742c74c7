"""The on-disk dataset format: names, the `Episode` record, and atomic writes.

A dataset directory holds::

    DIR/dataset_info.json   schema version, fps, cameras, state/action layout, spec
    DIR/stats.json          per key: mean, std, min, max, q01, q99, count
    DIR/episodes.jsonl      one line an episode: index, shard, length, instruction, seed, provenance
    DIR/manifest.json       one entry a shard: name, samples, episodes, bytes, sha256
    DIR/shards/shard-000000.tar ...

Inside a shard there is one WebDataset sample per time step, keyed
``e00000042_t0007``; its members are ``<key>.<camera>.jpg`` (one per camera),
``<key>.action.npy``, ``<key>.state.npy``, ``<key>.sim_state.npy`` and
``<key>.meta.json``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

SCHEMA_VERSION = 1

SHARDS_DIRNAME = "shards"
DATASET_INFO_FILENAME = "dataset_info.json"
STATS_FILENAME = "stats.json"
EPISODES_FILENAME = "episodes.jsonl"
MANIFEST_FILENAME = "manifest.json"

# Member suffixes besides the cameras; a camera may not take one of these names.
ACTION_KEY = "action"
STATE_KEY = "state"
SIM_STATE_KEY = "sim_state"
META_KEY = "meta"
RESERVED_MEMBER_NAMES = frozenset({ACTION_KEY, STATE_KEY, SIM_STATE_KEY, META_KEY})


class DatasetError(ValueError):
    """A dataset file that is missing a part, malformed, or inconsistent.

    The message names the file and what is wrong with it.
    """


def sample_key(episode_index: int, step: int) -> str:
    """WebDataset key of one time step, e.g. ``e00000042_t0007``.

    No dots: WebDataset splits a member name into key and extension at the
    first dot.
    """
    if episode_index < 0 or step < 0:
        raise ValueError(f"episode_index and step must be >= 0, got {episode_index}, {step}")
    return f"e{episode_index:08d}_t{step:04d}"


def shard_name(shard_index: int) -> str:
    """File name of shard `shard_index` inside ``DIR/shards``, e.g. ``shard-000003.tar``."""
    if shard_index < 0:
        raise ValueError(f"shard_index must be >= 0, got {shard_index}")
    return f"shard-{shard_index:06d}.tar"


def shards_dir(dataset_dir: Path) -> Path:
    """The folder holding a dataset's shard files."""
    return Path(dataset_dir) / SHARDS_DIRNAME


@dataclass(frozen=True, eq=False)  # eq over numpy arrays is ambiguous; compare fields explicitly
class Episode:
    """One whole successful episode, ready to write.

    Arrays are converted on construction to the dtypes below (C-contiguous), so
    that the bytes written do not depend on how the caller built them.

    index:       global episode index, unique in the dataset (gaps allowed), >= 0
    shard:       index of the shard it belongs to, >= 0
    instruction: the language instruction
    seed:        the seed the attempt was generated from
    actions:     [T, A] float32, the actions as executed (e.g. delta OSC + gripper)
    states:      [T, S] float32 proprio state (eef pos, eef quat, gripper qpos, ...)
    sim_states:  [T, N] float64 flattened MuJoCo state (time, qpos, qvel)
    images:      camera name -> T JPEG-encoded frames; may be empty
    provenance:  JSON-serialisable record of where it came from (source demos, placements, ...)
    """

    index: int
    shard: int
    instruction: str
    seed: int
    actions: np.ndarray
    states: np.ndarray
    sim_states: np.ndarray
    images: Mapping[str, Sequence[bytes]]
    provenance: Mapping[str, Any]

    def __post_init__(self) -> None:
        for name in ("index", "shard", "seed"):
            object.__setattr__(self, name, _as_int(name, getattr(self, name)))
        if self.index < 0 or self.shard < 0:
            raise ValueError(f"Episode index and shard must be >= 0, got {self.index}, {self.shard}")
        if not isinstance(self.instruction, str):
            raise TypeError(f"Episode.instruction must be a str, got {type(self.instruction).__name__}")
        for name, dtype in (("actions", np.float32), ("states", np.float32), ("sim_states", np.float64)):
            object.__setattr__(self, name, _as_2d(name, getattr(self, name), dtype))
        object.__setattr__(self, "images", _checked_images(self.images))
        _check_json("Episode.provenance", self.provenance)
        self._check_lengths()

    def _check_lengths(self) -> None:
        lengths = {
            "actions": len(self.actions),
            "states": len(self.states),
            "sim_states": len(self.sim_states),
        }
        lengths.update({f"images[{cam!r}]": len(frames) for cam, frames in self.images.items()})
        expected = lengths["actions"]
        if expected < 1:
            raise ValueError(f"Episode {self.index}: actions has no steps; an episode needs T >= 1")
        for field, n in lengths.items():
            if n != expected:
                raise ValueError(
                    f"Episode {self.index}: {field} has {n} steps but actions has {expected}; "
                    "every per-step field must have the same length T"
                )

    @property
    def length(self) -> int:
        """Number of time steps T."""
        return len(self.actions)


def _as_int(name: str, value: Any) -> int:
    # numpy integers are accepted (seeds often come from a Generator) but stored as
    # Python ints so that json.dumps takes them.
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"Episode.{name} must be an int, got {type(value).__name__}")
    return int(value)


def _as_2d(name: str, value: Any, dtype: type) -> np.ndarray:
    array = np.ascontiguousarray(value, dtype=dtype)
    if array.ndim != 2:
        raise ValueError(f"Episode.{name} must be 2-D [T, D], got shape {array.shape}")
    return array


def _checked_images(images: Mapping[str, Sequence[bytes]]) -> dict[str, tuple[bytes, ...]]:
    checked: dict[str, tuple[bytes, ...]] = {}
    for camera, frames in images.items():
        if not isinstance(camera, str) or not camera or "." in camera or "/" in camera:
            # The camera name becomes part of the member name `<key>.<camera>.jpg`.
            raise ValueError(f"Episode.images: camera name {camera!r} must be non-empty, without '.' or '/'")
        if camera in RESERVED_MEMBER_NAMES:
            raise ValueError(
                f"Episode.images: camera name {camera!r} clashes with a member name; "
                f"reserved: {sorted(RESERVED_MEMBER_NAMES)}"
            )
        frames = tuple(frames)
        for t, frame in enumerate(frames):
            if not isinstance(frame, (bytes, bytearray)):
                raise TypeError(
                    f"Episode.images[{camera!r}][{t}] must be JPEG bytes, got {type(frame).__name__}"
                )
        checked[camera] = tuple(bytes(frame) for frame in frames)
    return checked


def _check_json(what: str, value: Any) -> None:
    try:
        dumps_json(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} must be JSON-serialisable: {exc}") from exc


def dumps_json(value: Any, *, indent: int | None = None) -> str:
    """The one JSON encoding used for dataset files: sorted keys, no NaN/Infinity.

    NaN is not valid JSON and other readers (JS, Rust, jq) reject it, so it fails here.
    """
    return json.dumps(value, sort_keys=True, indent=indent, allow_nan=False)


@contextmanager
def atomic_output(path: Path) -> Iterator[BinaryIO]:
    """Open a temporary file next to `path` for binary writing; rename it to `path` on success.

    The temporary name (``.<name>.tmp-<pid>``) lives in the same directory so that
    `os.replace` is an atomic rename. The data is flushed and fsynced before the
    rename. On any exception the temporary file is removed and the exception
    propagates; `path` is then untouched (absent, or its previous content).
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    # Makes the rename itself durable across a power loss, not just the file data.
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text_atomic(path: Path, text: str) -> None:
    """Write `text` (UTF-8) to `path` atomically: a reader sees the old file or the new one."""
    data = text.encode("utf-8")
    with atomic_output(path) as f:
        f.write(data)


def read_json_file(path: Path) -> Any:
    """Parse a JSON file; malformed content raises `DatasetError` naming the file.

    A missing file raises FileNotFoundError; callers decide whether that is allowed.
    """
    text = Path(path).read_text(encoding="utf-8")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}: malformed JSON: {exc}") from exc
