"""Two arms in robosuite's TwoArmLift (a Panda pair): scripted per-arm seeds, annotation per arm,
coordinated and sequential generation, and a real shard read back with webdataset."""

from __future__ import annotations

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
from demofactory.specs.spec import load_raw_spec, load_spec, validate_raw_spec

# An env, three demos annotated and a few attempts (one through env.step: slow).
pytestmark = [pytest.mark.sim, pytest.mark.slow]

SPEC = Path(__file__).parents[2] / "scene_specs" / "two_arm_lift.yaml"


@pytest.fixture(scope="module")
def resolved():
    spec = load_spec(SPEC, {"generation.attempts": 1, "generation.attempts_per_shard": 1})
    return resolve_spec(spec)


def test_seed_demos_are_cut_per_arm(resolved):
    for demo in resolved.demos:
        (rg, lg, rl, ll) = demo.segments
        assert rg[0] == lg[0] == 0 and 0 < rg[1] < demo.demo.length  # each arm's grasp
        assert rl == ll == (max(rg[1], lg[1]), demo.demo.length)  # one window for the lift


def test_the_shipped_spec_makes_a_successful_shard(resolved, tmp_path):
    worker = BimanualShardWorker(resolved.spec, resolved.demos, resolved.scene)
    result = worker.run_shard(ShardTask(0, (0,)), tmp_path)
    assert result.successes == 1, result.failures
    samples = list(wds.WebDataset(str(next(tmp_path.glob("shards/*.tar"))), shardshuffle=False))
    assert len(samples) == result.episodes[0].length > 100
    action, state = (np.load(_bytes(samples[0][k])) for k in ("action.npy", "state.npy"))
    assert action.shape == (14,) and state.shape == (18,)  # 7 and 9 per arm


def _bytes(data: bytes):
    import io

    return io.BytesIO(data)


def _attempt(resolved, params, i: int):
    plan = AttemptPlan(i, 0, attempt_seed(resolved.spec.seed, 0, i))
    return generate_bimanual_attempt(resolved.scene, resolved.demos, plan, params)


def _eef(scene, state, arm):
    scene.set_state(state)
    return scene.eef_pose_of(arm)


@pytest.fixture(scope="module")
def lift_attempt(resolved):
    return _attempt(resolved, bimanual_params(resolved.spec), 1)


def test_coordinated_arms_start_together_and_carry_under_one_transform(resolved, lift_attempt):
    attempt = lift_attempt
    assert attempt.success, attempt.reason
    starts = dict(attempt.provenance["subtask_starts"])
    assert starts[2] == starts[3]  # the lift: both arms together
    (group,) = attempt.provenance["coordinated"]
    assert group["subtasks"] == [2, 3] and group["step"] == starts[2]
    # One transform for both: the hands keep the source's pose relative to each other.
    scene, source = (
        resolved.scene,
        next(d for d in resolved.demos if d.demo.label == attempt.provenance["sources"][0]),
    )
    now = np.linalg.inv(_eef(scene, attempt.states[-1], "right")) @ _eef(
        scene, attempt.states[-1], "left"
    )
    src = np.linalg.inv(source.eef_poses["right"][-1]) @ source.eef_poses["left"][-1]
    assert np.linalg.norm(now[:3, 3] - src[:3, 3]) < 0.02


def test_a_sequential_arm_holds_still_until_the_subtask_it_waits_for_ends(resolved):
    raw = load_raw_spec(SPEC)
    raw["subtasks"][1].update(coordination="sequential", after="right_grasp")
    params = bimanual_params(validate_raw_spec(raw, SPEC))
    attempt = _attempt(resolved, params, 2)
    starts = dict(attempt.provenance["subtask_starts"])
    assert starts[1] > starts[0] + 60  # after the right arm's whole grasp segment
    scene = resolved.scene
    waiting = [_eef(scene, attempt.states[t], "left")[:3, 3] for t in (0, starts[1] - 1)]
    moving = [_eef(scene, attempt.states[t], "right")[:3, 3] for t in (0, starts[1] - 1)]
    assert np.linalg.norm(waiting[1] - waiting[0]) < 0.01  # held still
    assert np.linalg.norm(moving[1] - moving[0]) > 0.05
    assert attempt.success, attempt.reason  # then lifted together as before


def test_factory_script_drives_each_arm_through_its_own_waypoints(resolved):
    scene = resolved.scene
    demo = record_demo(scene, 0, base_state(scene))
    assert demo.actions.shape == (145, 14) and demo.tries == 1
    right, left = demo.actions[:, 6], demo.actions[:, 13]
    assert right[0] < 0 < right[-1] and left[0] < 0 < left[-1]  # both open, then both close


def test_annotate_shows_both_arms_timelines(resolved):
    from demofactory.seeds.annotate_bimanual import arm_timelines, format_timelines

    demo = resolved.demos[0]
    arms = arm_timelines(resolved.spec, demo)
    assert [row["name"] for row in arms["right"]] == ["right_grasp", "right_lift"]
    assert [row["name"] for row in arms["left"]] == ["left_grasp", "left_lift"]
    assert arms["left"][1]["start"] == arms["right"][1]["start"]  # the coordinated window
    text = format_timelines(demo.demo.label, demo.demo.length, arms)
    assert "right subtask 0 right_grasp" in text and "left  subtask 3 left_lift" in text


def test_an_attempt_is_the_same_whenever_it_runs(resolved, lift_attempt):
    """Every draw (placement, source, offsets, noise) comes from the attempt's seed: attempt 1
    again, after the others ran in the same scene, is the same to the bit."""
    first, again = lift_attempt, _attempt(resolved, bimanual_params(resolved.spec), 1)
    assert np.array_equal(first.actions, again.actions)
    assert np.array_equal(first.states, again.states)
    assert first.provenance == again.provenance


def test_an_attempt_is_the_same_through_the_fast_loop_and_env_step(resolved, lift_attempt):
    """The two-arm fast loop (PairStepper) against robosuite's env.step on a whole generated
    attempt: same seed, same demos, the same success, provenance and actions.

    robosuite's first env.step after a reset takes its controllers' state cached at the reset,
    before `reset_to` restored the demo's start (`Controller.update` skips under lite_physics
    until `new_update`): the fast loop reads the state as it is, and the two differ from the
    first step by ~5e-7, carried to ~1e-5 by the end (measured; the same success). Marking the
    cache stale after each reset, as robosuite itself does after every control step, leaves
    what the test compares: the loops."""
    from demofactory.simulation.bimanual import TwoArmScene

    assert resolved.scene.fast_control, resolved.scene.fast_control_note
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
    plan = AttemptPlan(1, 0, attempt_seed(resolved.spec.seed, 0, 1))
    other = generate_bimanual_attempt(slow, resolved.demos, plan, bimanual_params(slow_spec))
    assert other.success == lift_attempt.success and other.success
    assert other.provenance == lift_attempt.provenance
    assert np.array_equal(other.actions, lift_attempt.actions)
    np.testing.assert_allclose(other.states, lift_attempt.states, rtol=0, atol=1e-9)


def test_cameras_a_robot_carries_are_found_in_the_body_tree(resolved):
    """Each robot's cameras by the model (robot index, arm, wrist), as dataset_info.json's
    `mount` records them for `factory preview`'s labels; scene cameras get none."""
    from demofactory.build.run import add_camera_mounts, dataset_info

    scene = resolved.scene
    names = ["agentview", "robot0_eye_in_hand", "robot1_eye_in_hand", "robot1_robotview"]
    assert scene.camera_mounts([*names, "no_such_camera"]) == {
        "robot0_eye_in_hand": {"robot": 0, "arm": "right", "wrist": True},
        "robot1_eye_in_hand": {"robot": 1, "arm": "left", "wrist": True},
        "robot1_robotview": {"robot": 1, "arm": "left", "wrist": False},
    }
    img = load_spec(SPEC.with_name("two_arm_lift_img.yaml"))
    info = add_camera_mounts(dataset_info(img, scene.state_size), scene)
    assert [c.get("mount", {}).get("arm") for c in info["cameras"]] == [None, "right", "left"]
