"""Write one shard: whole episodes as WebDataset samples, one a time step (or one an episode).

    episodes (sorted by index)
      -> a stream of (member name, bytes), per step: cameras' .jpg, depth and segmentation .png
         (cameras that have them), action/state/sim_state .npy, meta.json
         (layout "episode": one sample an episode,
         `demofactory.shards.shard_layout.episode_members`)
      -> tar members with fixed metadata (mtime 0, uid 0, mode 0o444)
      -> .shard-000003.tar.tmp-<pid>  --fsync, os.replace-->  shard-000003.tar
      -> its action/state partial statistics (also per embodiment,
      `demofactory.shards.embodiment_stats`)
         -> shard-000003.stats.json (`demofactory.shards.stats`)

The tar is written as the stdlib `tarfile` writes it (its headers, patched per member; tested
byte for byte), not with webdataset's writer, so that equal content gives equal bytes: a
retried shard is rewritten identically and its checksum in the manifest still holds.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
from demofactory.shards.embodiment_stats import embodiment_rows
from demofactory.shards.fileio import sha256_file
from demofactory.shards.format import (
    ACTION_KEY,
    META_KEY,
    SIM_STATE_KEY,
    STATE_KEY,
    DatasetError,
    Episode,
    atomic_output,
    depth_member,
    sample_key,
    segmentation_member,
    shard_name,
)
from demofactory.shards.partial_stats import partial_stats
from demofactory.shards.shard_layout import (
    EPISODE_LAYOUT,
    STEP_LAYOUT,
    check_shard_layout,
    episode_members,
    episode_meta,
    step_meta_bytes,
)
from demofactory.shards.stats import save_sidecar

# Fixed tar header fields: nothing about when or by whom a shard was written
# may reach its bytes.
_TAR_FORMAT = tarfile.PAX_FORMAT  # PAX rather than USTAR: no 100-character name limit
_TAR_MTIME = 0
_TAR_MODE = 0o444


@dataclass(frozen=True)
class ShardInfo:
    """What the manifest records about one finished shard.

    name:     file name inside ``DIR/shards`` (``shard-000003.tar``)
    samples:  number of time steps (the step layout's WebDataset samples; in either layout)
    episodes: number of whole episodes
    bytes:    file size in bytes
    sha256:   hex digest of the file
    """

    name: str
    samples: int
    episodes: int
    bytes: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        """The manifest entry: a JSON-ready dict of the five fields."""
        return asdict(self)

    @classmethod
    def from_json(cls, entry: Any) -> ShardInfo:
        """Parse a manifest entry; missing, unknown or mistyped fields raise `DatasetError`."""
        if not isinstance(entry, dict):
            raise DatasetError(f"shard entry must be an object, got {type(entry).__name__}")
        expected = {f.name for f in fields(cls)}
        if set(entry) != expected:
            raise DatasetError(
                f"shard entry has fields {sorted(entry)}, expected {sorted(expected)}"
            )
        for name in ("samples", "episodes", "bytes"):
            if isinstance(entry[name], bool) or not isinstance(entry[name], int) or entry[name] < 0:
                raise DatasetError(f"shard entry {name!r} must be an int >= 0, got {entry[name]!r}")
        for name in ("name", "sha256"):
            if not isinstance(entry[name], str) or not entry[name]:
                raise DatasetError(
                    f"shard entry {name!r} must be a non-empty string, got {entry[name]!r}"
                )
        return cls(**entry)


def write_shard(
    episodes: Sequence[Episode], shards_dir: Path, shard_index: int, layout: str = STEP_LAYOUT
) -> ShardInfo:
    """Write `episodes` as ``shards_dir/shard-<shard_index>.tar``, atomically and reproducibly.

    Every episode must have ``episode.shard == shard_index`` and a distinct
    index; they are written whole, sorted by index. The shard appears under its
    final name only once complete; on failure nothing is left behind (a previous
    file of the same name is kept). An empty `episodes` writes a valid, empty tar.
    `layout`: "step" (one sample a time step) or "episode" (one an episode,
    `demofactory.shards.shard_layout`); readers read both as steps.

    Returns the `ShardInfo` of the written file, with the sha256 of its bytes;
    its `samples` counts time steps in either layout.
    """
    check_shard_layout(layout)
    ordered = _check_episodes(episodes, shard_index)
    path = Path(shards_dir) / shard_name(shard_index)
    members = _shard_members if layout != EPISODE_LAYOUT else _episode_layout_members
    with atomic_output(path) as f:
        written = 0
        for member, data in members(ordered):
            written += _write_member(f, member, data)
        _end_archive(f, written)
    info = ShardInfo(
        name=path.name,
        samples=sum(ep.length for ep in ordered),
        episodes=len(ordered),
        bytes=path.stat().st_size,
        sha256=sha256_file(path),
    )
    if ordered:  # the driver merges these instead of reading the shard (demofactory.shards.stats)
        rows = {
            ACTION_KEY: np.concatenate([ep.actions for ep in ordered]),
            STATE_KEY: np.concatenate([ep.states for ep in ordered]),
            **embodiment_rows(ordered),  # per robot: stats.json's embodiments
        }
        save_sidecar(path, {k: partial_stats(v) for k, v in rows.items()}, info.sha256)
    return info


def _check_episodes(episodes: Sequence[Episode], shard_index: int) -> list[Episode]:
    seen: set[int] = set()
    for ep in episodes:
        if not isinstance(ep, Episode):
            raise TypeError(f"write_shard takes Episode records, got {type(ep).__name__}")
        if ep.shard != shard_index:
            raise ValueError(
                f"episode {ep.index} belongs to shard {ep.shard}, not shard {shard_index}"
            )
        if ep.index in seen:
            raise ValueError(f"episode index {ep.index} appears twice in shard {shard_index}")
        seen.add(ep.index)
    return sorted(episodes, key=lambda ep: ep.index)


def _shard_members(episodes: Sequence[Episode]) -> Iterator[tuple[str, bytes]]:
    # A stream of (member name, data); all members of one sample are adjacent,
    # which is what WebDataset's grouping by key relies on.
    for ep in episodes:
        cameras = sorted(ep.images)
        depth, segmentation = sorted(ep.depth), sorted(ep.segmentation)
        meta = episode_meta(ep)
        for t in range(ep.length):
            key = sample_key(ep.index, t)
            for camera in cameras:
                yield f"{key}.{camera}.jpg", ep.images[camera][t]
            for camera in depth:
                yield f"{key}.{depth_member(camera)}", ep.depth[camera][t]
            for camera in segmentation:
                yield f"{key}.{segmentation_member(camera)}", ep.segmentation[camera][t]
            yield f"{key}.{ACTION_KEY}.npy", _npy_bytes(ep.actions[t])
            yield f"{key}.{STATE_KEY}.npy", _npy_bytes(ep.states[t])
            yield f"{key}.{SIM_STATE_KEY}.npy", _npy_bytes(ep.sim_states[t])
            yield f"{key}.{META_KEY}.json", step_meta_bytes(meta, t)


def _episode_layout_members(episodes: Sequence[Episode]) -> Iterator[tuple[str, bytes]]:
    for ep in episodes:
        yield from episode_members(ep)


_NPY_HEADERS: dict[tuple[str, tuple[int, ...]], bytes] = {}


def _npy_bytes(array: np.ndarray) -> bytes:
    """`np.save`'s bytes of `array`. A C-ordered array's are its header, the same for every
    array of its dtype and shape (kept here: building it is most of np.save's cost on a
    7-float action), then its data."""
    array = np.asarray(array)
    if not array.flags.c_contiguous or array.dtype.hasobject or array.dtype.names:
        return _np_save(array)
    key = (array.dtype.str, array.shape)
    header = _NPY_HEADERS.get(key)
    if header is None:
        empty = np.zeros(array.shape, array.dtype)
        header = _np_save(empty)[: -empty.nbytes or None]
        _NPY_HEADERS[key] = header
    return header + array.tobytes()


def _np_save(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def _tar_info(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = _TAR_MTIME
    info.mode = _TAR_MODE
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.type = tarfile.REGTYPE
    return info


# A tar archive as `tarfile.open(mode="w", format=_TAR_FORMAT, encoding="utf-8")` and `addfile`
# write it, byte for byte (tests/shards/test_shards.py compares them), without tarfile's
# per-member costs (a copy of the TarInfo, every field checked for PAX, the data copied in
# chunks): a step writes 6 or more members of a few hundred bytes, and tarfile spent ~0.1 ms on
# each. A member whose header the template cannot hold (a name over 100 bytes, or not ASCII)
# takes tarfile's own header.
_BLOCK = tarfile.BLOCKSIZE
_NAME_BYTES = 100


def _header_template() -> bytearray:
    header = bytearray(_tar_info("x", 0).tobuf(_TAR_FORMAT, "utf-8", "surrogateescape"))
    if len(header) != _BLOCK:  # pragma: no cover - a tarfile that needs more for "x"
        raise RuntimeError("tarfile's header for a plain member is not one block")
    header[148:156] = b" " * 8  # the checksum is summed with its own field as spaces
    return header


_HEADER = _header_template()


def _member_header(name: str, size: int) -> bytes:
    """The header `addfile` writes for `name` of `size` bytes (_tar_info's fixed fields)."""
    encoded = name.encode("ascii") if name.isascii() else b""
    if not encoded or len(encoded) > _NAME_BYTES or size >= 8**11:
        return _tar_info(name, size).tobuf(_TAR_FORMAT, "utf-8", "surrogateescape")
    header = _HEADER.copy()
    header[0:_NAME_BYTES] = encoded.ljust(_NAME_BYTES, b"\0")
    header[124:136] = b"%011o\0" % size
    header[148:155] = b"%06o\0" % sum(header)
    return bytes(header)


def _write_member(f, name: str, data: bytes) -> int:
    """Write one member (header, data, NUL padding to a block); returns the bytes written."""
    header = _member_header(name, len(data))
    pad = -len(data) % _BLOCK
    f.write(header)
    f.write(data)
    if pad:
        f.write(bytes(pad))
    return len(header) + len(data) + pad


def _end_archive(f, written: int) -> None:
    """Two zero blocks, then zeros to a whole record, as `TarFile.close` ends an archive."""
    written += 2 * _BLOCK
    f.write(bytes(2 * _BLOCK) + bytes(-written % tarfile.RECORDSIZE))
