"""The distribution of divergence scores (provenance["divergence"]), for `factory inspect` and
the summary of `factory divergence`.

    divergence  55 episodes scored under 4 physics draws, mean success share 0.81
    share 0.00       3  ###
    share 0.75      12  ############
    share 1.00      40  ########################################
    eef error   p10 0.0012  p50 0.0041  p90 0.0113  max 0.0310  (m, each episode's mean over time)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import numpy as np
from demofactory.shards.metadata import EpisodeRecord

QUANTILES = (10, 50, 90)
BAR = 40  # characters of the longest histogram bar


def summarize_divergence(records: Iterable[EpisodeRecord]) -> dict:
    """Scored episodes, the histogram of success shares, mean share and quantiles of the
    eef error (each episode's mean over time); {"scored": 0} when none is scored."""
    scores = [r.provenance["divergence"] for r in records if "divergence" in r.provenance]
    if not scores:
        return {"scored": 0}
    shares = [float(s["success_share"]) for s in scores]
    errors = np.array([float(s["eef_error_m"]["mean"]) for s in scores])
    histogram = Counter(round(share, 4) for share in shares)
    return {
        "scored": len(scores),
        "draws": sorted({int(s["draws"]) for s in scores}),
        "success_share_mean": round(float(np.mean(shares)), 4),
        "success_share_histogram": {f"{k:.2f}": histogram[k] for k in sorted(histogram)},
        "eef_error_m": {
            **{f"p{q}": round(float(np.percentile(errors, q)), 6) for q in QUANTILES},
            "max": round(float(errors.max()), 6),
        },
    }


def format_divergence(summary: dict) -> list[tuple[str, str]]:
    """Rows (label, text) for `factory inspect`'s aligned table; none when nothing is scored."""
    if not summary.get("scored"):
        return []
    draws = "/".join(str(d) for d in summary["draws"])
    rows = [
        (
            "divergence",
            f"{summary['scored']} episodes scored under {draws} physics draws, "
            f"mean success share {summary['success_share_mean']:.2f}",
        )
    ]
    histogram = summary["success_share_histogram"]
    top = max(histogram.values())
    for share, count in histogram.items():
        bar = "#" * max(1, round(BAR * count / top))
        rows.append((f"share {share}", f"{count:>6}  {bar}"))
    quantiles = "  ".join(f"{k} {v:.4f}" for k, v in summary["eef_error_m"].items())
    rows.append(("eef error", f"{quantiles}  (m, each episode's mean over time)"))
    return rows
