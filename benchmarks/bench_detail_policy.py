"""Policies do not notice `render.detail: auto`: the image policy trained on decimated frames,
evaluated in rollouts rendered at full detail, against the same policy trained on full frames.

    .venv/bin/python benchmarks/bench_detail_policy.py [--spec scene_specs/lift_img.yaml]
        [--work out/detail_policy] [--workers 2] [--rollouts 50]

1. `factory run SPEC` twice into --work: as it is (`full/`) and with `render.detail: auto`
   (`auto/`, the spec written beside it with its seed demos made absolute). The physics is
   the same bit for bit (tests/simulation/test_render_detail.py), so both hold the same
   trajectories; only the pixels differ. A dataset already in place is kept (`factory run` resumes).
2. `factory train-eval DATASET --spec SPEC --policy vla --camera agentview` on each: the
   rollouts always use SPEC, i.e. full detail, from the same evaluation seeds.

Prints one JSON object: both reports' success rates and `difference` (auto - full, points);
the issue's target is |difference| <= 6 points over 50 rollouts each. ~10+ minutes of CPU per
train-eval on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_episodes_per_hour import spec_with_detail  # noqa: E402


def factory(*args: str) -> None:
    command = [str(Path(sys.executable).parent / "factory"), *args]
    print("+", " ".join(command), file=sys.stderr, flush=True)
    subprocess.run(command, check=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", type=Path, default=REPO / "scene_specs" / "lift_img.yaml")
    parser.add_argument("--work", type=Path, default=REPO / "out" / "detail_policy")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rollouts", type=int, default=50)
    parser.add_argument("--camera", default="agentview")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    auto_spec = spec_with_detail(args.spec, "auto", args.work / "spec_auto.yaml")
    reports = {}
    for name, spec in (("full", args.spec), ("auto", auto_spec)):
        data = args.work / name
        factory("run", str(spec), "--out", str(data), "--workers", str(args.workers))
        report = args.work / f"report_{name}.json"
        factory(
            "train-eval",
            str(data),
            "--spec",
            str(args.spec),  # rollouts at full detail, whichever frames trained the policy
            "--policy",
            "vla",
            "--camera",
            args.camera,
            "--rollouts",
            str(args.rollouts),
            "--out",
            str(report),
            "--quiet",
        )
        reports[name] = json.loads(report.read_text())
    rates = {name: r["success_rate"] for name, r in reports.items()}
    print(
        json.dumps(
            {
                "benchmark": "detail_policy",
                "spec": str(args.spec),
                "rollouts": args.rollouts,
                "success_rate": rates,
                "difference_points": round(100 * (rates["auto"] - rates["full"]), 1),
                "target_points": 6,
            }
        )
    )


if __name__ == "__main__":
    from _common import run  # benchmarks/_common.py: --json-out PATH

    run(main)
