"""Mergeable statistics: computed per shard by the worker that wrote it, merged by the driver.

    shard's steps [n, D] float64 ──► PartialStats (exact sums, min, max, count; a histogram
        sketch per dimension) ──► to_bytes / from_bytes (the worker's result, a sidecar file)
    PartialStats ⊕ PartialStats ⊕ ... (any order, any grouping) ──► KeyStats of stats.json

Why not the streaming formulas (Welford, Chan): their floating-point result depends on the
order in which shards are merged, and shards finish in any order on a cluster; stats.json must
not depend on that (a resumed run writes the same bytes). So the sums are exact: every float64
is m * 2**e with an integer mantissa, so sum(x) and sum(x*x) are held as Python integers scaled
by a fixed power of two, and merging adds integers. Mean and variance are then computed once,
in exact rational arithmetic, and rounded once.

Quantiles come from a histogram per dimension on a grid aligned to zero with bin width
W = 2**k: bin j holds [j*W, (j+1)*W). Two histograms merge exactly: the finer is re-binned to
the coarser width by an integer shift, and the width doubles until the occupied span fits in
`BINS` bins. The result depends only on the union of the data (k ends at the largest of the
parts' widths and the smallest width the union fits in), not on the order of merges. Why not
a library sketch (KLL, t-digest): their compaction is randomized or order-dependent.

Error bound (tested against numpy's exact quantiles): a quantile is found in its bin and
interpolated linearly inside it, so it is off by at most one bin width W, and the smallest width
the data fits in gives W < 2 * (max - min) / (BINS - 2): with BINS = 2048, under 0.1 % of the
dimension's range (`QUANTILE_ERROR_OF_RANGE`), or one bin of the smallest width (`MIN_WIDTH`,
2**-1074) where that is larger (subnormal ranges).
"""

from __future__ import annotations

import base64
import json
import math
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from demofactory.shards.format import DatasetError

BINS = 2048
QUANTILE_ERROR_OF_RANGE = 2.0 / (BINS - 2)  # the bound above, as a share of max - min
# Sums are integers in units of 2**-SCALE (x) and 2**-(2*SCALE) (x*x): a float64 is m * 2**(e-53)
# with an integer m and e >= -1073 (frexp's exponent), so SCALE = 1073 + 53 + 1 keeps every shift
# positive.
SCALE = 1127
_MANTISSA_BITS = 53
_MIN_EXPONENT = -1074  # the smallest bin width: 2**-1074
MIN_WIDTH = 2.0**_MIN_EXPONENT
FORMAT = "demofactory.partial_stats/1"


@dataclass(frozen=True, eq=False)
class DimSketch:
    """One dimension's histogram: counts[i] values in [(lo + i) * 2**k, (lo + i + 1) * 2**k)."""

    k: int
    lo: int
    counts: np.ndarray  # int64 [n_bins], n_bins <= BINS; first and last non-zero

    def rebinned(self, k: int) -> DimSketch:
        """The same values at width 2**k (k >= self.k): bins merge by an integer shift."""
        if k == self.k:
            return self
        # indices stay under 2**62 in magnitude (`_start_k`): an arithmetic shift is the floor
        # of the division, and 63 bits shift any of them to 0 or -1
        index = (np.arange(len(self.counts), dtype=np.int64) + self.lo) >> min(k - self.k, 63)
        lo = int(index[0])
        counts = np.bincount(index - lo, weights=self.counts)  # float64: exact below 2**53
        return DimSketch(k, lo, counts.astype(np.int64))

    @property
    def span(self) -> int:
        return len(self.counts)


def _fit_k(lo_value: float, hi_value: float, k: int) -> int:
    """The smallest width exponent >= k at which [lo_value, hi_value] spans at most BINS bins."""
    while math.floor(hi_value / 2.0**k) - math.floor(lo_value / 2.0**k) + 1 > BINS:
        k += 1
    return k


def _start_k(values: np.ndarray) -> int:
    """A width exponent close to the fit from below, and large enough that bin indices stay
    within int64 (|x| / 2**k < 2**62)."""
    lo, hi = float(values.min()), float(values.max())
    biggest = max(abs(lo), abs(hi))
    k = _MIN_EXPONENT if biggest == 0 else max(_MIN_EXPONENT, math.frexp(biggest)[1] - 62)
    if math.isfinite(hi - lo) and hi > lo:  # hi - lo < 2**e: start below the fit
        k = max(k, math.frexp(hi - lo)[1] - BINS.bit_length() - 1)
    return k


def sketch_of(values: np.ndarray) -> DimSketch:
    """The histogram of one dimension's values [n] float64 (n >= 1, finite)."""
    k = _fit_k(float(values.min()), float(values.max()), _start_k(values))
    index = np.floor(values / 2.0**k).astype(np.int64)
    lo = int(index.min())
    return DimSketch(k, lo, np.bincount(index - lo).astype(np.int64))


def merge_sketches(a: DimSketch, b: DimSketch) -> DimSketch:
    """The histogram of the union of both parts' values (exact; order-independent)."""
    k = max(a.k, b.k)
    while True:
        ra, rb = a.rebinned(k), b.rebinned(k)
        lo = min(ra.lo, rb.lo)
        hi = max(ra.lo + ra.span, rb.lo + rb.span)
        if hi - lo <= BINS:
            break
        k += 1
    counts = np.zeros(hi - lo, dtype=np.int64)
    counts[ra.lo - lo : ra.lo - lo + ra.span] += ra.counts
    counts[rb.lo - lo : rb.lo - lo + rb.span] += rb.counts
    return DimSketch(k, lo, counts)


def sketch_quantile(sketch: DimSketch, q: float, lo: float, hi: float) -> float:
    """The q-quantile (numpy's linear definition: rank q * (n - 1)) from the histogram, within
    one bin width of the exact value; clamped to the exact [lo, hi] of the data.

    The values at the two integer ranks around q * (n - 1) are each placed within their bin,
    then interpolated as numpy does, so a gap in the data between them costs no accuracy.
    """
    cumulative = np.cumsum(sketch.counts)
    rank = q * (int(cumulative[-1]) - 1)  # 0-based position among the sorted values
    below = math.floor(rank)
    value = _ranked(sketch, cumulative, below)
    if rank > below:
        value += (rank - below) * (_ranked(sketch, cumulative, below + 1) - value)
    return float(min(max(value, lo), hi))


def _ranked(sketch: DimSketch, cumulative: np.ndarray, r: int) -> float:
    """The estimated r-th smallest value (0-based): its bin's values taken as spread evenly,
    the j-th of m at (j + 0.5) / m of the bin."""
    i = int(np.searchsorted(cumulative, r, side="right"))  # the first bin with cum > r
    before = int(cumulative[i - 1]) if i > 0 else 0
    return (sketch.lo + i + (r - before + 0.5) / int(sketch.counts[i])) * 2.0**sketch.k


# ---------------------------------------------------------------- exact sums


def _exact_sums(values: np.ndarray) -> tuple[int, int]:
    """(sum of x, sum of x*x) of [n] float64, as integers in units of 2**-SCALE and
    2**-(2*SCALE)."""
    mantissa, exponent = np.frexp(values)  # x = mantissa * 2**exponent, 0.5 <= |mantissa| < 1
    m = (mantissa * 2.0**_MANTISSA_BITS).astype(np.int64)  # exact: 53 significant bits
    shift = exponent.astype(np.int64) - _MANTISSA_BITS + SCALE  # x = m * 2**(shift - SCALE)
    total, squares = 0, 0
    for s in np.unique(shift):
        part = m[shift == s].astype(object)
        total += int(part.sum()) << int(s)
        squares += int((part * part).sum()) << (2 * int(s))
    return total, squares


@dataclass(frozen=True, eq=False)
class PartialStats:
    """Statistics of one key over some steps: exact sums, min, max, count and sketches, per
    dimension; `merge` of two is the statistics of both parts."""

    count: int
    sums: tuple[int, ...]  # sum of x, units of 2**-SCALE
    squares: tuple[int, ...]  # sum of x*x, units of 2**-(2*SCALE)
    min: np.ndarray  # float64 [D]
    max: np.ndarray  # float64 [D]
    sketches: tuple[DimSketch, ...]

    @property
    def dims(self) -> int:
        return len(self.sums)

    def merge(self, other: PartialStats) -> PartialStats:
        if other.dims != self.dims:
            raise DatasetError(
                f"partial statistics of {self.dims} and {other.dims} dimensions cannot merge"
            )
        return PartialStats(
            self.count + other.count,
            tuple(a + b for a, b in zip(self.sums, other.sums, strict=True)),
            tuple(a + b for a, b in zip(self.squares, other.squares, strict=True)),
            np.minimum(self.min, other.min),
            np.maximum(self.max, other.max),
            tuple(map(merge_sketches, self.sketches, other.sketches)),
        )

    def mean_std(self) -> tuple[list[float], list[float]]:
        """Per-dimension mean and population std (ddof=0), each rounded once from exact values."""
        means, stds = [], []
        for total, squares in zip(self.sums, self.squares, strict=True):
            mean = Fraction(total, self.count << SCALE)
            variance = Fraction(squares, self.count << (2 * SCALE)) - mean * mean
            means.append(float(mean))
            stds.append(_sqrt(variance))
        return means, stds

    def quantiles(self, q: float) -> list[float]:
        return [
            sketch_quantile(s, q, lo, hi)
            for s, lo, hi in zip(self.sketches, self.min.tolist(), self.max.tolist(), strict=True)
        ]


def _sqrt(value: Fraction) -> float:
    """sqrt of a non-negative Fraction, correctly rounded to within an ulp via integer sqrt."""
    if value <= 0:
        return 0.0
    # scale so that the integer square root carries ~60 significant bits
    shift = max(0, 128 - (value.numerator.bit_length() - value.denominator.bit_length()))
    shift += shift % 2
    root = math.isqrt((value.numerator << shift) // value.denominator)
    return math.ldexp(float(root), -shift // 2)


def partial_stats(values: np.ndarray) -> PartialStats:
    """The statistics of [n, D] values (n >= 1, finite); raises `DatasetError` otherwise."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2 or values.shape[0] == 0:
        raise DatasetError(f"partial statistics need [n >= 1, D] values, got {values.shape}")
    if not np.isfinite(values).all():
        raise DatasetError("partial statistics need finite values; found NaN or inf")
    sums = [_exact_sums(values[:, d]) for d in range(values.shape[1])]
    return PartialStats(
        count=values.shape[0],
        sums=tuple(s for s, _ in sums),
        squares=tuple(q for _, q in sums),
        min=values.min(axis=0),
        max=values.max(axis=0),
        sketches=tuple(sketch_of(values[:, d]) for d in range(values.shape[1])),
    )


def merge_all(parts: Iterable[PartialStats]) -> PartialStats:
    """The statistics of every part together (any order gives the same result)."""
    merged = None
    for part in parts:
        merged = part if merged is None else merged.merge(part)
    if merged is None:
        raise DatasetError("no partial statistics to merge")
    return merged


# ---------------------------------------------------------------- bytes


def to_bytes(parts: dict[str, PartialStats]) -> bytes:
    """Each key's statistics as JSON (deterministic bytes: a zip's timestamps are not): sums as
    hex integers (they exceed int64), floats in shortest round-trip form, counts deflated."""
    document = {"format": FORMAT, "keys": {}}
    for key, p in parts.items():
        document["keys"][key] = {
            "count": p.count,
            "sums": [hex(v) for v in p.sums],
            "squares": [hex(v) for v in p.squares],
            "min": p.min.tolist(),
            "max": p.max.tolist(),
            "sketches": [[s.k, s.lo, *_pack(s.counts)] for s in p.sketches],
        }
    return json.dumps(document, separators=(",", ":")).encode()


def _pack(counts: np.ndarray) -> tuple[str, str]:
    """Counts in the smallest unsigned type that holds them, deflated, as base64 text."""
    dtype = next(t for t in ("<u1", "<u2", "<u4", "<u8") if counts.max() <= np.iinfo(t).max)
    return dtype, base64.b64encode(zlib.compress(counts.astype(dtype).tobytes(), 6)).decode()


def _unpack(dtype: str, text: str) -> np.ndarray:
    if dtype not in ("<u1", "<u2", "<u4", "<u8"):
        raise ValueError(f"counts type {dtype!r}")
    return np.frombuffer(zlib.decompress(base64.b64decode(text)), dtype).astype(np.int64)


def from_bytes(data: bytes, keys: Sequence[str], source: str = "partial statistics") -> dict:
    """The inverse of `to_bytes` for `keys`; a damaged or foreign file raises `DatasetError`
    naming `source`."""
    try:
        document = json.loads(data)
        if document.get("format") != FORMAT:
            raise ValueError(f"format is {document.get('format')!r}, expected {FORMAT!r}")
        out = {}
        for key in keys:
            entry = document["keys"][key]
            out[key] = PartialStats(
                count=int(entry["count"]),
                sums=tuple(int(v, 16) for v in entry["sums"]),
                squares=tuple(int(v, 16) for v in entry["squares"]),
                min=np.asarray(entry["min"], dtype=np.float64),
                max=np.asarray(entry["max"], dtype=np.float64),
                sketches=tuple(
                    DimSketch(int(k), int(lo), _unpack(dtype, text))
                    for k, lo, dtype, text in entry["sketches"]
                ),
            )
        return out
    except (ValueError, KeyError, TypeError, AttributeError, zlib.error) as exc:
        raise DatasetError(f"{source}: not readable partial statistics ({exc})") from None
