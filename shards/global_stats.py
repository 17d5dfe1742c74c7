"""Statistics over every frame of an export, not averages of the episodes' own.

    per episode: a [T] or [T, D] column          FrameColumns.add
      -> all frames of the feature (float64)      FrameColumns.stats: mean, std, min, max and
                                                  exact quantiles (numpy's linear method, as
                                                  GR00T's own calculate_dataset_statistics)
    per episode: [H, W, C] integer frames         PixelCounts.add: per channel, the count of
                 (the frames LeRobot samples)       each integer value (uint8 or uint16)
      -> exact quantiles of those pixels          PixelCounts.quantiles

Exact, not a sketch: a feature's frames are held as float64, 8 bytes a value (a million frames
of a 16-wide state: 128 MB); images are integers, so a count per value is exact in fixed memory.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

GR00T_STAT_KEYS = ("mean", "std", "min", "max", "q01", "q99")  # GR00T's DatasetStatisticalValues


class FrameColumns:
    """Every frame of some [T] / [T, D] features, episode by episode."""

    def __init__(self) -> None:
        self._parts: dict[str, list[np.ndarray]] = {}

    def add(self, key: str, values: np.ndarray) -> None:
        values = np.asarray(values, dtype=np.float64)
        self._parts.setdefault(key, []).append(values.reshape(len(values), -1))

    def keys(self) -> list[str]:
        return list(self._parts)

    def values(self, key: str) -> np.ndarray:
        """[N, D] float64: the feature's frames over all episodes, in order."""
        return np.concatenate(self._parts[key])

    def quantiles(self, key: str, qs: Sequence[float]) -> dict[float, np.ndarray]:
        """q -> [D]: numpy's linear-interpolation quantile over all frames."""
        values = self.values(key)
        found = np.quantile(values, list(qs), axis=0)
        return {q: found[i] for i, q in enumerate(qs)}

    def gr00t_stats(self, key: str) -> dict[str, list[float]]:
        """GR00T's statistics of the feature: mean, std, min, max, q01, q99, each [D]."""
        values = self.values(key)
        quantiles = np.quantile(values, [0.01, 0.99], axis=0)
        stats = {
            "mean": values.mean(axis=0),
            "std": values.std(axis=0),
            "min": values.min(axis=0),
            "max": values.max(axis=0),
            "q01": quantiles[0],
            "q99": quantiles[1],
        }
        return {name: stats[name].tolist() for name in GR00T_STAT_KEYS}


class PixelCounts:
    """Per channel, how often each integer value occurs in the frames given (exact)."""

    def __init__(self) -> None:
        self._counts: dict[str, np.ndarray] = {}

    def add(self, key: str, frames: Sequence[np.ndarray]) -> None:
        for frame in frames:
            pixels = np.asarray(frame)
            if not np.issubdtype(pixels.dtype, np.integer):
                raise TypeError(f"{key}: pixel counts need integer frames, got {pixels.dtype}")
            pixels = pixels.reshape(-1, pixels.shape[-1] if pixels.ndim == 3 else 1)
            size = 1 << (8 * pixels.dtype.itemsize)
            counts = np.stack(
                [np.bincount(pixels[:, c], minlength=size) for c in range(pixels.shape[1])]
            )
            if key in self._counts and self._counts[key].shape[1] < size:
                grown = np.zeros((counts.shape[0], size), dtype=np.int64)
                grown[:, : self._counts[key].shape[1]] = self._counts[key]
                self._counts[key] = grown
            current = self._counts.setdefault(key, np.zeros_like(counts, dtype=np.int64))
            current[:, : counts.shape[1]] += counts

    def keys(self) -> list[str]:
        return list(self._counts)

    def quantiles(self, key: str, qs: Sequence[float], scale: float) -> dict[float, np.ndarray]:
        """q -> [C]: the linear-interpolation quantile of each channel's pixels, / `scale`."""
        counts = self._counts[key]
        out = {q: np.empty(len(counts)) for q in qs}
        for c, row in enumerate(counts):
            cumulative = np.cumsum(row)
            n = int(cumulative[-1])
            for q in qs:
                h = (n - 1) * q
                lo = int(np.floor(h))
                hi = min(lo + 1, n - 1)
                v_lo = int(np.searchsorted(cumulative, lo, side="right"))
                v_hi = int(np.searchsorted(cumulative, hi, side="right"))
                out[q][c] = (v_lo + (h - lo) * (v_hi - v_lo)) / scale
        return out
