"""Normalisation statistics over a whole dataset: mean, std, min, max, q01, q99, count.

    worker: write_shard ──► shard-000003.tar, then shard-000003.stats.json
            (`demofactory.shards.partial_stats` of its action and state rows, with the tar's sha256)
    driver: the listed shards ──► per shard its sidecar where the checksum matches, else its
            <key>.<k>.npy members read back (images skipped) ──► merged one at a time
            ──► KeyStats per key ──► DIR/stats.json

The driver's work per shard is one small file and one merge, whatever the dataset's size, and
its memory one merged sketch per key. Mean and std are exact (rounded once); q01/q99 come from
the merged histogram, within `QUANTILE_ERROR_OF_RANGE` of each dimension's range of the exact
quantiles. Merging is exact and order-free, so the bytes of stats.json do not depend on which
worker wrote which shard or in what order they finished, nor on whether sidecars were used.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
from demofactory.shards.format import (
    ACTION_KEY,
    STATE_KEY,
    STATS_FILENAME,
    DatasetError,
    atomic_output,
    dumps_json,
    read_json_file,
    shards_dir,
    write_text_atomic,
)
from demofactory.shards.partial_stats import PartialStats, from_bytes, partial_stats, to_bytes
from demofactory.shards.tario import read_samples

SIDECAR_SUFFIX = ".stats.json"


@dataclass(frozen=True)
class KeyStats:
    """Statistics of one key (e.g. ``action``), each list holding one float per dimension D.

    std is the population standard deviation (ddof=0); q01/q99 are the 1% and
    99% quantiles (numpy's default linear interpolation) from a merged histogram, within
    `QUANTILE_ERROR_OF_RANGE` of (max - min); count is the number of time steps the
    statistics were computed over.
    """

    mean: list[float]
    std: list[float]
    min: list[float]
    max: list[float]
    q01: list[float]
    q99: list[float]
    count: int

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of the seven fields."""
        return asdict(self)

    @classmethod
    def from_json(cls, entry: Mapping[str, Any]) -> KeyStats:
        """Parse one key's entry of stats.json; wrong fields raise `DatasetError`."""
        expected = {f.name for f in fields(cls)}
        if set(entry) != expected:
            raise DatasetError(
                f"stats entry has fields {sorted(entry)}, expected {sorted(expected)}"
            )
        return cls(**{name: entry[name] for name in expected})


@dataclass(frozen=True)
class DatasetStats:
    """Contents of stats.json: the per-key statistics and the extra top-level entries."""

    keys: Mapping[str, KeyStats]
    extra: Mapping[str, Any]


def compute_stats(
    dataset_dir: Path,
    shard_names: Sequence[str],
    keys: Sequence[str] = (ACTION_KEY, STATE_KEY),
    checksums: Mapping[str, str] | None = None,
) -> dict[str, KeyStats]:
    """Statistics per key and dimension over every step of the listed shards.

    With `checksums` (shard name -> the manifest's sha256), a shard's sidecar stands in for
    its tar when it records that checksum; without, every tar is read (what `verify` does).
    Each key must have the same width [D] in every shard. Raises `DatasetError` if the shards
    hold no steps or the arrays are inconsistent.
    """
    if not shard_names:
        raise DatasetError(f"{dataset_dir}: compute_stats needs at least one shard")
    merged: dict[str, PartialStats] | None = None
    for name in sorted(shard_names):
        path = shards_dir(dataset_dir) / name
        sha = None if checksums is None else checksums.get(name)
        part = (sha is not None and load_sidecar(path, keys, sha)) or read_partial_stats(path, keys)
        if merged is not None:
            widths = {k: (merged[k].dims, part[k].dims) for k in keys}
            if any(a != b for a, b in widths.values()):
                raise DatasetError(f"{path}: array widths {widths} differ from earlier shards")
        merged = part if merged is None else {k: merged[k].merge(part[k]) for k in keys}
    return {k: _key_stats(p) for k, p in merged.items()}


def sidecar_path(shard_path: Path) -> Path:
    """``shard-000003.tar`` -> ``shard-000003.stats.json``, beside it."""
    return shard_path.with_name(shard_path.name.removesuffix(".tar") + SIDECAR_SUFFIX)


def save_sidecar(shard_path: Path, parts: Mapping[str, PartialStats], sha256: str) -> None:
    """Write a shard's partial statistics beside it, atomically, naming the tar's checksum."""
    body = to_bytes(dict(parts))
    with atomic_output(sidecar_path(shard_path)) as f:
        f.write(json.dumps({"sha256": sha256}).encode() + b"\n" + body)


def load_sidecar(
    shard_path: Path, keys: Sequence[str], sha256: str
) -> dict[str, PartialStats] | None:
    """The sidecar's statistics if it exists and was written for the tar with `sha256`; None
    otherwise (a missing, stale or damaged sidecar only costs reading the tar)."""
    try:
        head, _, body = sidecar_path(shard_path).read_bytes().partition(b"\n")
        if json.loads(head).get("sha256") != sha256:
            return None
        return from_bytes(body, keys, str(sidecar_path(shard_path)))
    except (OSError, ValueError, AttributeError, DatasetError):
        return None


def read_partial_stats(path: Path, keys: Sequence[str]) -> dict[str, PartialStats]:
    """The partial statistics of one shard tar's `keys`, from its ``<key>.npy`` members."""
    collected: dict[str, list[np.ndarray]] = {k: [] for k in keys}
    _read_arrays(path, collected)
    counts = {k: len(rows) for k, rows in collected.items()}
    if len(set(counts.values())) != 1 or 0 in counts.values():
        raise DatasetError(f"{path}: steps per key differ or are zero: {counts}")
    return {k: partial_stats(np.stack(rows)) for k, rows in collected.items()}


def _read_arrays(path: Path, collected: dict[str, list[np.ndarray]]) -> None:
    # The shard's samples through the strict reader (a corrupt tar raises TarFormatError),
    # keeping only the "<k>.npy" members: WebDataset's key ends at the first dot.
    wanted = {f"{k}.npy": k for k in collected}
    for sample in read_samples(path, wanted.__contains__):
        for suffix, data in sample.members.items():
            try:
                array = np.load(io.BytesIO(data), allow_pickle=False)
            except ValueError as exc:
                raise DatasetError(f"{path}: {sample.key}.{suffix}: {exc}") from None
            rows = collected[wanted[suffix]]
            expected = rows[0].shape if rows else array.shape
            if array.ndim != 1 or array.shape != expected:
                raise DatasetError(
                    f"{path}: {sample.key}.{suffix} has shape {array.shape}, "
                    f"expected 1-D like {expected}"
                )
            rows.append(array)


def _key_stats(part: PartialStats) -> KeyStats:
    """The stats.json entry of one key's merged statistics."""
    mean, std = part.mean_std()
    return KeyStats(
        mean=mean,
        std=std,
        min=part.min.tolist(),
        max=part.max.tolist(),
        q01=part.quantiles(0.01),
        q99=part.quantiles(0.99),
        count=part.count,
    )


def save_stats(dataset_dir: Path, stats: Mapping[str, KeyStats], extra: Mapping[str, Any]) -> None:
    """Write ``DIR/stats.json`` atomically as ``{"action": {...}, "state": {...}, **extra}``.

    `extra` holds dataset totals such as ``{"episodes": n, "transitions": n}``;
    a name in both `stats` and `extra` raises ValueError.
    """
    clashes = sorted(set(stats) & set(extra))
    if clashes:
        raise ValueError(f"save_stats: extra entries {clashes} clash with statistics keys")
    document = {key: key_stats.to_json() for key, key_stats in stats.items()}
    document.update(extra)
    write_text_atomic(Path(dataset_dir) / STATS_FILENAME, dumps_json(document, indent=2) + "\n")


def load_stats(dataset_dir: Path) -> DatasetStats | None:
    """Read ``DIR/stats.json``; None if it does not exist.

    A top-level object carrying exactly the `KeyStats` fields is a key's
    statistics; every other entry is returned in `extra`. Malformed JSON or a
    bad entry raises `DatasetError` naming the file.
    """
    path = Path(dataset_dir) / STATS_FILENAME
    if not path.exists():
        return None
    document = read_json_file(path)
    if not isinstance(document, dict):
        raise DatasetError(f"{path}: expected a JSON object")
    stat_fields = {f.name for f in fields(KeyStats)}
    keys: dict[str, KeyStats] = {}
    extra: dict[str, Any] = {}
    for name, value in document.items():
        if isinstance(value, dict) and set(value) == stat_fields:
            keys[name] = KeyStats.from_json(value)
        else:
            extra[name] = value
    return DatasetStats(keys=keys, extra=extra)
