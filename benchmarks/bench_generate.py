"""Physics-only generation throughput against robosuite's own env.step loop, in one run.

    .venv/bin/python benchmarks/bench_generate.py [--spec scene_specs/stack.yaml] [--attempts 6]

Prints one JSON object: attempts, success rate, seconds per attempt, generated
control steps per second; bare control steps per second through the factory's
fast control loop and through robosuite's own `env.step` on the same env (the
reference), and bare `mujoco.mj_step` (the substeps of a control step and nothing else: the
physics limit). `ratio` = generator steps/s over robosuite env.step steps/s;
`fast_step_ratio` = fast loop over env.step, both with zero actions; `generator_over_mj_step`
and `fast_step_over_mj_step` = each over bare mj_step.

Every rate is per CPU second of this process (`time.process_time`), so other work on the machine
does not skew the ratios; the references are measured after each attempt,
interleaved with the attempts, so that a drift (another process's load) lands on both sides.
"""

from __future__ import annotations

import argparse
import json
import time

import demofactory  # noqa: F401 - before numpy: one OpenBLAS thread (factory/_blas.py)
import numpy as np
from demofactory.generators.mimicgen import AttemptPlan, attempt_seed, generate_attempt
from demofactory.seeds.resolve import resolve_spec
from demofactory.specs.spec import load_spec


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", default="scene_specs/stack.yaml")
    parser.add_argument("--attempts", type=int, default=6)
    args = parser.parse_args()
    spec = load_spec(args.spec)
    resolved = resolve_spec(spec)
    scene, demos, params = resolved.scene, resolved.demos, resolved.params

    # Each attempt is followed by the references for as many control steps as it took (env.step,
    # 5x slower, for a fifth of them): interleaved, a change in the machine's load lands on both
    # sides of each ratio.
    attempts, gen_s, ref_s, ref_steps = [], 0.0, np.zeros(3), np.zeros(3)
    for i in range(args.attempts):
        start = time.process_time()
        attempt = generate_attempt(
            scene, demos, AttemptPlan(i, 0, attempt_seed(spec.seed, 0, i)), params
        )
        gen_s += time.process_time() - start
        attempts.append(attempt)
        counts = (attempt.length, max(attempt.length // 5, 1), attempt.length)
        ref_s += _references(scene, demos, counts)
        ref_steps += counts
    steps = sum(a.length for a in attempts)
    fast_rate, env_rate, mj_rate = ref_steps / ref_s

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


def _references(scene, demos, counts: tuple[int, int, int]) -> np.ndarray:
    """CPU seconds of the fast loop, robosuite's env.step and bare mj_step for `counts` control
    steps each, from the first demo's start state."""
    fast, env, bare = counts
    return np.array(
        [
            fast / _bare_rate(scene, demos, scene.step, fast),
            env / _bare_rate(scene, demos, scene.env.step, env),
            bare / _mj_step_rate(scene, demos, bare),
        ]
    )


def _bare_rate(scene, demos, step, count: int) -> float:
    scene.reset_to(demos[0].start_state, _no_offsets())
    action = np.zeros(7)
    start = time.process_time()
    for _ in range(count):
        step(action)
    return count / (time.process_time() - start)


def _mj_step_rate(scene, demos, count: int) -> float:
    """Control steps a second of bare `mujoco.mj_step` (the physics limit): the substeps of a
    control step, nothing else, from the same start state."""
    import mujoco

    scene.reset_to(demos[0].start_state, _no_offsets())
    substeps = int(round(scene.env.control_timestep / scene.env.model_timestep))
    model, data = scene.model, scene.data
    start = time.process_time()
    for _ in range(count * substeps):
        mujoco.mj_step(model, data)
    return count / (time.process_time() - start)


def _no_offsets():
    from demofactory.simulation.scene import Placement

    return Placement({})


if __name__ == "__main__":
    from demofactory.robots import repairs as robot_repairs

    robot_repairs.install()  # before any env is built, as the CLI does
    from _common import run  # benchmarks/_common.py: --json-out PATH

    run(main)
