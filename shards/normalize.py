"""Normalization of state and actions with the statistics of stats.json, and its inverse.

stats.json (`DatasetStats`: mean, std, q01, q99 per key)
  -> Normalizer(mode, stats).normalize(key, x [..., D]) -> float32 [..., D]
  -> Normalizer.unnormalize(key, y) -> x again (for quantile: where not clipped)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from demofactory.shards.format import STATS_FILENAME, DatasetError
from demofactory.shards.stats import DatasetStats

NORMALIZATIONS = ("none", "mean_std", "quantile")
STD_FLOOR = 1e-6  # also floors q99 - q01: a constant dimension must not divide by zero


@dataclass(frozen=True, eq=False)
class Normalizer:
    """Maps state and actions to normalized values and back, from stats.json.

    mean_std: ``(x - mean) / max(std, 1e-6)``.
    quantile: ``2 * (x - q01) / max(q99 - q01, 1e-6) - 1``, clipped to [-1, 1].
    none:     the identity.
    Inputs are [..., D] arrays; outputs float32 of the same shape.
    """

    mode: str
    stats: DatasetStats | None
    # A mixed-robot dataset's per-robot statistics (stats.json `embodiments`): robot -> its own
    per_embodiment: Mapping[str, DatasetStats] = field(default_factory=dict)

    def for_embodiment(self, embodiment: str) -> Normalizer:
        """The normalizer of one embodiment's steps: its own statistics when stats.json has
        them, else this one (the dataset's)."""
        stats = self.per_embodiment.get(embodiment)
        if stats is None or self.mode == "none":
            return self
        return Normalizer(self.mode, stats)

    def __post_init__(self) -> None:
        if self.mode not in NORMALIZATIONS:
            raise ValueError(
                f"normalization must be one of {list(NORMALIZATIONS)}, got {self.mode!r}"
            )
        if self.mode != "none" and self.stats is None:
            raise ValueError(
                f"normalization={self.mode!r} needs stats.json; pass stats=DATASET_DIR "
                "or normalization='none'"
            )

    def normalize(self, key: str, x: np.ndarray) -> np.ndarray:
        """`x` [..., D] of `key` ("action", "state") -> float32 [..., D]."""
        if self.mode == "none":
            return np.asarray(x, dtype=np.float32)
        s = self._arrays(key, x)
        x = np.asarray(x, dtype=np.float64)
        if self.mode == "mean_std":
            y = (x - s["mean"]) / np.maximum(s["std"], STD_FLOOR)
        else:
            y = np.clip(
                2.0 * (x - s["q01"]) / np.maximum(s["q99"] - s["q01"], STD_FLOOR) - 1.0, -1.0, 1.0
            )
        return y.astype(np.float32)

    def unnormalize(self, key: str, y: np.ndarray) -> np.ndarray:
        """The inverse of `normalize` (for quantile: of the unclipped part) -> float32 [..., D]."""
        if self.mode == "none":
            return np.asarray(y, dtype=np.float32)
        s = self._arrays(key, y)
        y = np.asarray(y, dtype=np.float64)
        if self.mode == "mean_std":
            x = y * np.maximum(s["std"], STD_FLOOR) + s["mean"]
        else:
            x = (y + 1.0) / 2.0 * np.maximum(s["q99"] - s["q01"], STD_FLOOR) + s["q01"]
        return x.astype(np.float32)

    def _arrays(self, key: str, x: np.ndarray) -> dict[str, np.ndarray]:
        if key not in self.stats.keys:
            raise DatasetError(
                f"{STATS_FILENAME} has no statistics for {key!r}; it has {sorted(self.stats.keys)}"
            )
        entry = self.stats.keys[key]
        arrays = {
            name: np.asarray(getattr(entry, name), dtype=np.float64)
            for name in ("mean", "std", "q01", "q99")
        }
        if np.shape(x)[-1:] != arrays["mean"].shape:
            raise DatasetError(
                f"{STATS_FILENAME}: {key!r} has {arrays['mean'].shape[0]} dimensions, "
                f"the data has shape {np.shape(x)}"
            )
        return arrays
