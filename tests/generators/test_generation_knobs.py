"""Every generation knob the README documents, at a non-default value, seen in its effect.

One real Lift scene (the four human demos) serves every test; each variant of `generation:` is
the shipped spec with overrides, mapped onto the generator's parameters as the pipeline does.
Attempts are cut short where the knob shows early: a horizon too short for any segment ends an
attempt after its source is chosen and its first bridge is planned, before any physics step.
"""

from __future__ import annotations

import numpy as np
import pytest
from demofactory.generators.mimicgen import (
    AttemptPlan,
    attempt_seed,
    generate_attempt,
    pose_distance,
)
from demofactory.seeds.resolve import resolve_spec
from demofactory.specs.adapters import mimicgen_params
from demofactory.specs.spec import load_spec

from tests.conftest import SPECS

pytestmark = pytest.mark.sim

INTERP = 5  # lift.yaml's interpolation_steps


@pytest.fixture(scope="module")
def lift():
    return resolve_spec(load_spec(SPECS / "lift.yaml", {"cameras": []}))


# No action noise (the same seed then takes the same sources and offsets whatever the knob) and a
# horizon that keeps demo_2 (its grasp takes 1120 steps) from starting an attempt.
BASE = {"generation.action_noise": 0.0, "task.horizon": 700}


@pytest.fixture(scope="module")
def plain(lift):
    """Attempt 0 with BASE: the reference the knobs below are compared against."""
    return _run(lift, BASE)


def _run(lift, overrides: dict, attempt: int = 0, demos=None, stop_after: int | None = None):
    """One attempt of the Lift spec with `overrides`; `stop_after` steps end it (a sim error)."""
    params = mimicgen_params(load_spec(SPECS / "lift.yaml", {"cameras": [], **overrides}))
    plan = AttemptPlan(attempt, 0, attempt_seed(0, 0, attempt))
    scene = lift.scene
    if stop_after is None:
        return generate_attempt(scene, demos or lift.demos, plan, params)
    real_step, calls = scene.step, {"n": 0}

    def step(action):
        calls["n"] += 1
        if calls["n"] > stop_after:
            raise FloatingPointError("stopped by the test")
        real_step(action)

    scene.step = step
    try:
        return generate_attempt(scene, demos or lift.demos, plan, params)
    finally:
        del scene.step  # the instance attribute goes; the class's method shows again


def _label(demo) -> str:
    return demo.demo.label


def _yaw(pose: np.ndarray) -> float:
    return float(np.arctan2(pose[1, 0], pose[0, 0]))


def _cube_at(source, target) -> dict:
    """Placement overrides that move the cube from `source`'s first pose to `target`'s."""
    a, b = source.object_poses["cube"][0], target.object_poses["cube"][0]
    dx, dy = (b[:2, 3] - a[:2, 3]).tolist()
    dyaw = _yaw(b) - _yaw(a)
    return {"placement.objects.cube": {"x": [dx, dx], "y": [dy, dy], "yaw": [dyaw, dyaw]}}


NO_STEPS = {"task.horizon": 10}  # no segment fits: the source is chosen, then the attempt ends


@pytest.mark.parametrize("first", range(4))
def test_nearest_k1_picks_the_demo_nearest_by_object_or_by_robot(lift, first):
    # The scene starts from demo `first`'s state (the robot where that demo's robot was) with the
    # cube moved to where the next demo's cube was: by object that next demo is nearest, by robot
    # demo `first` is.
    demos = lift.demos[first:] + lift.demos[:first]
    robot_twin, cube_twin = demos[0], demos[1]
    knobs = {**NO_STEPS, **_cube_at(robot_twin, cube_twin), "generation.nearest_k": 1}
    for seed in range(3):
        by_object = _run(
            lift, {**knobs, "generation.source_selection": "nearest_object"}, seed, demos
        )
        by_robot = _run(
            lift, {**knobs, "generation.source_selection": "nearest_robot"}, seed, demos
        )
        assert by_object.reason.startswith("horizon") and by_object.length == 0
        assert by_object.provenance["sources"] == [_label(cube_twin)]
        assert by_robot.provenance["sources"] == [_label(robot_twin)]


def test_nearest_k2_draws_among_the_two_nearest_only(lift):
    knobs = {
        **NO_STEPS,
        **_cube_at(lift.demos[0], lift.demos[2]),
        "generation.source_selection": "nearest_object",
        "generation.nearest_k": 2,
    }
    lift.scene.reset_to(lift.demos[0].demo.states[0], _placement(lift, knobs))
    cube = lift.scene.object_pose("cube")
    distances = [pose_distance(d.object_poses["cube"][0], cube) for d in lift.demos]
    two = {_label(lift.demos[i]) for i in np.argsort(distances)[:2]}
    assert _label(lift.demos[2]) in two
    chosen = [_run(lift, knobs, seed).provenance["sources"][0] for seed in range(10)]
    assert set(chosen) == two, chosen  # both drawn, nothing else
    random = [
        _run(lift, {**NO_STEPS, "generation.source_selection": "random"}, seed).provenance[
            "sources"
        ][0]
        for seed in range(10)
    ]
    assert len(set(random)) > 2, random  # the same seeds spread wider without the knob


def _placement(lift, knobs):
    from demofactory.generators.mimicgen import sample_placement

    params = mimicgen_params(load_spec(SPECS / "lift.yaml", {"cameras": [], **knobs}))
    start = {"cube": lift.demos[0].object_poses["cube"][0][:2, 3]}
    return sample_placement(params.placement, start, np.random.default_rng(0))


def test_source_per_subtask_draws_a_new_source_for_the_second_subtask(lift, plain):
    # demo_2 never starts an attempt (BASE's horizon), but its 23-step lift segment may serve the
    # second subtask.
    per_subtask = [_run(lift, {**BASE, "generation.source_per": "subtask"}, s) for s in range(3)]
    per_episode = [plain]  # source_per: episode is the default
    for attempt in per_subtask + per_episode:
        assert attempt.reached == (0, 1) and len(attempt.provenance["sources"]) == 2
    assert all(a.provenance["sources"][0] == a.provenance["sources"][1] for a in per_episode)
    mixed = [a.provenance["sources"] for a in per_subtask if len(set(a.provenance["sources"])) == 2]
    assert mixed, [a.provenance["sources"] for a in per_subtask]


def _first_difference(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    same = np.all(a[:n] == b[:n], axis=1)
    return int(np.argmin(same)) if not same.all() else n


def test_start_from_last_target_changes_only_the_second_bridge(lift, plain):
    current = plain  # start_from: current_pose is the default
    last = _run(lift, {**BASE, "generation.start_from": "last_target"})
    assert current.provenance["sources"] == last.provenance["sources"]
    source = next(d for d in lift.demos if _label(d) == current.provenance["sources"][0])
    start, end = source.segment(0)
    # Identical through the first bridge and segment (its end offset is drawn from [0, 3]); the
    # second bridge starts from another pose, so its first action differs.
    k = _first_difference(current.actions, last.actions)
    assert 0 <= k - (INTERP + end - start) <= 3, (k, INTERP + end - start)
    assert np.array_equal(current.states[: k + 1], last.states[: k + 1])


def test_no_noise_during_interpolation_leaves_the_bridge_steps_clean(lift):
    # Twelve steps, then the thirteenth raises (its action is recorded): no full attempt needed.
    clean = _run(lift, {"generation.action_noise": 0.0}, stop_after=12)
    quiet = {"generation.action_noise": 0.2, "generation.noise_during_interpolation": False}
    bridge_clean = _run(lift, quiet, stop_after=12)
    noisy = _run(lift, {"generation.action_noise": 0.2}, stop_after=12)
    assert clean.length == bridge_clean.length == noisy.length == 13
    assert clean.reason.startswith("simulator error: FloatingPointError: stopped by the test")
    # The first bridge (5 steps) is noise-free; the segment after it is noisy.
    np.testing.assert_array_equal(bridge_clean.actions[:INTERP], clean.actions[:INTERP])
    assert not np.allclose(bridge_clean.actions[INTERP:, :6], clean.actions[INTERP:, :6])
    assert not np.allclose(noisy.actions[0, :6], clean.actions[0, :6])


def test_fixed_steps_lengthen_every_bridge(lift, plain):
    # Planned: the horizon message counts bridge + segment of the first subtask.
    needed = {}
    for fixed in (0, 7):
        attempt = _run(lift, {**NO_STEPS, "generation.fixed_steps": fixed})
        needed[fixed] = int(attempt.reason.split()[1])
        assert attempt.reason.startswith(f"horizon: {needed[fixed]} steps needed")
    assert needed[7] - needed[0] == 7
    # Executed: the same seed without noise takes the same sources and offsets; each of the two
    # subtasks holds its first target 3 more steps, after the same interpolation.
    held = _run(lift, {**BASE, "generation.fixed_steps": 3})  # lift.yaml: fixed_steps 0
    assert plain.reached == held.reached == (0, 1)
    assert plain.provenance["sources"] == held.provenance["sources"]
    assert held.length - plain.length == 2 * 3
    np.testing.assert_array_equal(held.actions[:INTERP], plain.actions[:INTERP])


def test_success_hold_steps_alone_judges_the_same_trajectory(lift, plain):
    once = _run(lift, {**BASE, "generation.success_hold_steps": 1})
    assert once.success, once.reason
    np.testing.assert_array_equal(once.states, plain.states)  # lift.yaml holds 5 steps
    final = lift.scene.get_state()
    # Success after each step (state t + 1; the last is the final state): how long it held.
    after = [*once.states[1:], final]
    held = []
    for state in after:
        lift.scene.set_state(state)
        held.append(lift.scene.success())
    run = len(held) - 1 - max(i for i, ok in enumerate(held) if not ok)
    assert 1 <= run < once.length
    exact = _run(lift, {**BASE, "generation.success_hold_steps": run})
    longer = _run(lift, {**BASE, "generation.success_hold_steps": run + 1})
    assert exact.success and not longer.success
    assert longer.reason == "task not done at the end"
    np.testing.assert_array_equal(longer.states, once.states)  # judged, not driven, differently
