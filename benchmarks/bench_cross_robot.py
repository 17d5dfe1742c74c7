"""Generation success on every supported robot from the Panda human demos, physics only.

    nice .venv/bin/python benchmarks/bench_cross_robot.py --attempts 100
    .venv/bin/python benchmarks/bench_cross_robot.py --attempts 10 --robots Sawyer --tasks lift

For each task (Lift: lift_lowdim.yaml, 4 Panda human demos; Stack: stack_lowdim.yaml, 1 Panda
human demo, cubes placed within ±8 cm and ±0.8 rad yaw) and each robot `demofactory.robots.support`
supports, runs `--attempts` attempts with `task.robot` set to it, through the real generation
code (seeds as a dataset's, shard by shard; retries as the spec says), and prints one JSON line
per (task, robot) with the success rate and its ratio to the Panda's, measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from demofactory.robots.support import supported_robots
from demofactory.seeds.resolve import resolve_spec
from demofactory.specs.spec import load_spec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_generation_success import dataset_attempts  # noqa: E402 - the same attempt loop

TASKS = {"lift": "scene_specs/lift_lowdim.yaml", "stack": "scene_specs/stack_lowdim.yaml"}
REFERENCE = "Panda"  # the robot that recorded the seed demos


def run_robot(spec_path: str, robot: str, attempts: int) -> dict:
    spec = load_spec(spec_path, {"generation.attempts": attempts, "task.robot": robot})
    resolved = resolve_spec(spec)
    results, wall, failures = dataset_attempts(spec, resolved)
    successes = sum(r.success for r in results)
    return {
        "benchmark": "cross_robot",
        "spec": spec_path,
        "robot": robot,
        "fast_control": resolved.scene.fast_control,
        "attempts": attempts,
        "successes": successes,
        "success_rate": round(successes / attempts, 3),
        "failures": failures,
        "s_per_attempt": round(wall / attempts, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--attempts", type=int, default=100)
    parser.add_argument("--tasks", nargs="+", choices=sorted(TASKS), default=sorted(TASKS))
    parser.add_argument("--robots", nargs="+", default=None, help="default: every supported")
    args = parser.parse_args()
    robots = args.robots or [r for r in supported_robots() if r != REFERENCE]
    for task in args.tasks:
        reference = run_robot(TASKS[task], REFERENCE, args.attempts)
        print(json.dumps(reference), flush=True)
        for robot in robots:
            row = run_robot(TASKS[task], robot, args.attempts)
            base = reference["success_rate"]
            row["success_ratio_vs_panda"] = round(row["success_rate"] / base, 3) if base else None
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    from demofactory.robots import repairs as robot_repairs

    robot_repairs.install()  # before any env is built, as the CLI does
    from _common import run  # benchmarks/_common.py: --json-out PATH

    run(main)
