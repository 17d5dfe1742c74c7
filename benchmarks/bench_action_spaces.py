"""Relabeled action spaces replayed with robosuite's matching controllers: Lift and Stack.

    .venv/bin/python benchmarks/bench_action_spaces.py                      # 12 attempts each
    .venv/bin/python benchmarks/bench_action_spaces.py --attempts 30
    .venv/bin/python benchmarks/bench_action_spaces.py --data lift=out/lift12 --data stack=out/s

Per task a small low-dimensional dataset (scene_specs/<task>_lowdim.yaml, `--attempts`
attempts; an existing one with --data) is exported twice with `factory export --to gr00t`:
once as it is (the reference) and once with `--actions abs_eef,joint_pos,delta_eef`, which
relabels every episode and replays each relabeling from the episode's recorded start with the
matching controller (OSC_POSE absolute, JOINT_POSITION absolute, OSC_POSE delta). Prints one
JSON line per task: per space the replay success rate and grip-site position error (from the
export's meta/action_spaces.json), the target (>= 0.95 for abs_eef and joint_pos), and the
time of the relabeled export against the plain one (ratio).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SPECS = {
    "lift": REPO / "scene_specs/lift_lowdim.yaml",
    "stack": REPO / "scene_specs/stack_lowdim.yaml",
}
TARGET = 0.95


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=12)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--task", choices=[*SPECS, "all"], default="all")
    parser.add_argument("--data", action="append", default=[], help="TASK=DIR, an existing dataset")
    parser.add_argument("--out", type=Path, default=REPO / "out/bench_action_spaces")
    return parser.parse_args(argv)


def cli(*args: str) -> None:
    import contextlib
    import io

    from demofactory.cli.main import main

    with contextlib.redirect_stdout(io.StringIO()):  # the commands' own summaries: not ours
        code = main(list(args))
    if code != 0:
        sys.exit(f"factory {' '.join(args)} failed ({code})")


def timed_export(data: Path, out: Path, *extra: str) -> float:
    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    cli("export", str(data), "--to", "gr00t", str(out), *extra)
    return time.perf_counter() - start


def bench_task(task: str, data: Path | None, args) -> dict:
    if data is None:
        data = args.out / f"{task}_{args.attempts}"
        if not (data / "manifest.json").is_file():
            cli(
                "run", str(SPECS[task]), "--out", str(data), "--attempts", str(args.attempts),
                "--workers", str(args.workers), "--no-progress",
            )  # fmt: skip
    plain = timed_export(data, args.out / f"{task}_plain")
    out = args.out / f"{task}_relabeled"
    relabeled = timed_export(data, out, "--actions", "abs_eef,joint_pos,delta_eef")
    report = json.loads((out / "meta/action_spaces.json").read_text())
    spaces = {name: entry["replay"] for name, entry in report["spaces"].items()}
    return {
        "bench": "action_spaces",
        "task": task,
        "dataset": str(data),
        "episodes": spaces["abs_eef"]["episodes"],
        "spaces": spaces,
        "target": TARGET,
        "meets_target": all(spaces[n]["success_rate"] >= TARGET for n in ("abs_eef", "joint_pos")),
        "plain_export_s": round(plain, 2),
        "relabeled_export_s": round(relabeled, 2),
        "ratio": round(relabeled / plain, 2),
    }


def main(argv=None) -> None:
    import demofactory  # noqa: F401  (selects the GL backend before robosuite)

    args = parse_args(argv)
    given = dict(item.split("=", 1) for item in args.data)
    tasks = list(SPECS) if args.task == "all" else [args.task]
    for task in tasks:
        data = Path(given[task]) if task in given else None
        print(json.dumps(bench_task(task, data, args)), flush=True)


if __name__ == "__main__":
    from _common import run  # benchmarks/_common.py: --json-out PATH

    run(main)
