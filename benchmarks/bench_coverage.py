"""Placement coverage of kept episodes on Stack D0: success-only generation (today) against
`generation.rebalance`.

    .venv/bin/python benchmarks/bench_coverage.py                       # 100 attempts, 4 bins
    .venv/bin/python benchmarks/bench_coverage.py --attempts 40 --bins 3 --workers 2

One `factory run` of scene_specs/stack_d0.yaml without cameras (coverage is about where
episodes start, not about pixels) with `generation.rebalance` on. Its planned shards are the
same attempts, seed for seed, as a run without rebalance (seeds come from the spec seed, the
shard and the attempt only), so "today" is the coverage of the planned attempts' kept episodes
and "rebalanced" that of the whole dataset, both counted from generation.json with
demofactory.build.coverage over the same cells. `--baseline` also runs the spec without rebalance
and
checks that its planned attempts' placements and outcomes are those of the rebalanced run.
Prints one JSON object: both figures, the ratio (rebalanced / today), the extra attempts spent
(and their ratio to the planned ones), the rounds, and the target (>= 0.95).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SPEC = REPO / "scene_specs/stack_d0.yaml"
TARGET = 0.95


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=100, help="planned attempts")
    parser.add_argument("--per-shard", type=int, default=10, help="attempts per shard")
    parser.add_argument("--bins", type=int, default=4, help="cells per placed axis")
    parser.add_argument("--tolerance", type=float, default=0.5)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--baseline", action="store_true", help="also run without rebalance")
    parser.add_argument("--out", type=Path, default=REPO / "out/bench_coverage")
    return parser.parse_args(argv)


def write_spec(path: Path, args, rebalance: bool) -> Path:
    generation = {"attempts": args.attempts, "attempts_per_shard": args.per_shard}
    if rebalance:
        generation["rebalance"] = {
            "bins": args.bins,
            "tolerance": args.tolerance,
            "rounds": args.rounds,
        }
    spec = {
        "extends": str(SPEC),
        "name": f"stack_d0_cov{'_rb' if rebalance else ''}",
        "cameras": [],
        "generation": generation,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def run(spec: Path, out: Path, workers: int) -> float:
    from demofactory.cli.main import main

    start = time.perf_counter()
    code = main(["run", str(spec), "--out", str(out), "--workers", str(workers), "--no-progress"])
    if code != 0:
        sys.exit(f"factory run {spec} failed ({code})")
    return time.perf_counter() - start


def coverage_of(generation: dict, grid, below: int | None = None) -> dict:
    from demofactory.build.coverage import count, summarize

    if below is not None:  # only the planned attempts
        generation = {
            "shards": {
                name: {"placements": [r for r in e["placements"] if r["attempt"] < below]}
                for name, e in generation["shards"].items()
            }
        }
    return summarize(grid, count(grid, generation))


def main(argv=None) -> None:
    import demofactory  # noqa: F401  (selects the GL backend before robosuite)
    from demofactory.build.coverage import PlacementGrid
    from demofactory.build.output_dir import load_generation
    from demofactory.specs.spec import load_spec

    args = parse_args(argv)
    spec_path = write_spec(args.out / "stack_d0_cov_rb.yaml", args, rebalance=True)
    spec = load_spec(spec_path)
    grid = PlacementGrid.from_spec(spec.placement, args.bins)
    data = args.out / "rebalanced"
    wall = run(spec_path, data, args.workers)
    generation = load_generation(data)
    today = coverage_of(generation, grid, below=args.attempts)
    after = coverage_of(generation, grid)
    record = generation.get("rebalance", {})
    result = {
        "bench": "coverage",
        "spec": str(SPEC.relative_to(REPO)),
        "planned_attempts": args.attempts,
        "bins_per_axis": args.bins,
        "cells": sum(e["cells"] for e in after["objects"].values()),
        "today_kept_covered": today["kept_covered"],
        "rebalanced_kept_covered": after["kept_covered"],
        "ratio": round(after["kept_covered"] / today["kept_covered"], 4),
        "extra_attempts": record.get("extra_attempts"),
        "extra_attempts_ratio": round((record.get("extra_attempts") or 0) / args.attempts, 4),
        "rounds": record.get("rounds"),
        "satisfied": record.get("satisfied"),
        "today_kept": sum(e["kept"] for e in today["objects"].values()) // len(grid.ranges),
        "rebalanced_kept": sum(e["kept"] for e in after["objects"].values()) // len(grid.ranges),
        "per_object": {
            name: {
                "today": today["objects"][name]["kept_covered"],
                "rebalanced": e["kept_covered"],
            }
            for name, e in after["objects"].items()
        },
        "target": TARGET,
        "meets_target": after["kept_covered"] >= TARGET,
        "wall_s": round(wall, 1),
    }
    if args.baseline:
        base_path = write_spec(args.out / "stack_d0_cov.yaml", args, rebalance=False)
        base = args.out / "success_only"
        result["baseline_wall_s"] = round(run(base_path, base, args.workers), 1)
        rows = {
            r["attempt"]: r
            for e in load_generation(base)["shards"].values()
            for r in e["placements"]
        }
        planned = {
            r["attempt"]: r
            for e in generation["shards"].values()
            for r in e["placements"]
            if r["attempt"] < args.attempts
        }
        result["baseline_same_attempts"] = rows == planned
        result["baseline_kept_covered"] = coverage_of(load_generation(base), grid)["kept_covered"]
    print(json.dumps(result))


if __name__ == "__main__":
    from _common import run  # benchmarks/_common.py: --json-out PATH

    run(main)
