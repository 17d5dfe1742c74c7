"""Physics-only generation throughput against robosuite's own env.step loop, in one run.

    .venv/bin/python benchmarks/bench_generate.py [--spec scene_specs/stack.yaml] [--attempts 6]

Prints one JSON object: attempts, success rate, seconds per attempt, generated
control steps per second; bare control steps per second through the factory's
fast control loop and through robosuite's own `env.step` on the same env (the
reference), and bare `mujoco.mj_step` (the substeps of a control step and nothing else: the
physics limit). `ratio` = generator steps/s over robosuite env.step steps/s;
`fast_step_ratio` = fast loop over env.step, both with zero actions; `generator_over_mj_step`
and `fast_step_over_mj_step` = each over bare mj_step.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from factory.resolve import resolve_spec
from factory.spec import load_spec
from generators.mimicgen import AttemptPlan, attempt_seed, generate_attempt


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", default="scene_specs/stack.yaml")
    parser.add_argument("--attempts", type=int, default=6)
    args = parser.parse_args()
    spec = load_spec(args.spec)
    resolved = resolve_spec(spec)
    scene, demos, params = resolved.scene, resolved.demos, resolved.params

    start = time.perf_counter()
    attempts = [
        generate_attempt(scene, demos, AttemptPlan(i, 0, attempt_seed(spec.seed, 0, i)), params)
        for i in range(args.attempts)
    ]
    gen_s = time.perf_counter() - start
    steps = sum(a.length for a in attempts)

    bare = min(steps, 1500)
    fast_rate = _bare_rate(scene, demos, scene.step, bare)
    env_rate = _bare_rate(scene, demos, scene.env.step, bare)
    mj_rate = _mj_step_rate(scene, demos, bare)

    print(
        json.dumps(
            {
                "benchmark": "generate",
                "spec": args.spec,
                "attempts": args.attempts,
                "success_rate": sum(a.success for a in attempts) / args.attempts,
                "s_per_attempt": round(gen_s / args.attempts, 3),
                "generator_steps_per_s": round(steps / gen_s, 1),
                "fast_step_per_s": round(fast_rate, 1),
                "robosuite_env_step_per_s": round(env_rate, 1),
                "mj_step_control_steps_per_s": round(mj_rate, 1),
                "ratio": round((steps / gen_s) / env_rate, 3),
                "fast_step_ratio": round(fast_rate / env_rate, 3),
                "generator_over_mj_step": round((steps / gen_s) / mj_rate, 3),
                "fast_step_over_mj_step": round(fast_rate / mj_rate, 3),
            }
        )
    )


def _bare_rate(scene, demos, step, count: int) -> float:
    scene.reset_to(demos[0].start_state, _no_offsets())
    action = np.zeros(7)
    start = time.perf_counter()
    for _ in range(count):
        step(action)
    return count / (time.perf_counter() - start)


def _mj_step_rate(scene, demos, count: int) -> float:
    """Control steps a second of bare `mujoco.mj_step` (the physics limit): the substeps of a
    control step, nothing else, from the same start state."""
    import mujoco

    scene.reset_to(demos[0].start_state, _no_offsets())
    substeps = int(round(scene.env.control_timestep / scene.env.model_timestep))
    model, data = scene.model, scene.data
    start = time.perf_counter()
    for _ in range(count * substeps):
        mujoco.mj_step(model, data)
    return count / (time.perf_counter() - start)


def _no_offsets():
    from factory.sim import Placement

    return Placement({})


if __name__ == "__main__":
    main()
