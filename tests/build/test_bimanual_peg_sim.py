"""Two arms without grippers: robosuite's TwoArmPegInHole (a Panda pair with bare wrists, the peg
on the right hand, the hole on the left). The shipped spec resolves, its scripted seeds are cut
per arm, a fixed-seed attempt puts the peg through the hole, and a shard holds 6 action and 7
state columns per arm."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import webdataset as wds
from demofactory.build.bimanual_worker import BimanualShardWorker
from demofactory.build.records import ShardTask
from demofactory.generators.bimanual import generate_bimanual_attempt
from demofactory.generators.mimicgen import AttemptPlan, attempt_seed
from demofactory.seeds.resolve import resolve_spec
from demofactory.seeds.script import base_state, record_demo
from demofactory.specs.adapters import bimanual_params
from demofactory.specs.spec import load_spec

# One env, three short demos annotated, a few attempts through the fast loop: ~3 s (the two
# `slow` tests, a CLI run and an attempt through env.step, double it).
pytestmark = pytest.mark.sim

SPEC = Path(__file__).parents[2] / "scene_specs" / "two_arm_peg_in_hole.yaml"


@pytest.fixture(scope="module")
def resolved():
    spec = load_spec(SPEC, {"generation.attempts": 1, "generation.attempts_per_shard": 1})
    return resolve_spec(spec)


def test_the_spec_resolves_with_bare_wrists_and_the_fast_loop(resolved):
    from demofactory.simulation.bimanual import two_arm_layouts

    scene = resolved.scene
    assert scene.fast_control, scene.fast_control_note  # PairStepper, no fallback
    assert [scene.has_gripper_of(arm) for arm in scene.arms] == [False, False]
    assert scene.action_dim == 12 and scene.proprio().shape == (14,)
    state, action = scene.layouts()
    assert (state, action) == two_arm_layouts(resolved.spec.task)  # spec-only == measured
    assert [name for name, _ in action] == [
        "right_delta_pos",
        "right_delta_axis_angle",
        "left_delta_pos",
        "left_delta_axis_angle",
    ]


def test_seed_demos_are_cut_per_arm_into_one_coordinated_window(resolved):
    from demofactory.seeds.annotate_bimanual import arm_timelines

    assert len(resolved.demos) == 3
    for demo in resolved.demos:
        assert demo.segments == ((0, demo.demo.length), (0, demo.demo.length))
        assert not demo.gripper["right"].any() and not demo.gripper["left"].any()  # none
    arms = arm_timelines(resolved.spec, resolved.demos[0])
    assert [row["name"] for row in arms["right"]] == ["right_insert"]
    assert [row["name"] for row in arms["left"]] == ["left_insert"]


def test_a_fixed_seed_attempt_puts_the_peg_through_the_hole(resolved):
    spec, scene = resolved.spec, resolved.scene
    plan = AttemptPlan(0, 0, attempt_seed(spec.seed, 0, 0))
    attempt = generate_bimanual_attempt(scene, resolved.demos, plan, bimanual_params(spec))
    assert attempt.success, attempt.reason
    assert attempt.actions.shape[1] == 12 and attempt.proprio.shape[1] == 14
    (group,) = attempt.provenance["coordinated"]
    assert group["subtasks"] == [0, 1] and group["object"] == "hole"
    # the variation: every arm joint offset from the first seed demo's start, within 0.02 rad
    offsets = attempt.provenance["joint_offsets"]
    assert {arm: len(v) for arm, v in offsets.items()} == {"right": 7, "left": 7}
    assert 0 < np.abs(np.concatenate(list(offsets.values()))).max() <= 0.02
    start = resolved.demos[0].start_state
    assert np.abs(attempt.states[0][1:15] - start[1:15]).max() > 1e-4
    scene.set_state(attempt.states[-1])
    assert scene.env._check_success()  # robosuite's own check on the recorded last state


def test_factory_script_sends_no_gripper_command(resolved):
    scene = resolved.scene
    demo = record_demo(scene, 0, base_state(scene))
    assert demo.actions.shape == (145, 12) and demo.tries == 1


def test_a_shard_holds_six_action_and_seven_state_columns_per_arm(resolved, tmp_path):
    worker = BimanualShardWorker(resolved.spec, resolved.demos, resolved.scene)
    result = worker.run_shard(ShardTask(0, (1,)), tmp_path)
    assert result.successes == 1, result.failures
    samples = list(wds.WebDataset(str(next(tmp_path.glob("shards/*.tar"))), shardshuffle=False))
    assert len(samples) == result.episodes[0].length
    action, state = (np.load(io.BytesIO(samples[0][k])) for k in ("action.npy", "state.npy"))
    assert action.shape == (12,) and state.shape == (14,)


@pytest.mark.slow  # a CLI subprocess building the env again: 2-4 s
def test_validate_says_the_fast_loop_steps_bare_wrists(tmp_path):
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "demofactory.cli.main", "validate", str(SPEC)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,  # keeps a hung run from hanging the suite; nothing asserts on time
    )
    assert result.returncode == 0, result.stderr
    assert "control: fast (demofactory.simulation.fast_step.PairStepper: both robots' OSC, " in (
        result.stdout
    )
    assert "no grippers)" in result.stdout and "2 subtasks" in result.stdout


def test_a_generated_attempt_resimulates_from_its_provenance(resolved):
    """The joint-noise draw is in the provenance: re-simulation starts where the attempt did."""
    from demofactory.simulation.resimulate import resimulate

    spec, scene = resolved.spec, resolved.scene
    plan = AttemptPlan(2, 0, attempt_seed(spec.seed, 0, 2))
    attempt = generate_bimanual_attempt(scene, resolved.demos, plan, bimanual_params(spec))
    states = resimulate(scene, resolved.demos[0], attempt.provenance, attempt.actions, None)
    np.testing.assert_array_equal(states, attempt.states)


@pytest.mark.slow  # a second env and an attempt through env.step: 2-3 s
def test_an_attempt_is_the_same_through_the_fast_loop_and_env_step(resolved):
    """Bare wrists through robosuite's own env.step (task.fast_control: false, the fallback):
    the same actions and success as through PairStepper. As in tests/build/test_bimanual_sim.py,
    robosuite's controllers are marked stale after each reset (its first env.step would read
    their state cached before the demo's start was restored)."""
    from demofactory.simulation.bimanual import TwoArmScene

    spec = resolved.spec
    slow_spec = load_spec(SPEC, {"task.fast_control": False})
    slow = TwoArmScene(slow_spec)
    assert not slow.fast_control and slow.fast_control_note == "task.fast_control: false"
    reset_to = slow.reset_to

    def fresh_reset_to(*args, **kwargs):
        reset_to(*args, **kwargs)
        for robot in slow.env.robots:
            for controller in robot.part_controllers.values():
                controller.new_update = True

    slow.reset_to = fresh_reset_to
    plan = AttemptPlan(3, 0, attempt_seed(spec.seed, 0, 3))
    fast = generate_bimanual_attempt(resolved.scene, resolved.demos, plan, bimanual_params(spec))
    other = generate_bimanual_attempt(slow, resolved.demos, plan, bimanual_params(slow_spec))
    assert other.success and fast.success, (other.reason, fast.reason)
    assert np.array_equal(other.actions, fast.actions)
    np.testing.assert_allclose(other.states, fast.states, rtol=0, atol=1e-9)
