"""Calibration: hidden physics of a Lift scene recovered from 3 recorded trajectories.

    .venv/bin/python benchmarks/bench_calibrate.py --figure docs/images/calibrate.png

Three windows of the first Lift seed demo (arm moving free, closing on the cube, lifting it) are
replayed through the OSC controller in a model with hidden values and written as robosuite
hdf5; `factory calibrate`'s code (`run_calibration`: recordings, fit, fragment, report) then fits
the parameters from the nominal values. Prints JSON: per parameter the truth, the fitted value,
the relative error and the 95 % half-width; the wall time of the fit and, as the reference
measured in the same run, of one replay of the three recordings (the ratio is the fit's cost in
replays).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

HIDDEN = {  # the "real" system: scales of the model's nominal values; delay in control steps
    "mass.cube": 1.6,
    "joint_armature.arm": 1.3,
    "kp": 0.8,
    "damping_ratio": 1.15,
    "delay": 1.0,
}
BOUNDS = {"delay": "0,2"}  # the others: 0.5,2
WINDOWS = [(40, 70), (170, 200), (195, 225)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--figure", type=Path, help="write a PNG of errors and one fitted signal")
    parser.add_argument("--max-iters", type=int, default=30)
    args = parser.parse_args()

    from demofactory.robustness.calibrate import (
        load_recordings,
        record,
        rollout,
        save_recordings,
    )
    from demofactory.robustness.calibrate_run import run_calibration
    from demofactory.seeds.demos import load_seed_demos
    from demofactory.simulation.scene import Scene
    from demofactory.specs.spec import load_spec

    spec_path = REPO / "scene_specs" / "lift.yaml"
    scene = Scene(load_spec(spec_path))
    demo = load_seed_demos(REPO / "scene_specs/demos/lift_panda_4demos_robosuite141.hdf5")[0]
    starts = [demo.states[a] for a, _ in WINDOWS]
    actions = [demo.actions[a:b] for a, b in WINDOWS]
    trajectories = record(scene, starts, actions, HIDDEN)
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i, trajectory in enumerate(trajectories):
            paths.append(Path(tmp) / f"recording{i}.hdf5")
            save_recordings(paths[-1], "Lift", [trajectory])
        recordings = load_recordings(paths, scene, None)
        start = time.perf_counter()
        for rec in recordings:
            rollout(scene, rec.states[0], rec.actions)
        replay_s = time.perf_counter() - start
        tokens = [f"{name}={BOUNDS.get(name, '0.5,2')}" for name in HIDDEN]
        start = time.perf_counter()
        result = run_calibration(
            spec_path,
            paths,
            tokens,
            Path(tmp) / "lift.calibrated.yaml",
            Path(tmp) / "lift.calibrated.html",
            command="bench_calibrate",
            max_iters=args.max_iters,
            log=sys.stderr,
        )
        fit_s = time.perf_counter() - start
        fragment = (Path(tmp) / "lift.calibrated.yaml").read_text()
    fitted = result.values()
    params = {
        name: {
            "truth": truth,
            "fitted": round(fitted[name], 6),
            "relative_error": float(f"{abs(fitted[name] - truth) / truth:.3g}"),
            "ci95_half_width": (
                float(f"{result.half_widths[name]:.3g}")
                if name != "delay"
                else "whole steps, searched"
            ),
        }
        for name, truth in HIDDEN.items()
    }
    report = {
        "recordings": len(WINDOWS),
        "steps": [b - a for a, b in WINDOWS],
        "parameters": params,
        "max_relative_error": max(p["relative_error"] for p in params.values()),
        "all_within_10_percent": all(p["relative_error"] < 0.10 for p in params.values()),
        "cost_nominal": round(result.cost_initial, 4),
        "cost_fitted": float(f"{result.cost_fitted:.3g}"),
        "delay_costs": {k: float(f"{v:.4g}") for k, v in result.delay_costs.items()},
        "fit_wall_s": round(fit_s, 1),
        "replay_wall_s": round(replay_s, 3),
        "fit_in_replays": round(fit_s / replay_s, 1),
        "fragment": fragment,
    }
    print(json.dumps(report, indent=2))
    if args.figure:
        plot(args.figure, params, result, scene)


def plot(path: Path, params: dict, result, scene) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from demofactory.robustness.calibrate import observed_columns

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.6))
    names = list(params)
    rows = np.arange(len(names))
    nominal = [0.0 if n == "delay" else 1.0 for n in names]
    left.scatter(nominal, rows, marker="x", color="tab:orange", label="nominal (fit start)")
    left.scatter(
        [params[n]["truth"] for n in names],
        rows,
        s=120,
        facecolors="none",
        edgecolors="k",
        label="hidden (truth)",
    )
    left.scatter(
        [params[n]["fitted"] for n in names],
        rows,
        marker="+",
        s=120,
        color="tab:blue",
        label="fitted",
    )
    for row, n in zip(rows, names, strict=True):
        left.annotate(f"error {params[n]['relative_error']:.1e}", (2.05, row), va="center")
    left.set_yticks(rows, names)
    left.set_xlim(-0.1, 2.8)
    left.set_xlabel("scale of the nominal value (delay: control steps)")
    left.set_title("5 hidden parameters, 3 recordings")
    left.legend(loc="lower right", fontsize=8)
    _, pos, _ = observed_columns(scene)
    rec = result.recordings[-1]
    steps = np.arange(len(rec.states))
    z = pos[2]
    right.plot(steps, rec.states[:, z], "k", lw=2.5, label="recorded (hidden values)")
    right.plot(steps, result.replays["initial"][-1][:, z], "tab:orange", label="nominal model")
    right.plot(steps, result.replays["fitted"][-1][:, z], "tab:blue", ls="--", label="fitted")
    right.set_xlabel("control step (20 Hz)")
    right.set_ylabel("cube height (m)")
    right.set_title("lift window: cube height")
    right.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    from demofactory.robots import repairs as robot_repairs

    robot_repairs.install()  # before any env is built, as the CLI does
    from _common import run  # benchmarks/_common.py: --json-out PATH

    run(main)
