"""Language and pixels: the image policy (`train-eval --policy vla`) on Lift and on lift_colour.

    .venv/bin/python benchmarks/bench_vla.py --task lift_img --data out/lift_img --out vla_lift.json
    .venv/bin/python benchmarks/bench_vla.py --task language --data out/lift_colour \
        --out vla_language.json

lift_img: the VLA policy (agentview frames + instruction + proprio, no object pose) trained on
generated Lift data and rolled out 50 times; the reference, trained on the same data and rolled
out from the same evaluation seeds, is the privileged-state MLP (object poses from the MuJoCo
state). Target: >= 80 % success.

language: lift_colour (three cubes of drawn colours; only the instruction says which to lift;
success needs the named cube up and the others down). The same policy twice: trained on the
episodes' own instructions, and on instructions shuffled across episodes (the control, which
can only guess the cube). Targets: >= 70 % with the instructions, <= 40 % shuffled.

Prints one JSON line per task (reports without per-rollout details); --out gets everything.
Not a timed test: the figures are the point, the time is reported. A task whose dataset does
not exist prints a line saying how to make it (this script never generates one).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import factory  # noqa: F401  (selects the GL backend before robosuite)
from factory.resolve import resolve_spec
from factory.spec import load_spec
from factory.train_eval import TrainEvalConfig, train_eval

REPO = Path(__file__).resolve().parents[1]
TASKS = {
    "lift_img": {"spec": REPO / "scene_specs/lift_img.yaml", "camera": "agentview"},
    "language": {"spec": REPO / "scene_specs/lift_colour.yaml", "camera": "frontcam"},
}
# Measured on the 2 shared cores (README, "Language and pixels"): ~0.45 CPU-s a step of batch 64
# with one thread, twice that with two under contention; 1,500 steps need ~12 min of one free core.
VLA_DEFAULTS = {
    "policy": "vla",
    "steps": 1500,
    "batch_size": 64,
    "lr": 1e-3,
    "hidden": 256,
    "layers": 2,
    "rollouts": 50,
    "threads": 1,
}
TARGETS = {
    "lift_img": {"success_rate": 0.8},
    "language": {"success_rate": 0.7, "shuffled_at_most": 0.4},
}
BULKY = ("per_rollout", "loss_curve", "config", "observation")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=sorted(TASKS), required=True)
    parser.add_argument("--data", type=Path, help="the dataset (default: out/<spec name>)")
    parser.add_argument("--out", type=Path, help="write the whole result (JSON) here")
    parser.add_argument(
        "--config", default="{}", help="TrainEvalConfig fields over the VLA defaults, as JSON"
    )
    parser.add_argument(
        "--no-reference", action="store_true", help="lift_img: skip the privileged MLP"
    )
    return parser.parse_args(argv)


def run_arm(name: str, dataset: Path, resolved, config: TrainEvalConfig) -> dict:
    def log(line: str) -> None:  # loss every 5 % of training, a line per phase and rollout
        print(f"[{name}] {line}", file=sys.stderr, flush=True)

    print(f"[{name}] {dataset}: {config.model_dump_json()}", file=sys.stderr, flush=True)
    return train_eval(dataset, resolved, config, log=log)


def lift_img(dataset: Path, overrides: dict, reference: bool) -> dict:
    resolved = resolve_spec(load_spec(TASKS["lift_img"]["spec"]))
    config = TrainEvalConfig(**{**VLA_DEFAULTS, "camera": "agentview", **overrides})
    arms = {"vla": run_arm("vla", dataset, resolved, config)}
    if reference:  # the MLP's own defaults (bench_policy.py), the same rollouts
        mlp = TrainEvalConfig(rollouts=config.rollouts, eval_horizon=config.eval_horizon)
        arms["privileged_mlp"] = run_arm("mlp", dataset, resolved, mlp)
    rate = arms["vla"]["success_rate"]
    ref = arms.get("privileged_mlp", {}).get("success_rate")
    return {
        "success_rate": {arm: r["success_rate"] for arm, r in arms.items()},
        "ratio_to_privileged": round(rate / ref, 3) if ref else None,
        "meets_target": rate >= TARGETS["lift_img"]["success_rate"],
        "arms": arms,
    }


def language(dataset: Path, overrides: dict) -> dict:
    resolved = resolve_spec(load_spec(TASKS["language"]["spec"]))
    config = TrainEvalConfig(**{**VLA_DEFAULTS, "camera": "frontcam", **overrides})
    shuffled = config.model_copy(update={"shuffle_instructions": True})
    arms = {
        "instructed": run_arm("instructed", dataset, resolved, config),
        "shuffled": run_arm("shuffled", dataset, resolved, shuffled),
    }
    rates = {arm: r["success_rate"] for arm, r in arms.items()}
    target = TARGETS["language"]
    return {
        "success_rate": rates,
        "same_eval_seeds": [r["seed"] for r in arms["instructed"]["per_rollout"]]
        == [r["seed"] for r in arms["shuffled"]["per_rollout"]],
        "meets_target": rates["instructed"] >= target["success_rate"]
        and rates["shuffled"] <= target["shuffled_at_most"],
        "arms": arms,
    }


def main(argv: list[str] | None = None) -> dict | None:
    args = parse_args(argv)
    overrides = json.loads(args.config)
    spec = TASKS[args.task]["spec"]
    data = args.data or load_spec(spec).output_dir()
    if not (data / "manifest.json").is_file():
        make = f".venv/bin/factory run {spec.relative_to(REPO)} --out {data}"
        print(json.dumps({"benchmark": "vla", "task": args.task, "skipped": f"make it: {make}"}))
        return None
    start = time.perf_counter()
    if args.task == "lift_img":
        result = lift_img(data, overrides, reference=not args.no_reference)
    else:
        result = language(data, overrides)
    arms = result["arms"]
    result = {
        "benchmark": "vla",
        "task": args.task,
        "dataset": str(data),
        "episodes": next(iter(arms.values()))["episodes"],
        "spec": str(spec.relative_to(REPO)),
        "config": {**VLA_DEFAULTS, **overrides},
        "target": TARGETS[args.task],
        **result,
        "wall_s": round(time.perf_counter() - start, 1),
        "command": " ".join([".venv/bin/python", "benchmarks/bench_vla.py", *sys.argv[1:]]),
    }
    short = {arm: {k: v for k, v in r.items() if k not in BULKY} for arm, r in arms.items()}
    print(json.dumps({**result, "arms": short}))
    if args.out is not None:
        args.out.write_text(json.dumps(result) + "\n")
    return result


if __name__ == "__main__":
    main()
