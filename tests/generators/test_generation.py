"""Annotation and MimicGen-style generation in a real robosuite env (no Ray, no rendering)."""

from __future__ import annotations

import numpy as np
import pytest
from demofactory.generators.mimicgen import (
    AttemptPlan,
    attempt_seed,
    generate_attempt,
    sample_placement,
)
from demofactory.seeds.resolve import resolve_spec
from demofactory.specs.spec import PlacementRange, PlacementSpec, load_spec

from tests.conftest import SPECS


@pytest.fixture(scope="module")
def lift():
    return resolve_spec(load_spec(SPECS / "lift.yaml"))


def test_annotation_finds_each_grasp_in_the_human_demos(lift):
    assert [d.demo.length for d in lift.demos] == [226, 1143, 285, 296]
    for annotated in lift.demos:
        grasp_end, last_end = annotated.subtask_ends
        assert 0 < grasp_end < last_end == annotated.demo.length
        lift.scene.env.reset()
        lift.scene.set_state(annotated.demo.states[grasp_end - 1])
        assert lift.scene.holds("grasped(cube)")
        lift.scene.set_state(annotated.demo.states[0])
        assert not lift.scene.holds("grasped(cube)")
        # eef poses are proper rigid transforms
        rot = annotated.eef_poses[:, :3, :3]
        np.testing.assert_allclose(
            rot @ rot.transpose(0, 2, 1), np.broadcast_to(np.eye(3), rot.shape), atol=1e-6
        )


def _plan(i: int, seed: int = 0) -> AttemptPlan:
    return AttemptPlan(attempt_id=i, shard=0, seed=attempt_seed(seed, 0, i))


def test_the_same_seed_gives_bit_identical_attempts(lift):
    first = generate_attempt(lift.scene, lift.demos, _plan(0), lift.params)
    generate_attempt(lift.scene, lift.demos, _plan(1), lift.params)  # something else in between
    again = generate_attempt(lift.scene, lift.demos, _plan(0), lift.params)
    assert first.length > 0
    assert np.array_equal(first.states, again.states) and np.array_equal(
        first.actions, again.actions
    )
    other = generate_attempt(lift.scene, lift.demos, _plan(0, seed=1), lift.params)
    assert other.provenance["placement"] != first.provenance["placement"]


def test_successful_attempts_end_with_the_task_done(lift):
    attempts = []
    for i in range(4):
        attempts.append(generate_attempt(lift.scene, lift.demos, _plan(i), lift.params))
        assert lift.scene.success() == attempts[-1].success  # judged on the final state
    successes = [a for a in attempts if a.success]
    assert len(successes) >= 2, [a.reason for a in attempts]
    for attempt in successes:
        assert attempt.reason == "" and attempt.subtasks_done == 2
        assert attempt.states.shape == (attempt.length, lift.scene.state_size)
        assert np.all(np.abs(attempt.actions) <= 1.0)
    for attempt in attempts:
        if not attempt.success:
            assert attempt.reason


def test_an_error_inside_the_simulator_is_a_failed_attempt(lift, monkeypatch):
    calls = {"n": 0}
    real_step = lift.scene.step

    def unstable(action):
        calls["n"] += 1
        if calls["n"] == 5:
            raise FloatingPointError("mj_step: simulation unstable (QACC)")
        real_step(action)

    monkeypatch.setattr(lift.scene, "step", unstable)
    attempt = generate_attempt(lift.scene, lift.demos, _plan(0), lift.params)
    assert not attempt.success
    assert attempt.reason.startswith("simulator error: FloatingPointError")
    assert attempt.length == 5


def test_placement_draws_stay_in_range_and_apart():
    spec = PlacementSpec(
        objects={
            "a": PlacementRange(x=(-0.1, 0.1), y=(-0.1, 0.1), yaw=(-1, 1)),
            "b": PlacementRange(x=(-0.1, 0.1)),
        },
        min_separation=0.08,
    )
    start = {"a": np.array([0.0, 0.0]), "b": np.array([0.05, 0.0])}
    rng = np.random.default_rng(0)
    for _ in range(50):
        offsets = sample_placement(spec, start, rng).offsets
        assert -0.1 <= offsets["a"][0] <= 0.1 and -1 <= offsets["a"][2] <= 1
        assert offsets["b"][1] == 0.0 and offsets["b"][2] == 0.0
        a = start["a"] + np.array(offsets["a"][:2])
        b = start["b"] + np.array(offsets["b"][:2])
        assert np.linalg.norm(a - b) >= 0.08
    impossible = PlacementSpec(objects={"a": PlacementRange()}, min_separation=1.0)
    with pytest.raises(RuntimeError, match="min_separation"):
        sample_placement(impossible, {"a": np.zeros(2), "b": np.zeros(2)}, rng)
