"""Normalisation statistics over a whole dataset: mean, std, min, max, q01, q99, count.

    shard names (sorted) -> samples (shards.tario, strict), their <key>.<k>.npy members
      for each requested k (images skipped)
      -> per key: [N, D] float64 of all steps -> KeyStats per dimension -> DIR/stats.json

Statistics are computed exactly over all steps (quantiles need all of them),
after the shards are written, so they do not depend on which worker wrote
which shard. Shards are read in name order so the floating-point sums, and
hence the bytes of stats.json, do not depend on the order the names are given.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from shards.format import (
    ACTION_KEY,
    STATE_KEY,
    STATS_FILENAME,
    DatasetError,
    dumps_json,
    read_json_file,
    shards_dir,
    write_text_atomic,
)
from shards.tario import read_samples


@dataclass(frozen=True)
class KeyStats:
    """Statistics of one key (e.g. ``action``), each list holding one float per dimension D.

    std is the population standard deviation (ddof=0); q01/q99 are the 1% and
    99% quantiles (numpy's default linear interpolation); count is the number of
    time steps the statistics were computed over.
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
) -> dict[str, KeyStats]:
    """Statistics per key and dimension over every step of the listed shards.

    Reads only the ``<key>.<k>.npy`` members of ``DIR/shards/<name>``; JPEG
    frames are skipped without decoding. Each key must appear in every sample
    with the same shape [D]. Raises `DatasetError` if the shards hold no steps
    or the arrays are inconsistent.
    """
    if not shard_names:
        raise DatasetError(f"{dataset_dir}: compute_stats needs at least one shard")
    collected: dict[str, list[np.ndarray]] = {k: [] for k in keys}
    for name in sorted(shard_names):
        _read_arrays(shards_dir(dataset_dir) / name, collected)
    counts = {k: len(rows) for k, rows in collected.items()}
    if len(set(counts.values())) != 1 or 0 in counts.values():
        raise DatasetError(f"{dataset_dir}: steps per key differ or are zero: {counts}")
    return {k: _key_stats(np.stack(rows).astype(np.float64)) for k, rows in collected.items()}


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
            # Compared with the first array of any shard, so shards must agree too.
            expected = rows[0].shape if rows else array.shape
            if array.ndim != 1 or array.shape != expected:
                raise DatasetError(
                    f"{path}: {sample.key}.{suffix} has shape {array.shape}, "
                    f"expected 1-D like {expected}"
                )
            rows.append(array)


def _key_stats(values: np.ndarray) -> KeyStats:
    """Per-dimension statistics of [N, D] float64 values."""
    return KeyStats(
        mean=values.mean(axis=0).tolist(),
        std=values.std(axis=0).tolist(),
        min=values.min(axis=0).tolist(),
        max=values.max(axis=0).tolist(),
        q01=np.quantile(values, 0.01, axis=0).tolist(),
        q99=np.quantile(values, 0.99, axis=0).tolist(),
        count=int(values.shape[0]),
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
