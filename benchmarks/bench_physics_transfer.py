"""Does physics randomization transfer? Policies trained on nominal and on randomized data, rolled
out under nominal and under shifted physics.

    .venv/bin/python benchmarks/bench_physics_transfer.py --task lift \
        --nominal-data out/lift_lowdim --randomized-data out/lift_physics \
        --out bench_physics_transfer_lift.json

Per task, the same behaviour-cloning recipe (`factory train-eval`: same config, same training
seed, same spec for the rollouts, hence the same evaluation seeds and placements) is trained once
on a dataset generated under nominal physics (the task's low-dim spec) and once on one generated
with the spec's `physics:` ranges (scene_specs/lift_physics.yaml). Each policy is rolled out
twice: under nominal physics and under `--shift` (default scene_specs/physics/shifted.yaml: cube
friction x0.5, cube mass x2, OSC kp x0.6, 2 control steps of delay), the draw `factory train-eval
--eval-physics` sets. One policy per arm: train_eval trains and rolls out under nominal physics
and saves the policy, `evaluate` rolls the same policy out under the shift.

Prints one JSON line per task: the four success rates, the randomized arm's gain under the shift
(target >= +0.20) and under nominal physics (target >= -0.05), per arm the train-eval report
without per-rollout details; --out gets everything, per-rollout details and draws included. A
missing dataset prints how to make it (generating one takes tens of minutes: this script never
does). Not a timed test: the figures are the point, the time is reported.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

import factory  # noqa: F401  (selects the GL backend before robosuite)
from factory.eval_physics import load_eval_physics
from factory.policy import ChunkPolicy, ObsLayout
from factory.resolve import resolve_spec
from factory.spec import load_spec
from factory.train_eval import TrainEvalConfig, evaluate, train_eval

REPO = Path(__file__).resolve().parents[1]
SPECS = {  # task -> (nominal spec: rollouts and nominal data, randomized data's spec)
    "lift": (REPO / "scene_specs/lift_lowdim.yaml", REPO / "scene_specs/lift_physics.yaml"),
}
SHIFT = REPO / "scene_specs/physics/shifted.yaml"
TARGETS = {"gain_under_shift": 0.20, "gain_under_nominal": -0.05}
DEFAULT_CONFIG = {"steps": 6000, "rollouts": 50, "eval_horizon": 600}  # the README figures


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
    parser.add_argument("--shift", type=Path, default=SHIFT, help="the --eval-physics RANGES")
    parser.add_argument(
        "--config",
        default=json.dumps(DEFAULT_CONFIG),
        help=f"TrainEvalConfig fields as JSON (default: {json.dumps(DEFAULT_CONFIG)})",
    )
    parser.add_argument("--out", type=Path, help="write the whole result (JSON) here")
    return parser.parse_args(argv)


def load_policy(path: Path) -> tuple[ChunkPolicy, ObsLayout]:
    """The low-dim policy `train_eval(save=path)` wrote, and its observation layout."""
    saved = torch.load(path, weights_only=False)
    config, layout = saved["config"], ObsLayout(**saved["layout"])
    policy = ChunkPolicy(layout.dim, config["horizon"], config["hidden"], config["layers"])
    policy.load_state_dict(saved["state_dict"])
    return policy.eval(), layout


def _rate(rollouts: list[dict]) -> float:
    return round(sum(r["success"] for r in rollouts) / len(rollouts), 4)


def compare(task: str, data: dict[str, Path], shift: Path, config: TrainEvalConfig) -> dict:
    """Both arms: train once, roll out under nominal and shifted physics."""
    start = time.perf_counter()
    resolved = resolve_spec(load_spec(SPECS[task][0]))
    physics = load_eval_physics(str(shift), resolved.scene)

    def log(line: str) -> None:
        if not line.startswith(("step ", "rollout ")):
            print(f"[{task}] {line}", file=sys.stderr, flush=True)

    arms = {}
    for arm, dataset in data.items():
        print(f"[{task}] {arm}: {dataset}", file=sys.stderr, flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            report = train_eval(dataset, resolved, config, log=log, save=Path(tmp) / "policy.pt")
            policy, layout = load_policy(Path(tmp) / "policy.pt")
        t0 = time.perf_counter()
        shifted = evaluate(resolved, policy, layout, config, physics=physics)
        log(f"{arm}: shifted physics {_rate(shifted)} in {time.perf_counter() - t0:.0f} s")
        arms[arm] = {
            **{k: v for k, v in report.items() if k != "observation"},
            "observation_dim": report["observation"]["dim"],
            "shifted": {
                "success_rate": _rate(shifted),
                "eval_time_s": round(time.perf_counter() - t0, 1),
                "per_rollout": shifted,
            },
        }
    rates = {
        arm: {"nominal": a["success_rate"], "shifted": a["shifted"]["success_rate"]}
        for arm, a in arms.items()
    }
    gains = {
        "gain_under_shift": round(rates["randomized"]["shifted"] - rates["nominal"]["shifted"], 4),
        "gain_under_nominal": round(
            rates["randomized"]["nominal"] - rates["nominal"]["nominal"], 4
        ),
    }
    seeds = [[r["seed"] for r in a["per_rollout"]] for a in arms.values()]
    seeds += [[r["seed"] for r in a["shifted"]["per_rollout"]] for a in arms.values()]
    return {
        "benchmark": "physics_randomization_transfer",
        "task": task,
        "spec": str(SPECS[task][0].relative_to(REPO)),
        "datasets": {arm: str(d) for arm, d in data.items()},
        "episodes": {arm: a["episodes"] for arm, a in arms.items()},
        "shift": physics.to_json(),
        "config": config.model_dump(),
        "rollouts": config.rollouts,
        "same_eval_seeds": all(s == seeds[0] for s in seeds),
        "success_rate": rates,
        **gains,
        "target": TARGETS,
        "meets_target": gains["gain_under_shift"] >= TARGETS["gain_under_shift"]
        and gains["gain_under_nominal"] >= TARGETS["gain_under_nominal"],
        "wall_s": round(time.perf_counter() - start, 1),
        "arms": arms,
    }


def main(argv: list[str] | None = None) -> dict | None:
    args = parse_args(argv)
    config = TrainEvalConfig(**json.loads(args.config))
    nominal_spec, randomized_spec = SPECS[args.task]
    data = {
        "nominal": args.nominal_data or load_spec(nominal_spec).output_dir(),
        "randomized": args.randomized_data or load_spec(randomized_spec).output_dir(),
    }
    for (arm, dataset), spec in zip(data.items(), (nominal_spec, randomized_spec), strict=True):
        if not (dataset / "manifest.json").is_file():
            make = (
                f".venv/bin/factory run {spec.relative_to(REPO)} --out {dataset} "
                "--attempts 240 --successes 180"
            )
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
    result = {**compare(args.task, data, args.shift, config), "command": command}
    short = {
        arm: {
            k: (v if k != "shifted" else {kk: vv for kk, vv in v.items() if kk != "per_rollout"})
            for k, v in r.items()
            if k not in ("per_rollout", "loss_curve", "config")
        }
        for arm, r in result["arms"].items()
    }
    print(json.dumps({**result, "arms": short}))  # per-rollout details: in --out
    if args.out is not None:
        args.out.write_text(json.dumps(result) + "\n")
    return result


if __name__ == "__main__":
    main()
