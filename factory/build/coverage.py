"""Placement coverage: where attempts started against where kept episodes started, binned.

    spec placement ranges (placement.objects: x, y, yaw [lo, hi])
      ──► PlacementGrid: per object, `bins` equal bins along each axis whose range is not a
          point (x, y, yaw: up to bins**3 cells an object)
    generation.json shards.*.placements: per attempt {attempt, kept, placement} (recorded by
    the pipeline; a dataset made before they were: the kept episodes' provenance only)
      ──► counts per object and cell, attempts and kept
      ──► coverage: per object the share of cells holding at least one kept episode (and one
          attempt); the dataset's figure is the share over every object's cells
      ──► plot_coverage: per object, attempts | kept heat maps over x-y, and yaw bars

Used by `factory inspect --coverage` and by `generation.rebalance` (demofactory.build.rebalance).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

AXES = ("x", "y", "yaw")


@dataclass(frozen=True)
class PlacementGrid:
    """Per object the placed axes and their ranges; `bins` cells along each of them."""

    ranges: Mapping[str, Mapping[str, tuple[float, float]]]  # object -> axis -> (lo, hi)
    bins: int

    @classmethod
    def from_spec(cls, placement, bins: int) -> PlacementGrid:
        """From a spec's `placement` section: the axes whose range is wider than a point."""
        ranges = {}
        for name, r in placement.objects.items():
            axes = {a: tuple(getattr(r, a)) for a in AXES if getattr(r, a)[1] > getattr(r, a)[0]}
            if axes:
                ranges[name] = axes
        return cls(ranges, bins)

    def cells(self, name: str) -> int:
        return self.bins ** len(self.ranges[name])

    def cell(self, name: str, offset) -> int:
        """The flat cell index of an object's (dx, dy, dyaw) offset (edges clipped inside)."""
        index = 0
        for axis, (lo, hi) in self.ranges[name].items():
            value = float(offset[AXES.index(axis)])
            b = int(np.clip(np.floor((value - lo) / (hi - lo) * self.bins), 0, self.bins - 1))
            index = index * self.bins + b
        return index

    def cell_ranges(self, name: str, cell: int) -> dict[str, tuple[float, float]]:
        """The x, y, yaw ranges of one cell of an object (unplaced axes: absent)."""
        out, axes = {}, list(self.ranges[name].items())
        for axis, (lo, hi) in reversed(axes):
            cell, b = divmod(cell, self.bins)
            width = (hi - lo) / self.bins
            out[axis] = (lo + b * width, lo + (b + 1) * width)
        return out


@dataclass(frozen=True)
class Counts:
    """Per object: attempts and kept episodes per cell (int arrays of grid.cells(name));
    attempts is None when the dataset did not record its attempts' placements."""

    attempts: Mapping[str, np.ndarray] | None
    kept: Mapping[str, np.ndarray]


def attempt_placements(generation: Mapping) -> list[dict] | None:
    """generation.json's recorded attempts, [{attempt, kept, placement}], in attempt order;
    None when a shard lacks them (made before they were recorded)."""
    found = []
    for entry in generation.get("shards", {}).values():
        rows = entry.get("placements")
        if rows is None:
            return None
        found.extend(rows)
    return sorted(found, key=lambda row: row["attempt"])


def count(grid: PlacementGrid, generation: Mapping, episodes: Iterable | None = None) -> Counts:
    """Cell counts from generation.json's attempt placements; without them, kept counts from
    `episodes` (EpisodeRecords: provenance.placement, one per trajectory) and no attempts."""
    rows = attempt_placements(generation)
    attempts = None if rows is None else {n: np.zeros(grid.cells(n), int) for n in grid.ranges}
    kept = {n: np.zeros(grid.cells(n), int) for n in grid.ranges}
    if rows is not None:
        for row in rows:
            for name in grid.ranges:
                cell = grid.cell(name, row["placement"][name])
                attempts[name][cell] += 1
                kept[name][cell] += int(bool(row["kept"]))
        return Counts(attempts, kept)
    seen = set()
    for record in episodes or ():
        trajectory = record.provenance.get("trajectory", record.index)
        placement = record.provenance.get("placement")
        if placement is None or trajectory in seen:
            continue
        seen.add(trajectory)
        for name in grid.ranges:
            kept[name][grid.cell(name, placement[name])] += 1
    return Counts(None, kept)


def summarize(grid: PlacementGrid, counts: Counts) -> dict:
    """The coverage figures (JSON): per object and overall, the share of cells with a kept
    episode (and with an attempt), and the emptiest cells' counts."""
    objects = {}
    for name in grid.ranges:
        kept = counts.kept[name]
        entry = {
            "axes": list(grid.ranges[name]),
            "cells": int(kept.size),
            "kept": int(kept.sum()),
            "kept_covered": round(float((kept > 0).mean()), 4),
            "kept_min_per_cell": int(kept.min()),
        }
        if counts.attempts is not None:
            tried = counts.attempts[name]
            entry.update(
                attempts=int(tried.sum()),
                attempts_covered=round(float((tried > 0).mean()), 4),
            )
        objects[name] = entry
    cells = sum(e["cells"] for e in objects.values())
    covered = sum(e["kept_covered"] * e["cells"] for e in objects.values())
    return {
        "bins_per_axis": grid.bins,
        "objects": objects,
        "kept_covered": round(covered / cells, 4) if cells else None,
        "attempts_recorded": counts.attempts is not None,
    }


def plot_coverage(grid: PlacementGrid, counts: Counts, path: Path) -> Path:
    """A PNG: one row per object, attempts | kept over the x-y cells (summed over yaw), and the
    yaw cells as bars (attempts, kept)."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    names = list(grid.ranges)
    fig, rows = plt.subplots(len(names), 3, figsize=(11, 3.4 * len(names)), squeeze=False)
    for row, name in zip(rows, names, strict=True):
        axes = list(grid.ranges[name])
        shape = (grid.bins,) * len(axes)
        panels = [("attempts", counts.attempts), ("kept", counts.kept)]
        for ax, (label, table) in zip(row[:2], panels, strict=True):
            if table is None:
                ax.set_axis_off()
                ax.set_title(f"{name}: attempts not recorded")
                continue
            cube = table[name].reshape(shape)
            plane = _xy_plane(cube, axes)
            ax.imshow(plane.T, origin="lower", cmap="viridis")
            for (i, j), value in np.ndenumerate(plane):
                ax.text(i, j, str(int(value)), ha="center", va="center", color="w", fontsize=7)
            ax.set_title(f"{name}: {label} per x-y cell (covered {(plane > 0).mean():.0%})")
            ax.set_xlabel("x cell" if "x" in axes else "(x fixed)")
            ax.set_ylabel("y cell" if "y" in axes else "(y fixed)")
        bars = row[2]
        if "yaw" in axes:
            k = axes.index("yaw")
            for label, table, shift in (
                ("attempts", counts.attempts, -0.2),
                ("kept", counts.kept, 0.2),
            ):
                if table is not None:
                    cube = table[name].reshape(shape)
                    other = tuple(i for i in range(len(axes)) if i != k)
                    bars.bar(np.arange(grid.bins) + shift, cube.sum(axis=other), 0.4, label=label)
            bars.legend()
            bars.set_title(f"{name}: per yaw cell")
        else:
            bars.set_axis_off()
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def _xy_plane(cube: np.ndarray, axes: list[str]) -> np.ndarray:
    """[bins, bins] counts over (x, y), summed over yaw; a 1-axis grid shown as one row."""
    if "yaw" in axes:
        cube = cube.sum(axis=axes.index("yaw"))
        axes = [a for a in axes if a != "yaw"]
    if cube.ndim == 0:
        return cube.reshape(1, 1)
    return cube if cube.ndim == 2 else cube.reshape(-1, 1)
