"""Does one policy trained on several robots' data do as well on each as that robot's own policy?

    .venv/bin/python benchmarks/bench_mixed_policy.py --dataset out/lift_mixed_lowdim \\
        --rollouts 20 --out bench_mixed_policy.json
    .venv/bin/python benchmarks/bench_mixed_policy.py --successes 200   # generates it first

The dataset: scene_specs/mixed/lift_mixed_lowdim.yaml (Lift on the Panda and the Sawyer, no
cameras), made with `factory run` when --dataset does not exist yet. Then the same
behaviour-cloning recipe (`factory train-eval`: architecture, gradient steps, batch size,
training seed) is trained once on every robot's episodes (the robot's one-hot in the
observation, each robot's observations normalized with its own statistics) and once per robot on
that robot's episodes alone (`--embodiment`): the same episodes of that robot in both, so the
same number per robot. The mixed policy is rolled out on each robot, each robot's own policy on
it, from the same evaluation seeds (the same placements). The reference is measured in the same
run: per robot the ratio mixed success / own success, against the target 0.9
(issue 16: "at least 90 % of the success of a policy trained on that robot's data alone").

Prints one JSON line (per arm the train-eval report without per-rollout details); --out gets the
whole result. Not a timed test: the figures are the point, the time is reported.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import demofactory  # noqa: F401  (selects the GL backend before robosuite)
from demofactory.seeds.resolve import resolve_spec
from demofactory.specs.spec import load_spec
from demofactory.train.config import TrainEvalConfig
from demofactory.train.train_eval import train_eval

REPO = Path(__file__).resolve().parents[1]
SPEC = REPO / "scene_specs/mixed/lift_mixed_lowdim.yaml"
TARGET = 0.9  # mixed success / own success, per robot
DROPPED = ("per_rollout", "loss_curve", "config", "observation")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, default=SPEC, help="a mixed-robot low-dim spec")
    parser.add_argument(
        "--dataset", type=Path, help="its dataset (default: out/<spec name>); made when missing"
    )
    parser.add_argument(
        "--successes", type=int, default=200, help="episodes to generate when making the dataset"
    )
    parser.add_argument("--workers", type=int, default=1, help="generation workers")
    parser.add_argument("--rollouts", type=int, default=20, help="evaluation rollouts per robot")
    parser.add_argument(
        "--config", default="{}", help="TrainEvalConfig fields as JSON, e.g. '{\"steps\": 3000}'"
    )
    parser.add_argument("--out", type=Path, help="write the whole result (JSON) here")
    return parser.parse_args(argv)


def make_dataset(spec: Path, dataset: Path, successes: int, workers: int) -> float:
    """`factory run` into `dataset`; its wall time (s)."""
    start = time.perf_counter()
    command = [
        str(REPO / ".venv/bin/factory"), "run", str(spec), "--out", str(dataset),
        "--successes", str(successes), "--workers", str(workers), "--no-progress",
    ]  # fmt: skip
    print(" ".join(command), file=sys.stderr, flush=True)
    subprocess.run(command, check=True, stdout=sys.stderr)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    start = time.perf_counter()
    spec = load_spec(args.spec)
    dataset = args.dataset or spec.output_dir()
    generate_s = None
    if not (dataset / "manifest.json").is_file():
        generate_s = round(make_dataset(args.spec, dataset, args.successes, args.workers), 1)
    config = TrainEvalConfig(**{"rollouts": args.rollouts, **json.loads(args.config)})
    resolved = resolve_spec(spec)

    def log(line: str) -> None:
        if not line.startswith("step ") and "rollout seed" not in line:
            print(line, file=sys.stderr, flush=True)

    print("mixed: every robot", file=sys.stderr, flush=True)
    arms = {"mixed": train_eval(dataset, resolved, config, log=log)}
    robots = arms["mixed"]["embodiments"]
    for robot in robots:
        print(f"own: {robot}", file=sys.stderr, flush=True)
        own = config.model_copy(update={"embodiment": robot})
        arms[robot] = train_eval(dataset, resolved, own, log=log)
    per_robot = {}
    for robot in robots:
        mixed, own = arms["mixed"]["per_robot"][robot], arms[robot]["per_robot"][robot]
        ratio = (
            None
            if not own["success_rate"]
            else round(mixed["success_rate"] / own["success_rate"], 4)
        )
        per_robot[robot] = {
            "episodes": own["episodes"],
            "same_episodes_in_both": mixed["episodes"] == own["episodes"],
            "rollouts": own["rollouts"],
            "mixed_success": mixed["success_rate"],
            "own_success": own["success_rate"],
            "ratio": ratio,
            "meets_target": ratio is not None and ratio >= TARGET,
        }
    command = " ".join(
        [".venv/bin/python", "benchmarks/bench_mixed_policy.py", *(argv or sys.argv[1:])]
    )
    result = {
        "benchmark": "mixed_robot_policy",
        "spec": str(args.spec),
        "dataset": str(dataset),
        "generate_s": generate_s,
        "config": config.model_dump(),
        "target_ratio": TARGET,
        "per_robot": per_robot,
        "meets_target": all(r["meets_target"] for r in per_robot.values()),
        "wall_s": round(time.perf_counter() - start, 1),
        "command": command,
        "arms": arms,
    }
    short = {a: {k: v for k, v in r.items() if k not in DROPPED} for a, r in arms.items()}
    print(json.dumps({**result, "arms": short}))
    if args.out is not None:
        args.out.write_text(json.dumps(result) + "\n")
    return result


if __name__ == "__main__":
    from demofactory.robots import repairs as robot_repairs

    robot_repairs.install()  # before any env is built, as the CLI does
    from _common import run  # benchmarks/_common.py: --json-out PATH

    run(main)
