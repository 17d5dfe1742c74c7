"""Does physics randomization transfer? Nominal-data and randomized-data policies, shifted physics.

Policies trained on nominal and on randomized data, rolled out under nominal and under shifted
physics:

    .venv/bin/python benchmarks/bench_physics_transfer.py --task lift \
        --nominal-data out/lift_lowdim --randomized-data out/lift_physics \
        --out bench_physics_transfer_lift.json

Per task, the same behaviour-cloning recipe (`factory train-eval`: same config, same training
seed, same spec for the rollouts, hence the same evaluation seeds and placements) is trained once
on a dataset generated under nominal physics (the task's low-dim spec) and once on one generated
with a spec's `physics:` ranges (scene_specs/lift_physics.yaml, stack_physics.yaml). Each policy
is rolled out under nominal physics and under each `--shift` (the draw `factory train-eval
--eval-physics` sets). The default shifts, per task, in scene_specs/physics/:
- shifted.yaml / stack_shifted.yaml: issue 14's example (the carried cube's friction x0.5 and
  mass x2, OSC kp x0.6, 2 control steps of delay);
- smaller.yaml / stack_smaller.yaml: the same with the cubes 0.6 as large.
One policy per arm: train_eval trains and rolls out under nominal physics and saves the policy,
`evaluate` rolls the same policy out under each shift.

Prints one JSON line: the success rates (arm x physics), the randomized arm's gain under each
shift (target >= +0.20) and under nominal physics (target >= -0.05), whether each shift meets
both, per arm the train-eval report without per-rollout details; --out gets everything,
per-rollout details and draws included. A missing dataset prints how to make it (generating
one takes minutes to tens of minutes: this script never does). Not a timed test: the figures
are the point, the time is reported.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import demofactory  # noqa: F401  (selects the GL backend before robosuite)
import torch
from demofactory.errors import UserError
from demofactory.robustness.eval_physics import load_eval_physics
from demofactory.seeds.resolve import resolve_spec
from demofactory.specs.spec import load_spec
from demofactory.train.config import TrainEvalConfig
from demofactory.train.core import evaluate
from demofactory.train.policy import ChunkPolicy, ObsLayout
from demofactory.train.train_eval import train_eval

REPO = Path(__file__).resolve().parents[1]
SPECS = {  # task -> (nominal spec: rollouts and nominal data, randomized data's spec)
    "lift": (REPO / "scene_specs/lift_lowdim.yaml", REPO / "scene_specs/lift_physics.yaml"),
    "stack": (REPO / "scene_specs/stack_lowdim.yaml", REPO / "scene_specs/stack_physics.yaml"),
}
MAKE = {  # task -> `factory run` flags of (nominal, randomized) data: the README's datasets
    "lift": ("--attempts 240 --successes 180", "--attempts 400 --successes 180"),
    "stack": ("--attempts 500 --successes 350", "--attempts 900 --successes 320"),
}
PHYSICS = REPO / "scene_specs/physics"
SHIFTS = {  # task -> the default --shift files
    "lift": [PHYSICS / "shifted.yaml", PHYSICS / "smaller.yaml"],
    "stack": [PHYSICS / "stack_shifted.yaml", PHYSICS / "stack_smaller.yaml"],
}
TARGETS = {"gain_under_shift": 0.20, "gain_under_nominal": -0.05}
DEFAULT_CONFIG = {"steps": 6000, "rollouts": 50}  # the README figures (Lift: eval_horizon 600)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=sorted(SPECS), default="lift")
    parser.add_argument(
        "--nominal-data", type=Path, help="dataset of the nominal spec (default: out/<its name>)"
    )
    parser.add_argument(
        "--randomized-data",
        type=Path,
        help="dataset of the randomized spec (default: out/<its name>)",
    )
    parser.add_argument(
        "--shift",
        type=Path,
        nargs="+",
        help="--eval-physics RANGES files, each a column of the result (default, in "
        "scene_specs/physics/: shifted.yaml and smaller.yaml for lift, stack_shifted.yaml and "
        "stack_smaller.yaml for stack)",
    )
    parser.add_argument(
        "--config",
        default=json.dumps(DEFAULT_CONFIG),
        help=f"TrainEvalConfig fields as JSON (default: {json.dumps(DEFAULT_CONFIG)})",
    )
    parser.add_argument("--out", type=Path, help="write the whole result (JSON) here")
    parser.add_argument(
        "--figure", type=Path, help="draw the success rates (arm x physics) as bars, PNG"
    )
    parser.add_argument(
        "--plot",
        type=Path,
        nargs="+",
        metavar="JSON",
        help="draw --figure from saved --out results (one panel per task), without training",
    )
    args = parser.parse_args(argv)
    if args.plot and args.figure is None:
        parser.error("--plot draws into --figure PNG: give one")
    for path in args.plot or []:
        if not path.is_file():
            parser.error(f"--plot {path}: no such file (a --out result of this benchmark)")
    names = [path.stem for path in args.shift or []]
    if "nominal" in names or len(set(names)) < len(names):
        # a shift's file name is its column: "nominal" is taken, and two alike would merge
        parser.error(f"--shift: expected distinct file names other than nominal, got {names}")
    return args


def load_policy(path: Path) -> tuple[ChunkPolicy, ObsLayout]:
    """The low-dim policy `train_eval(save=path)` wrote, and its observation layout."""
    saved = torch.load(path, weights_only=False)
    config, layout = saved["config"], ObsLayout(**saved["layout"])
    policy = ChunkPolicy(layout.dim, config["horizon"], config["hidden"], config["layers"])
    policy.load_state_dict(saved["state_dict"])
    return policy.eval(), layout


def _rate(rollouts: list[dict]) -> float:
    return round(sum(r["success"] for r in rollouts) / len(rollouts), 4)


def compare(task: str, data: dict[str, Path], shifts: list[Path], config: TrainEvalConfig) -> dict:
    """Both arms: train once, roll out under nominal physics and under each shift."""
    start = time.perf_counter()
    resolved = resolve_spec(load_spec(SPECS[task][0]))
    # Every shift checked against the scene before anything trains (a bad target: one line).
    physics = {shift.stem: load_eval_physics(str(shift), resolved.scene) for shift in shifts}

    def log(line: str) -> None:
        if not line.startswith(("step ", "rollout ")):
            print(f"[{task}] {line}", file=sys.stderr, flush=True)

    arms = {}
    for arm, dataset in data.items():
        print(f"[{task}] {arm}: {dataset}", file=sys.stderr, flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            report = train_eval(dataset, resolved, config, log=log, save=Path(tmp) / "policy.pt")
            policy, layout = load_policy(Path(tmp) / "policy.pt")
        shifted = {}
        for name, shift in physics.items():
            t0 = time.perf_counter()
            rollouts = evaluate(resolved, policy, layout, config, physics=shift)
            elapsed = time.perf_counter() - t0
            log(f"{arm}: {name} {_rate(rollouts)} in {elapsed:.0f} s")
            shifted[name] = {
                "success_rate": _rate(rollouts),
                "eval_time_s": round(elapsed, 1),
                "per_rollout": rollouts,
            }
        arms[arm] = {
            **{k: v for k, v in report.items() if k != "observation"},
            "observation_dim": report["observation"]["dim"],
            "shifted": shifted,
        }
    rates = {
        arm: {
            "nominal": a["success_rate"],
            **{name: r["success_rate"] for name, r in a["shifted"].items()},
        }
        for arm, a in arms.items()
    }
    gain_nominal = round(rates["randomized"]["nominal"] - rates["nominal"]["nominal"], 4)
    gains = {name: round(rates["randomized"][name] - rates["nominal"][name], 4) for name in physics}
    nominal_ok = gain_nominal >= TARGETS["gain_under_nominal"]
    seeds = [[r["seed"] for r in a["per_rollout"]] for a in arms.values()]
    seeds += [
        [r["seed"] for r in s["per_rollout"]] for a in arms.values() for s in a["shifted"].values()
    ]
    return {
        "benchmark": "physics_randomization_transfer",
        "task": task,
        "spec": str(SPECS[task][0].relative_to(REPO)),
        "datasets": {arm: str(d) for arm, d in data.items()},
        "episodes": {arm: a["episodes"] for arm, a in arms.items()},
        "shifts": {name: shift.to_json() for name, shift in physics.items()},
        "config": config.model_dump(),
        "rollouts": config.rollouts,
        "same_eval_seeds": all(s == seeds[0] for s in seeds),
        "success_rate": rates,
        "gain_under_nominal": gain_nominal,
        "gain_under_shift": gains,
        "target": TARGETS,
        # per shift: the gain under it and no more than the allowed loss under nominal physics
        "meets_target": {
            name: nominal_ok and gain >= TARGETS["gain_under_shift"] for name, gain in gains.items()
        },
        "wall_s": round(time.perf_counter() - start, 1),
        "arms": arms,
    }


def figure(results: list[dict], path: Path) -> None:
    """One panel per result (task): per physics, the nominal-data and the randomized-data
    policy's success rate, with the rollouts' count in the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5.2 * len(results), 4.2), squeeze=False)
    colours = {"nominal": "tab:gray", "randomized": "tab:blue"}
    for ax, result in zip(axes[0], results, strict=True):
        physics = list(result["success_rate"]["nominal"])
        for offset, (arm, rates) in zip((-0.2, 0.2), result["success_rate"].items(), strict=True):
            xs = [i + offset for i in range(len(physics))]
            values = [100 * rates[name] for name in physics]
            episodes = result["episodes"][arm]
            label = f"trained on {arm} data ({episodes} episodes)"
            ax.bar(xs, values, width=0.4, color=colours[arm], label=label)
            for x, v in zip(xs, values, strict=True):
                ax.annotate(f"{v:.0f}", (x, v + 1.5), ha="center", fontsize=9)
        ax.set_xticks(range(len(physics)), physics)
        ax.set_xlabel("evaluation physics (shifts: scene_specs/physics/<name>.yaml)")
        ax.set_ylim(0, 112)
        ax.set_ylabel("success (%)")
        ax.set_title(f"{result['task'].capitalize()}: {result['rollouts']} rollouts each")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict | None:
    args = parse_args(argv)
    if args.plot:
        figure([json.loads(path.read_text()) for path in args.plot], args.figure)
        return None
    config = TrainEvalConfig(**json.loads(args.config))
    nominal_spec, randomized_spec = SPECS[args.task]
    data = {
        "nominal": args.nominal_data or load_spec(nominal_spec).output_dir(),
        "randomized": args.randomized_data or load_spec(randomized_spec).output_dir(),
    }
    specs = (nominal_spec, randomized_spec)
    for (arm, dataset), spec, flags in zip(data.items(), specs, MAKE[args.task], strict=True):
        if not (dataset / "manifest.json").is_file():
            make = f".venv/bin/factory run {spec.relative_to(REPO)} --out {dataset} {flags}"
            skipped = f"no {arm} dataset at {dataset}; make it with: {make}"
            print(json.dumps({"benchmark": "physics_randomization_transfer", "skipped": skipped}))
            return None
    command = " ".join(
        [
            ".venv/bin/python",
            "benchmarks/bench_physics_transfer.py",
            *(sys.argv[1:] if argv is None else argv),
        ]
    )
    shifts = args.shift or SHIFTS[args.task]
    try:
        result = {**compare(args.task, data, shifts, config), "command": command}
    except UserError as err:  # a bad shift file or dataset: one line, as the CLI says it
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    short = {
        arm: {
            k: (
                v
                if k != "shifted"
                else {
                    name: {kk: vv for kk, vv in r.items() if kk != "per_rollout"}
                    for name, r in v.items()
                }
            )
            for k, v in r.items()
            if k not in ("per_rollout", "loss_curve", "config")
        }
        for arm, r in result["arms"].items()
    }
    print(json.dumps({**result, "arms": short}))  # per-rollout details: in --out
    if args.out is not None:
        args.out.write_text(json.dumps(result) + "\n")
    if args.figure is not None:
        figure([result], args.figure)
    return result


if __name__ == "__main__":
    from demofactory.robots import repairs as robot_repairs

    robot_repairs.install()  # before any env is built, as the CLI does
    from _common import run  # benchmarks/_common.py: --json-out PATH

    run(main)
