"""GR-1 with dexterous hands from a `scene:` spec: robosuite's GR1ArmsOnly, one robot with two
arms (task.two_arm single-robot), its Fourier hands commanded 6 columns each. The shipped spec
resolves, robosuite's action order is kept apart from ours, the hand's grasp needs the thumb and
two fingers, and a shard holds a generated pick-and-place with 12 action and 18 state columns
per arm."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import webdataset as wds
from demofactory.build.bimanual_worker import BimanualShardWorker
from demofactory.build.records import ShardTask
from demofactory.errors import SpecError
from demofactory.generators.scene_api import Placement
from demofactory.seeds.resolve import resolve_spec
from demofactory.specs.spec import load_spec

# One GR-1 env (~4 s to build and probe), five seed demos annotated, one attempt through the
# fast loop (~1 s); the slow tests add a second env and an attempt through env.step.
pytestmark = pytest.mark.sim

SPEC = Path(__file__).parents[2] / "scene_specs" / "gr1_pick_place.yaml"


@pytest.fixture(scope="module")
def resolved():
    spec = load_spec(
        SPEC, {"generation.attempts": 1, "generation.attempts_per_shard": 1, "cameras": []}
    )  # no frames here: tests/shards/test_two_arm_exports.py renders GR-1's cameras
    return resolve_spec(spec)


def test_one_robot_two_arms_and_six_hand_columns_each(resolved):
    from demofactory.simulation.bimanual import two_arm_layouts

    scene = resolved.scene
    assert len(scene.env.robots) == 1 and scene.arms == ("right", "left")
    assert [scene.hand_width_of(arm) for arm in scene.arms] == [6, 6]
    assert scene.action_dim == 24 and scene.proprio().shape == (36,)  # (3 + 4 + 11) x 2
    state, action = scene.layouts()
    assert (state, action) == two_arm_layouts(resolved.spec.task)  # spec-only == measured
    assert action[2] == ["right_gripper", 6] and state[2] == ["right_gripper_qpos", 11]
    # the fast loop: one FastStepper per arm of the one robot, adopted after its check
    assert scene.fast_control, scene.fast_control_note
    assert type(scene._fast).__name__ == "PairStepper" and len(scene._fast.parts) == 2
    # the hand's four fingers besides the thumb, each its own group of geoms
    assert len(scene._parts["right"].fingers) == 4


def test_our_action_goes_to_robosuites_order(resolved):
    """Ours: right arm 6, right hand 6, left arm 6, left hand 6; GR1ArmsOnly's composite
    controller: right arm, left arm, right hand, left hand."""
    scene = resolved.scene
    ours = np.arange(24, dtype=np.float64)
    env = scene.to_env_action(ours)
    split = scene.env.robots[0].composite_controller._action_split_indexes
    for name, cols in (
        ("right", range(0, 6)),
        ("right_gripper", range(6, 12)),
        ("left", range(12, 18)),
        ("left_gripper", range(18, 24)),
    ):
        a, b = split[name]
        assert list(env[a:b]) == list(cols), name


def test_the_fast_loop_steps_both_arms_and_hands_as_env_step_does(resolved):
    """20 random control steps of both arms and hands (closing, then opening) through
    robosuite's env.step and through PairStepper from the same state: the same states."""
    import mujoco

    scene = resolved.scene
    stepper, data = scene._fast, scene.data
    scene.reset_to(resolved.demos[0].start_state, Placement({}))
    actions = np.random.default_rng(1).uniform(-1.0, 1.0, (20, 24))
    actions[:, 12:] = np.where(np.arange(20)[:, None] < 10, 1.0, -1.0)  # robosuite's order
    start = (scene.get_state(), data.qacc_warmstart.copy(), data.ctrl.copy())
    hands = [np.array(p.gripper_model.current_action, copy=True) for p in stepper.parts]
    reference = []
    for action in actions:
        scene.env.step(action)
        reference.append(np.concatenate([data.qpos, data.qvel]))
    scene.set_state(start[0])
    data.qacc_warmstart[:], data.ctrl[:] = start[1], start[2]
    for part, hand in zip(stepper.parts, hands, strict=True):
        part.gripper_model.current_action = hand.copy()
    mujoco.mj_forward(scene.model, data)
    worst = 0.0
    for action, expected in zip(actions, reference, strict=True):
        stepper.step(action)
        worst = max(worst, float(np.abs(np.concatenate([data.qpos, data.qvel]) - expected).max()))
    assert worst < 1e-9, worst  # measured 4e-13
    assert np.abs(reference[-1] - reference[0]).max() > 0.1  # the arms and fingers moved


def test_the_hand_grasps_with_its_thumb_and_two_fingers(resolved):
    scene, demo = resolved.scene, resolved.demos[0]
    start, end = demo.segments[0]  # grasp(can), cut where grasped(can) holds
    assert 0 < end < demo.demo.length
    scene.reset(demo.fixture_poses)
    scene.set_state(demo.demo.states[end + 5])
    assert scene.holds_for("right", "grasped(can)")
    assert not scene.holds_for("left", "grasped(can)")  # the left hand is nowhere near it
    scene.set_state(demo.demo.states[0])  # the hand open, away from the can
    assert not scene.holds_for("right", "grasped(can)")
    # the replayed hand command: 6 columns per step, closed (+1) once the grasp has begun
    assert demo.gripper["right"].shape == (demo.demo.length, 6)
    assert (demo.gripper["right"][end] > 0).all() and (demo.gripper["right"][0] < 0).all()


def test_a_shard_holds_a_generated_pick_and_place(resolved, tmp_path):
    worker = BimanualShardWorker(resolved.spec, resolved.demos, resolved.scene)
    result = worker.run_shard(ShardTask(0, (0,)), tmp_path)
    assert result.successes == 1, result.failures
    samples = list(wds.WebDataset(str(next(tmp_path.glob("shards/*.tar"))), shardshuffle=False))
    assert len(samples) == result.episodes[0].length
    action, state = (np.load(io.BytesIO(samples[-1][k])) for k in ("action.npy", "state.npy"))
    assert action.shape == (24,) and state.shape == (36,)


@pytest.mark.parametrize(
    ("robot", "configuration", "field", "expected"),
    [
        # a pair of robots is robosuite's two-arm envs' layout, not a scene: section's
        ("GR1ArmsOnly", "parallel", "scene", "a scene: section takes single-robot only"),
        ("Panda", "single-robot", "task.robot", "'Panda': 1 arm; expected a fixed-base robot"),
    ],
)
def test_a_robot_that_does_not_fit_the_configuration_is_refused(
    robot, configuration, field, expected
):
    with pytest.raises(SpecError) as err:
        resolve_spec(
            load_spec(SPEC, {"task.robot": robot, "task.two_arm.configuration": configuration})
        )
    assert f": {field}: " in str(err.value) and expected in str(err.value), str(err.value)


@pytest.mark.slow  # a CLI subprocess building the env again: 3-5 s
def test_validate_names_the_one_robot_and_both_arms_fast_loop(tmp_path):
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
    assert "(SpecScene, GR1ArmsOnly, single-robot), 5 seed demos" in result.stdout
    assert "PairStepper: both arms' OSC and grippers)" in result.stdout
