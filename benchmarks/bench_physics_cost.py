"""What physics randomization costs generation, against the same attempts without it, in one run.

    .venv/bin/python benchmarks/bench_physics_cost.py [--spec scene_specs/lift_physics.yaml] \
        [--attempts 6]

One scene, the same attempt seeds, alternating: attempt i with nominal physics (the reference),
then attempt i under its draw (`ShardWorker.run_attempt`'s path: draw, `Scene.set_physics`,
generate). A draw changes the trajectory (its length, its contacts), so throughput is compared
in generated control steps per second; `apply_ms` times the mechanism alone (draw + restore +
apply + mj_setConst), once per attempt. Prints one JSON object; `cost` = 1 - ratio.
"""

from __future__ import annotations

import argparse
import json
import time

from demofactory.generators.mimicgen import AttemptPlan, attempt_seed, generate_attempt
from demofactory.seeds.resolve import resolve_spec
from demofactory.simulation.physics import attempt_physics
from demofactory.specs.spec import load_spec


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", default="scene_specs/lift_physics.yaml")
    parser.add_argument("--attempts", type=int, default=6)
    args = parser.parse_args()
    spec = load_spec(args.spec)
    if spec.physics is None:
        raise SystemExit(f"{args.spec}: no physics: section to measure")
    resolved = resolve_spec(spec)
    scene, demos, params = resolved.scene, resolved.demos, resolved.params
    totals = {"nominal": [0.0, 0, 0], "physics": [0.0, 0, 0]}  # seconds, steps, successes
    # The physics arm by outcome: whether the steps of draws that fail the task (wide ranges
    # fail half the attempts, a hand pressing on the cube to the horizon) simulate slower.
    outcomes = {True: [0.0, 0], False: [0.0, 0]}  # seconds, steps
    apply_s = 0.0
    for i in range(args.attempts):  # interleaved: load on the shared machine hits both alike
        plan = AttemptPlan(i, 0, attempt_seed(spec.seed, 0, i))
        for label in ("nominal", "physics"):
            start = time.perf_counter()
            draw = attempt_physics(scene, plan.seed) if label == "physics" else None
            scene.set_physics(draw)
            if draw is not None:
                apply_s += time.perf_counter() - start
            attempt = generate_attempt(scene, demos, plan, params)
            elapsed = time.perf_counter() - start
            total = totals[label]
            total[0] += elapsed
            total[1] += attempt.length
            total[2] += attempt.success
            if label == "physics":
                outcomes[attempt.success][0] += elapsed
                outcomes[attempt.success][1] += attempt.length
    scene.set_physics(None)
    rate = {label: steps / seconds for label, (seconds, steps, _) in totals.items()}
    ratio = rate["physics"] / rate["nominal"]
    print(
        json.dumps(
            {
                "benchmark": "physics_cost",
                "spec": args.spec,
                "attempts": args.attempts,
                "steps_per_s_nominal": round(rate["nominal"], 1),
                "steps_per_s_physics": round(rate["physics"], 1),
                "successes": {label: total[2] for label, total in totals.items()},
                "steps_per_s_physics_by_outcome": {
                    ("success" if ok else "failure"): round(steps / seconds, 1) if steps else None
                    for ok, (seconds, steps) in outcomes.items()
                },
                "apply_ms": round(1e3 * apply_s / args.attempts, 3),
                "s_per_attempt_physics": round(totals["physics"][0] / args.attempts, 3),
                "ratio": round(ratio, 3),
                "cost": round(1.0 - ratio, 3),
            }
        )
    )


if __name__ == "__main__":
    from demofactory.robots import repairs as robot_repairs

    robot_repairs.install()  # before any env is built, as the CLI does
    from _common import run  # benchmarks/_common.py: --json-out PATH

    run(main)
