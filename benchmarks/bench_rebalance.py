"""Does rebalanced data train a better policy on a uniform grid of placements? Stack D0.

    .venv/bin/python benchmarks/bench_rebalance.py                 # datasets of bench_coverage
    .venv/bin/python benchmarks/bench_rebalance.py --steps 2000 --grid-bins 2
    .venv/bin/python benchmarks/bench_rebalance.py --success-only DIR --rebalanced DIR

The two datasets are `benchmarks/bench_coverage.py --baseline`'s (the same planned attempts,
one without and one with `generation.rebalance`; made first when missing, with --attempts).
The same behaviour-cloning recipe as `factory train-eval` (demofactory.train.train_eval: same MLP,
observation, action chunks, gradient steps, batch and training seed) is trained on each, and
both policies are rolled out on the same uniform grid of placements: every pair of cell
centres of the two cubes (demofactory.build.coverage cells, --grid-bins per placed axis), skipping
the
pairs closer than the spec's min_separation. The rebalanced dataset holds more episodes than
the success-only one (its extra attempts): both counts are in the result, so a gain can be
weighed against the extra data. Prints one JSON object: per arm the episodes, training time and
final loss, grid success rate; the gain in points; the target (>= +10 points).
Not a timed test: the figures are the point. Expensive: two trainings and 2 x grid rollouts.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
TARGET_POINTS = 10.0


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--success-only", type=Path, default=REPO / "out/bench_coverage/success_only"
    )
    parser.add_argument("--rebalanced", type=Path, default=REPO / "out/bench_coverage/rebalanced")
    parser.add_argument(
        "--spec",
        type=Path,
        default=REPO / "out/bench_coverage/stack_d0_cov.yaml",
        help="the success-only dataset's spec (bench_coverage.py --baseline writes it)",
    )
    parser.add_argument("--attempts", type=int, default=100, help="for bench_coverage, if run")
    parser.add_argument("--steps", type=int, default=6000, help="gradient steps per policy")
    parser.add_argument("--grid-bins", type=int, default=2, help="grid cells per placed axis")
    parser.add_argument("--max-rollouts", type=int, default=None, help="cut the grid (first N)")
    parser.add_argument("--out", type=Path, help="the whole result, per-rollout, as JSON")
    return parser.parse_args(argv)


def grid_placements(spec, bins: int):
    """Every pair of cell centres of the placed objects (min_separation kept), in order."""
    import itertools

    from demofactory.build.coverage import PlacementGrid
    from demofactory.generators.scene_api import Placement

    grid = PlacementGrid.from_spec(spec.placement, bins)
    names = list(grid.ranges)
    centres = {}
    for name in names:
        rows = []
        for cell in range(grid.cells(name)):
            r = grid.cell_ranges(name, cell)
            rows.append(tuple((sum(r[a]) / 2 if a in r else 0.0) for a in ("x", "y", "yaw")))
        centres[name] = rows
    return (
        grid,
        names,
        [
            Placement(dict(zip(names, combo, strict=True)))
            for combo in itertools.product(*(centres[n] for n in names))
        ],
    )


def separated(placement, start_xy, min_sep: float) -> bool:
    xy = [start_xy[n] + np.array(o[:2]) for n, o in placement.offsets.items()]
    return all(np.linalg.norm(a - b) >= min_sep for i, a in enumerate(xy) for b in xy[i + 1 :])


def train_and_grid(dataset: Path, resolved, config, placements) -> dict:
    from demofactory.train.core import (
        check_dataset,
        idle_steps,
        load_training_data,
        run_rollout,
        start_state,
        train_policy,
    )
    from demofactory.train.policy import make_obs_layout

    scene = resolved.scene
    check_dataset(dataset, scene)
    layout = make_obs_layout(scene.model, scene.bodies, None)
    data = load_training_data(dataset, layout, config.horizon, None)
    if config.drop_idle:
        data = data.select(~idle_steps(data, config.idle_window, config.idle_distance))
    t0 = time.perf_counter()
    policy, train = train_policy(data, config)
    train_s = time.perf_counter() - t0
    start = start_state(resolved)
    t1 = time.perf_counter()
    rollouts = [
        run_rollout(scene, policy, layout, start, i, config, placement=p)
        for i, p in enumerate(placements)
    ]
    return {
        "dataset": str(dataset),
        "episodes": len(data.episodes),
        "steps_trained_on": data.steps,
        "train_s": round(train_s, 1),
        "final_loss": round(train.final_loss, 5),
        "grid_rollouts": len(rollouts),
        "grid_success_rate": round(sum(r["success"] for r in rollouts) / len(rollouts), 4),
        "eval_s": round(time.perf_counter() - t1, 1),
        "rollouts": rollouts,
    }


def main(argv=None) -> None:
    import demofactory  # noqa: F401  (selects the GL backend before robosuite)
    from demofactory.seeds.resolve import resolve_spec
    from demofactory.specs.spec import load_spec
    from demofactory.train.config import TrainEvalConfig

    args = parse_args(argv)
    if (
        not (args.success_only / "manifest.json").is_file()
        or not (args.rebalanced / "manifest.json").is_file()
    ):
        bench = [sys.executable, str(REPO / "benchmarks/bench_coverage.py"), "--baseline"]
        subprocess.run([*bench, "--attempts", str(args.attempts)], check=True)
    spec = load_spec(args.spec)  # its file: seed demos resolve against it
    resolved = resolve_spec(spec)
    start_xy = {n: p[0][:2, 3] for n, p in resolved.demos[0].object_poses.items()}
    _, names, placements = grid_placements(spec, args.grid_bins)
    placements = [p for p in placements if separated(p, start_xy, spec.placement.min_separation)]
    placements = placements[: args.max_rollouts]
    config = TrainEvalConfig(steps=args.steps)
    arms = {
        name: train_and_grid(path, resolved, config, placements)
        for name, path in (("success_only", args.success_only), ("rebalanced", args.rebalanced))
    }
    gain = 100.0 * (
        arms["rebalanced"]["grid_success_rate"] - arms["success_only"]["grid_success_rate"]
    )
    result = {
        "bench": "rebalance_policy",
        "objects": names,
        "grid_bins": args.grid_bins,
        "grid_rollouts": len(placements),
        "steps": args.steps,
        **{k: {f: v for f, v in a.items() if f != "rollouts"} for k, a in arms.items()},
        "gain_points": round(gain, 2),
        "target_points": TARGET_POINTS,
        "meets_target": gain >= TARGET_POINTS,
    }
    print(json.dumps(result))
    if args.out is not None:
        args.out.write_text(json.dumps({**result, "arms": arms}, indent=1, default=str))


if __name__ == "__main__":
    from _common import run  # benchmarks/_common.py: --json-out PATH

    run(main)
