"""Two-arm generation (TwoArmLift, a Panda pair, coordinated lift): success rate and speed
against bare `mujoco.mj_step` of the same model, in one run.

    nice .venv/bin/python benchmarks/bench_bimanual.py [--spec scene_specs/two_arm_lift.yaml]
        [--attempts 100]

Prints one JSON object: attempts, successes, success_rate (end-of-episode success, the task's
check over the final success_hold_steps), generator control steps per CPU second, the same
for robosuite's env.step with zero actions (what the generator steps through when the fast loop,
`demofactory.simulation.fast_step.PairStepper`, is refused: `control` says which it took) and
for bare mj_step (a control step's substeps and nothing else: the physics limit);
`generator_over_mj_step` and `env_step_over_mj_step` are the ratios.

Rates are per CPU second of this process (`time.process_time`), and the references run after
each attempt for a fifth of its steps, interleaved, so that other load on the machine lands on
both sides of each ratio. Bare mj_step is measured twice: from the first seed's start state
(`generator_over_mj_step`, the figure issue 31 sets: the arms in the air, nothing held), and
from every fifth state of the attempt just made (`..._at_attempt_states`: the same states the
generator stepped, contacts and all). The process runs with one OpenBLAS thread
(`demofactory/_blas.py`); with two, a spinning second thread was billed to both sides.
"""

from __future__ import annotations

import argparse
import json
import time

import demofactory  # noqa: F401 - before numpy: one OpenBLAS thread (factory/_blas.py)
import numpy as np
from demofactory.generators.bimanual import generate_bimanual_attempt
from demofactory.generators.mimicgen import AttemptPlan, attempt_seed
from demofactory.seeds.resolve import resolve_spec
from demofactory.simulation.scene import Placement
from demofactory.specs.adapters import bimanual_params
from demofactory.specs.spec import load_spec


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", default="scene_specs/two_arm_lift.yaml")
    parser.add_argument("--attempts", type=int, default=100)
    args = parser.parse_args()
    spec = load_spec(args.spec)
    resolved = resolve_spec(spec)
    scene, demos, params = resolved.scene, resolved.demos, bimanual_params(spec)
    # One attempt untimed first: the fast loop's numba kernels compile on first use after any
    # change to their module (seconds of CPU), and that belongs to no attempt.
    generate_bimanual_attempt(
        scene, demos, AttemptPlan(0, 0, attempt_seed(spec.seed, 0, 0)), params
    )
    gen_s, steps, successes, reasons = 0.0, 0, 0, {}
    ref_s, ref_steps = np.zeros(3), np.zeros(3)
    for i in range(args.attempts):
        plan = AttemptPlan(i, 0, attempt_seed(spec.seed, 0, i))
        start = time.process_time()
        attempt = generate_bimanual_attempt(scene, demos, plan, params)
        gen_s += time.process_time() - start
        steps += attempt.length
        successes += attempt.success
        if not attempt.success:
            kind = attempt.reason.split(":", 1)[0]
            reasons[kind] = reasons.get(kind, 0) + 1
        count = max(attempt.length // 5, 1)
        ref_s += [
            _env_step_s(scene, demos, count),
            _mj_step_s(scene, demos, count),
            _mj_step_at_states_s(scene, attempt.states[::5]),
        ]
        ref_steps += [count, count, len(attempt.states[::5])]
    env_rate, mj_rate, at_states_rate = ref_steps / ref_s
    gen_rate = steps / gen_s
    print(
        json.dumps(
            {
                "benchmark": "bimanual",
                "spec": args.spec,
                "env": spec.task.env,
                "configuration": spec.task.two_arm.configuration,
                "attempts": args.attempts,
                "successes": successes,
                "success_rate": round(successes / args.attempts, 3),
                "failures": reasons,
                "s_per_attempt": round(gen_s / args.attempts, 3),
                "generator_steps_per_s": round(gen_rate, 1),
                "env_step_per_s": round(env_rate, 1),
                "mj_step_control_steps_per_s": round(mj_rate, 1),
                "generator_over_mj_step": round(gen_rate / mj_rate, 3),
                "mj_step_at_attempt_states_per_s": round(at_states_rate, 1),
                "generator_over_mj_step_at_attempt_states": round(gen_rate / at_states_rate, 3),
                "env_step_over_mj_step": round(env_rate / mj_rate, 3),
                "control": (
                    "fast (PairStepper)"
                    if scene.fast_control
                    else f"robosuite env.step ({scene.fast_control_note})"
                ),
            }
        )
    )


def _env_step_s(scene, demos, count: int) -> float:
    """CPU seconds of `count` robosuite env.step calls (both arms, zero actions)."""
    scene.reset_to(demos[0].start_state, Placement({}))
    action = np.zeros(scene.action_dim)
    start = time.process_time()
    for _ in range(count):
        scene.env.step(action)
    return time.process_time() - start


def _mj_step_at_states_s(scene, states) -> float:
    """CPU seconds of bare mj_step for one control step's substeps from each of `states` (an
    attempt's own, every fifth): the physics of the states the generator visits, contacts
    included (a hand closed on a can costs more than hands in the air at the start)."""
    import mujoco

    substeps = int(round(scene.env.control_timestep / scene.env.model_timestep))
    model, data = scene.model, scene.data
    total = 0.0
    for state in states:
        scene.set_state(state)
        start = time.process_time()
        for _ in range(substeps):
            mujoco.mj_step(model, data)
        total += time.process_time() - start
    return total


def _mj_step_s(scene, demos, count: int) -> float:
    """CPU seconds of bare mj_step for `count` control steps' substeps, same model and start."""
    import mujoco

    scene.reset_to(demos[0].start_state, Placement({}))
    substeps = int(round(scene.env.control_timestep / scene.env.model_timestep))
    model, data = scene.model, scene.data
    start = time.process_time()
    for _ in range(count * substeps):
        mujoco.mj_step(model, data)
    return time.process_time() - start


if __name__ == "__main__":
    from demofactory.robots import repairs as robot_repairs

    robot_repairs.install()  # before any env is built, as the CLI does
    from _common import run  # benchmarks/_common.py: --json-out PATH

    run(main)
