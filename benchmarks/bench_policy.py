"""Does generated data train a better policy than the human seeds it came from? Lift and Stack.

    .venv/bin/python benchmarks/bench_policy.py --task lift --data out/lift_lowdim \
        --out bench_policy_lift.json
    .venv/bin/python benchmarks/bench_policy.py --task stack --data out/stack_lowdim \
        --out bench_policy_stack.json
    .venv/bin/python benchmarks/bench_policy.py          # both tasks, datasets at out/<spec name>

Per task: the spec's seed demos are written as a dataset (`factory seeds`, into
DATA-seeds), then the same behaviour-cloning recipe (`factory train-eval`: same
architecture, same number of gradient steps and batch size, same training seed)
is trained once on the seeds alone and once on the generated dataset, and both
policies are rolled out from the same evaluation seeds. Prints one JSON line per
task (per arm the train-eval report without per-rollout details, and the gain in
success rate); --out gets the whole result, per-rollout details included. A task
whose dataset does not exist prints a line saying so and how to make it (a
dataset takes tens of minutes to generate: this script never generates one).
Not a timed test: the figures are the point, the time is reported.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import demofactory  # noqa: F401  (selects the GL backend before robosuite)
from demofactory.build.seed_dataset import write_seed_dataset
from demofactory.seeds.resolve import resolve_spec
from demofactory.specs.spec import load_spec
from demofactory.train.config import TrainEvalConfig
from demofactory.train.train_eval import train_eval

REPO = Path(__file__).resolve().parents[1]
SPECS = {
    "lift": REPO / "scene_specs/lift_lowdim.yaml",
    "stack": REPO / "scene_specs/stack_lowdim.yaml",
}
TARGETS = {
    "lift": {"min_episodes": 200, "success_rate": 0.8},
    "stack": {"min_episodes": 500, "success_rate": 0.5},
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=[*sorted(SPECS), "all"], default="all")
    parser.add_argument(
        "--data",
        type=Path,
        help="the generated dataset of the task's low-dim spec "
        "(default: the spec's output dir, out/<name>); only with one --task",
    )
    parser.add_argument(
        "--out", type=Path, help="write the whole result (JSON; a list with --task all) here"
    )
    parser.add_argument(
        "--config", default="{}", help="TrainEvalConfig fields as JSON, e.g. '{\"steps\": 10000}'"
    )
    args = parser.parse_args(argv)
    if args.data is not None and args.task == "all":
        parser.error("--data needs one --task (lift or stack)")
    return args


def train_both(spec_path: Path, data: Path, config: TrainEvalConfig, label: str):
    """The spec's seed demos written as a dataset (DATA-seeds, `factory seeds`' writer), then
    the same train-eval recipe on it and on the generated DATA, rolled out from the same
    evaluation seeds: (resolved spec, the seeds dataset's summary, {arm: report without its
    observation layout}, {arm: wall seconds}). Also `bench_bimanual_policy.py`'s."""
    resolved = resolve_spec(load_spec(spec_path))
    seeds_dir = data.with_name(data.name + "-seeds")
    seeds = write_seed_dataset(resolved, seeds_dir)

    def log(line: str) -> None:
        if not line.startswith(("step ", "rollout ")):
            print(f"[{label}] {line}", file=sys.stderr, flush=True)

    arms, wall = {}, {}
    for arm, dataset in (("seeds_only", seeds_dir), ("generated", data)):
        print(f"[{label}] {arm}: {dataset}", file=sys.stderr, flush=True)
        start = time.perf_counter()
        report = train_eval(dataset, resolved, config, log=log)
        wall[arm] = round(time.perf_counter() - start, 1)
        arms[arm] = {
            **{k: v for k, v in report.items() if k != "observation"},
            "observation_dim": report["observation"]["dim"],
        }
    return resolved, seeds, arms, wall


def compare(task: str, data: Path, config: TrainEvalConfig) -> dict:
    """Seeds-only against generated data for one task: both train-eval reports and the gain."""
    start = time.perf_counter()
    spec_path = SPECS[task]
    _, seeds, arms, _ = train_both(spec_path, data, config, task)
    generated, baseline = arms["generated"], arms["seeds_only"]
    target = TARGETS[task]
    return {
        "benchmark": "policy_from_generated_data",
        "task": task,
        "spec": str(spec_path),
        "seed_demos": seeds["sources"],
        "config": config.model_dump(),
        "same_eval_seeds": [r["seed"] for r in generated["per_rollout"]]
        == [r["seed"] for r in baseline["per_rollout"]],
        "success_rate": {
            "seeds_only": baseline["success_rate"],
            "generated": generated["success_rate"],
        },
        "gain": round((generated["success_rate"] or 0) - (baseline["success_rate"] or 0), 4),
        "target": target,
        "meets_target": generated["episodes"] >= target["min_episodes"]
        and (generated["success_rate"] or 0) >= target["success_rate"],
        "wall_s": round(time.perf_counter() - start, 1),
        "arms": arms,
    }


def main(argv: list[str] | None = None) -> list[dict]:
    args = parse_args(argv)
    config = TrainEvalConfig(**json.loads(args.config))
    command = " ".join(
        [
            ".venv/bin/python",
            "benchmarks/bench_policy.py",
            *(sys.argv[1:] if argv is None else argv),
        ]
    )
    results = []
    for task in sorted(SPECS) if args.task == "all" else [args.task]:
        data = args.data or load_spec(SPECS[task]).output_dir()
        if not (data / "manifest.json").is_file():
            make = f".venv/bin/factory run {SPECS[task].relative_to(REPO)} --out {data}"
            print(
                json.dumps(
                    {
                        "benchmark": "policy_from_generated_data",
                        "task": task,
                        "skipped": f"no dataset at {data}; make it with: {make}",
                    }
                )
            )
            continue
        result = {**compare(task, data, config), "command": command}
        results.append(result)
        short = {
            arm: {k: v for k, v in r.items() if k not in ("per_rollout", "loss_curve", "config")}
            for arm, r in result["arms"].items()
        }
        print(json.dumps({**result, "arms": short}))  # per-rollout details: in --out
    if args.out is not None:
        whole = results[0] if args.task != "all" and results else results
        args.out.write_text(json.dumps(whole) + "\n")
    return results


if __name__ == "__main__":
    from demofactory.robots import repairs as robot_repairs

    robot_repairs.install()  # before any env is built, as the CLI does
    from _common import run  # benchmarks/_common.py: --json-out PATH

    run(main)
