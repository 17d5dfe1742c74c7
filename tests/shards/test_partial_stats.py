"""Mergeable statistics (demofactory.shards.partial_stats): exact, order-independent, quantiles
within the
stated bound of numpy's exact ones."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from demofactory.shards.format import DatasetError
from demofactory.shards.partial_stats import (
    MIN_WIDTH,
    QUANTILE_ERROR_OF_RANGE,
    from_bytes,
    merge_all,
    partial_stats,
    to_bytes,
)

QUANTILES = (0.0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0)


def _data(seed: int = 0, n: int = 4000) -> np.ndarray:
    """Columns that stress the sketch: normal, uniform, two far clusters (a gap), constant,
    heavy-tailed, tiny and huge magnitudes, subnormals."""
    rng = np.random.default_rng(seed)
    gap = np.where(rng.random(n) < 0.5, rng.normal(-50, 0.1, n), rng.normal(80, 0.1, n))
    return np.stack(
        [
            rng.normal(0.3, 2.0, n),
            rng.uniform(-1, 1, n),
            gap,
            np.full(n, 0.8125),
            rng.standard_cauchy(n),
            rng.normal(0, 1e-9, n),
            rng.normal(1e12, 1e10, n),
            rng.integers(0, 3, n) * 5e-324,
            rng.integers(0, 2, n).astype(np.float64),  # a gripper: two values
        ],
        axis=1,
    )


def _parts(values: np.ndarray, cuts: list[int]):
    edges = [0, *cuts, len(values)]
    return [partial_stats(values[a:b]) for a, b in zip(edges, edges[1:], strict=False)]


def test_merge_is_order_and_grouping_independent_to_the_byte():
    values = _data()
    rng = np.random.default_rng(1)
    reference = to_bytes({"k": partial_stats(values)})
    for _ in range(3):
        cuts = sorted(rng.choice(np.arange(1, len(values)), 7, replace=False).tolist())
        parts = _parts(values, cuts)
        rng.shuffle(parts)
        # left fold, and a tree of pairs
        assert to_bytes({"k": merge_all(parts)}) == reference
        while len(parts) > 1:
            parts = [merge_all(parts[i : i + 2]) for i in range(0, len(parts), 2)]
        assert to_bytes({"k": parts[0]}) == reference


def test_mean_is_exactly_rounded_and_std_matches():
    values = _data(2)
    merged = merge_all(_parts(values, [100, 1500, 3999]))
    means, stds = merged.mean_std()
    for d in range(values.shape[1]):
        exact = sum(map(Fraction, values[:, d].tolist()), Fraction(0)) / len(values)
        assert means[d] == float(exact)  # one rounding of the exact mean
        variance = sum((Fraction(v) - exact) ** 2 for v in values[:, d].tolist()) / len(values)
        # abs: the subnormal column's variance underflows float, its std does not
        assert stds[d] == pytest.approx(math.sqrt(variance), rel=1e-15, abs=5e-324)
    assert merged.count == len(values)
    np.testing.assert_array_equal(merged.min, values.min(0))
    np.testing.assert_array_equal(merged.max, values.max(0))


@pytest.mark.parametrize("seed", [3, 4])
def test_quantiles_within_the_stated_bound(seed):
    values = _data(seed)
    merged = merge_all(_parts(values, [17, 900, 2000, 2001]))
    span = values.max(0) - values.min(0)
    for q in QUANTILES:
        error = np.abs(np.asarray(merged.quantiles(q)) - np.quantile(values, q, axis=0))
        bound = np.maximum(QUANTILE_ERROR_OF_RANGE * span, MIN_WIDTH)
        assert (error <= bound).all(), (q, error / np.where(span > 0, span, 1))
    assert QUANTILE_ERROR_OF_RANGE < 0.005  # the 0.5 % of the range


def test_bytes_round_trip_and_damage():
    parts = {"action": partial_stats(_data(5)[:, :4]), "state": partial_stats(_data(6))}
    data = to_bytes(parts)
    back = from_bytes(data, ["action", "state"])
    assert to_bytes(back) == data
    with pytest.raises(DatasetError, match="x.stats: not readable"):
        from_bytes(data[:50], ["action"], source="x.stats")
    with pytest.raises(DatasetError, match="not readable"):
        from_bytes(data, ["nokey"])


def test_bad_input():
    with pytest.raises(DatasetError, match="finite"):
        partial_stats(np.array([[1.0], [np.nan]]))
    with pytest.raises(DatasetError, match=r"\[n >= 1, D\]"):
        partial_stats(np.zeros((0, 3)))
    with pytest.raises(DatasetError, match="cannot merge"):
        partial_stats(np.zeros((2, 3))).merge(partial_stats(np.zeros((2, 4))))
