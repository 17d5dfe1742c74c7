"""Dataset statistics merged as shards finish: the driver's side of `demofactory.shards.stats`.

    a shard committed ──► its sidecar (the worker's partial statistics; the tar if the sidecar
        is missing or stale) ──► merged into one PartialStats per key
    the end ──► `result(listed)`: the merge, completed with listed shards not merged yet, or
        redone from the listed shards when one merged is no longer listed

The merge is exact and order-free (`demofactory.shards.partial_stats`), so the result has the bytes
that
`compute_stats` over the same shards gives, whichever path it took. Parts are merged `BATCH` at a
time (`merge_batch`: one fit and one sum a dimension instead of one a part).
Memory: one merged sketch a key, up to `BATCH` parts waiting, and the name and checksum of each
shard merged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from demofactory.shards.format import ACTION_KEY, STATE_KEY, DatasetError, shards_dir
from demofactory.shards.partial_stats import BINS, DimSketch, PartialStats
from demofactory.shards.stats import KeyStats, _key_stats, load_sidecar, read_partial_stats

BATCH = 16


def merge_batch(sketches: Sequence[DimSketch]) -> DimSketch:
    """The histogram of the union of all parts: `merge_sketches` folded over them, in one step.

    The same bins: a fold ends at the smallest width >= every part's at which the union fits in
    BINS bins (fitting at width 2**k implies fitting at 2**(k+1)), which is where this starts
    and stops.
    """
    k = max(s.k for s in sketches)
    while True:
        lo = min(s.lo >> min(k - s.k, 63) for s in sketches)
        hi = max((s.lo + s.span - 1) >> min(k - s.k, 63) for s in sketches)
        if hi - lo < BINS:
            break
        k += 1
    counts = np.zeros(hi - lo + 1, dtype=np.int64)
    for sketch in sketches:
        part = sketch.rebinned(k)
        counts[part.lo - lo : part.lo - lo + part.span] += part.counts
    return DimSketch(k, lo, counts)


def merge_parts(parts: Sequence[PartialStats]) -> PartialStats:
    """`PartialStats.merge` folded over `parts` (at least one, equal widths)."""
    if len(parts) == 1:
        return parts[0]
    return PartialStats(
        sum(p.count for p in parts),
        tuple(sum(v) for v in zip(*(p.sums for p in parts), strict=True)),
        tuple(sum(v) for v in zip(*(p.squares for p in parts), strict=True)),
        np.minimum.reduce([p.min for p in parts]),
        np.maximum.reduce([p.max for p in parts]),
        tuple(merge_batch(column) for column in zip(*(p.sketches for p in parts), strict=True)),
    )


class RunningStats:
    """Partial statistics of `keys` over the shards `add`ed so far."""

    def __init__(self, dataset_dir: Path, keys: Sequence[str] = (ACTION_KEY, STATE_KEY)):
        self.dataset_dir, self.keys = Path(dataset_dir), tuple(keys)
        self.merged: dict[str, str] = {}  # shard name -> the sha256 merged
        self._parts: dict[str, PartialStats] | None = None  # merged so far
        self._waiting: list[dict[str, PartialStats]] = []  # read, merged BATCH at a time
        self._dims: dict[str, int] | None = None
        self._stale = False  # a shard was merged twice: only a merge from scratch is right

    def add(self, name: str, sha256: str) -> None:
        """Merge shard `name`'s statistics (its sidecar when it names `sha256`, else its tar).

        A damaged shard raises `DatasetError` and is left out (`result` tries it again).
        """
        if name in self.merged:
            self._stale = True
            return
        path = shards_dir(self.dataset_dir) / name
        part = load_sidecar(path, self.keys, sha256) or read_partial_stats(path, self.keys)
        dims = {k: part[k].dims for k in self.keys}
        if self._dims is not None and dims != self._dims:
            widths = {k: (self._dims[k], dims[k]) for k in self.keys}
            raise DatasetError(f"{path}: array widths {widths} differ from earlier shards")
        self._dims = dims
        self._waiting.append(part)
        self.merged[name] = sha256
        if len(self._waiting) >= BATCH:
            self._merge_waiting()

    def _merge_waiting(self) -> None:
        if not self._waiting:
            return
        parts = ([self._parts] if self._parts is not None else []) + self._waiting
        self._parts = {k: merge_parts([p[k] for p in parts]) for k in self.keys}
        self._waiting = []

    def result(self, listed: Mapping[str, str]) -> dict[str, KeyStats]:
        """The statistics of exactly the shards `listed` (name -> sha256, at least one)."""
        if not listed:
            raise DatasetError(f"{self.dataset_dir}: statistics need at least one shard")
        if self._stale or any(listed.get(n) != sha for n, sha in self.merged.items()):
            self.merged, self._parts, self._stale = {}, None, False
            self._waiting, self._dims = [], None
        for name in sorted(set(listed) - set(self.merged)):
            self.add(name, listed[name])
        self._merge_waiting()
        return {k: _key_stats(p) for k, p in self._parts.items()}
