"""Feature statistics as LeRobot v3.0 (lerobot 0.6.x ``datasets/compute_stats.py``) computes them.

    an episode's column [T] or [T, D]              -> feature_stats: per dimension
    an episode's frames [H, W, C] (sampled)        -> image_stats: per channel, [C, 1, 1]
      -> each: min, max, mean, std, count, q01, q10, q50, q90, q99 (numpy arrays)
    per-episode statistics of a dataset            -> aggregate_stats: meta/stats.json
    per-episode statistics                         -> episode_stats_columns: the
                                                      ``stats/<feature>/<stat>`` columns of
                                                      meta/episodes/*.parquet

Same arithmetic as LeRobot: values in float32 (float64 for integer columns); quantiles from a
5000-bin histogram between min and max, linearly interpolated within a bin; fewer than two rows:
every quantile is the mean. Images: LeRobot's frame sampling (all frames up to 100, then
~T^0.75), frames downsampled past 300 pixels, RGB divided by 255 (depth keeps its units).
Aggregation: count-weighted mean, pooled variance, min of mins, max of maxes, and
count-weighted quantiles (as LeRobot's ``aggregate_stats``: an approximation for quantiles;
the exports replace those with exact ones over all frames, `demofactory.shards.global_stats`).

Also used by the GR00T export (`demofactory.shards.export_gr00t`); names here are kept stable.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
QUANTILE_KEYS = tuple(f"q{int(q * 100):02d}" for q in QUANTILES)  # q01 q10 q50 q90 q99
STAT_KEYS = ("min", "max", "mean", "std", "count", *QUANTILE_KEYS)  # LeRobot's order
HISTOGRAM_BINS = 5000

Stats = dict[str, np.ndarray]  # stat name -> array


def feature_stats(values: np.ndarray) -> Stats:
    """Statistics of a [T] or [T, D] column of one episode, per dimension.

    [T] (a scalar feature) gives arrays of shape [1]; [T, D] gives [D]; count is [T].
    """
    values = np.asarray(values)
    rows = values.reshape(len(values), -1)
    return _stats(rows, len(values))


def sampled_frames(frames: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The frames image statistics are computed from: LeRobot's sample, each downsampled."""
    return [downsample(np.asarray(frames[i])) for i in sample_indices(len(frames))]


def image_stats(frames: Sequence[np.ndarray], scale: float = 255.0) -> Stats:
    """Per-channel statistics of an episode's [H, W, C] frames, as LeRobot's image statistics.

    The frames are sampled (`sample_indices`) and downsampled (`downsample`) as LeRobot does;
    values are divided by `scale` (255 for RGB: [0, 1]; 1 for depth: its own units). Arrays
    are [C, 1, 1]; count is the number of frames sampled.
    """
    picked = sampled_frames(frames)
    stack = np.stack([p.reshape(p.shape[0], p.shape[1], -1) for p in picked])  # [N, H, W, C]
    stats = _stats(stack.reshape(-1, stack.shape[-1]), len(picked))
    return {
        key: value if key == "count" else (value / scale).reshape(-1, 1, 1)
        for key, value in stats.items()
    }


def sample_indices(length: int) -> list[int]:
    """The frames LeRobot samples for image statistics: all up to 100, then ~length^0.75."""
    wanted = max(min(100, length), min(int(length**0.75), 10_000))
    return np.round(np.linspace(0, length - 1, wanted)).astype(int).tolist()


def downsample(frame: np.ndarray, target: int = 150, threshold: int = 300) -> np.ndarray:
    """[H, W, ...] -> every k-th pixel once the larger side reaches `threshold` (LeRobot's rule)."""
    height, width = frame.shape[:2]
    if max(width, height) < threshold:
        return frame
    step = int(width / target) if width > height else int(height / target)
    return frame[::step, ::step]


def aggregate_stats(episodes: Sequence[Mapping[str, Stats]]) -> dict[str, Stats]:
    """Per-feature statistics of a dataset from those of its episodes (LeRobot's
    ``aggregate_stats``); features in first-seen order."""
    keys = list(dict.fromkeys(key for stats in episodes for key in stats))
    return {key: aggregate_feature_stats([s[key] for s in episodes if key in s]) for key in keys}


def aggregate_feature_stats(parts: Sequence[Stats]) -> Stats:
    """One feature's statistics over several episodes (LeRobot's ``aggregate_feature_stats``)."""
    means = np.stack([p["mean"] for p in parts])
    variances = np.stack([p["std"] ** 2 for p in parts])
    counts = np.stack([p["count"] for p in parts])
    total = counts.sum(axis=0)
    while counts.ndim < means.ndim:
        counts = np.expand_dims(counts, axis=-1)
    mean = (means * counts).sum(axis=0) / total
    variance = ((variances + (means - mean) ** 2) * counts).sum(axis=0) / total
    out: Stats = {
        "min": np.min(np.stack([p["min"] for p in parts]), axis=0),
        "max": np.max(np.stack([p["max"] for p in parts]), axis=0),
        "mean": mean,
        "std": np.sqrt(variance),
        "count": total,
    }
    for key in QUANTILE_KEYS:
        if all(key in p for p in parts):
            out[key] = (np.stack([p[key] for p in parts]) * counts).sum(axis=0) / total
    return out


def stats_to_json(stats: Mapping[str, Stats]) -> dict[str, dict[str, Any]]:
    """feature -> stat -> nested lists (meta/stats.json)."""
    return {key: {name: value.tolist() for name, value in s.items()} for key, s in stats.items()}


def episode_stats_columns(stats: Mapping[str, Stats]) -> dict[str, Any]:
    """One episode's statistics as its meta/episodes row holds them: ``stats/<feature>/<stat>``
    -> a (nested) list."""
    return {
        f"stats/{key}/{name}": value.tolist()
        for key, s in stats.items()
        for name, value in s.items()
    }


def _stats(rows: np.ndarray, count: int) -> Stats:
    """[N, D] -> per-column statistics; count is the number of samples they stand for."""
    rows = rows.astype(np.result_type(rows.dtype, np.float32), copy=False)
    mean = np.mean(rows, axis=0)
    stats: Stats = {"min": np.min(rows, axis=0), "max": np.max(rows, axis=0), "mean": mean}
    if len(rows) < 2:
        stats["std"] = np.std(rows, axis=0)
        stats["count"] = np.array([count])
        stats.update({key: mean.copy() for key in QUANTILE_KEYS})
        return stats
    variance = np.mean(rows**2, axis=0) - mean**2
    stats["std"] = np.sqrt(np.maximum(0, variance))
    stats["count"] = np.array([count])
    quantiles = [
        _quantiles(rows[:, d], stats["min"][d], stats["max"][d]) for d in range(rows.shape[1])
    ]
    for i, key in enumerate(QUANTILE_KEYS):
        stats[key] = np.array([q[i] for q in quantiles])
    return stats


def _quantiles(column: np.ndarray, low: float, high: float) -> list[float]:
    # LeRobot's RunningQuantileStats after one update: a histogram over [min, max] (padded by
    # 1e-10), each quantile interpolated linearly within the bin its target count falls in.
    edges = np.linspace(low - 1e-10, high + 1e-10, HISTOGRAM_BINS + 1)
    hist, _ = np.histogram(column, bins=edges)
    cumsum = np.cumsum(hist)
    out = []
    for q in QUANTILES:
        target = q * len(column)
        idx = int(np.searchsorted(cumsum, target))
        if idx == 0:
            out.append(edges[0])
        elif idx >= len(cumsum):
            out.append(edges[-1])
        else:
            before = cumsum[idx - 1]
            in_bin = cumsum[idx] - before
            if in_bin == 0:
                out.append(edges[idx])
            else:
                out.append(edges[idx] + (target - before) / in_bin * (edges[idx + 1] - edges[idx]))
    return out
