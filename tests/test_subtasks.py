"""Subtask order from demos, gripper-event segmentation, retries, source selection, generate-until-N."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from factory.annotate import gripper_events, subtask_order_and_ends
from factory.errors import UserError
from factory.pipeline import ShardResult, ShardTask
from factory.predicates import parse_predicate
from factory.records import SeedDemo
from factory.resolve import resolve_spec
from factory.run import DatasetRecorder
from factory.spec import load_spec
from generators.mimicgen import AttemptPlan, attempt_seed, generate_attempt, pose_distance
from shards import ShardInfo
from tests.conftest import SPECS


def _demo(length: int) -> SeedDemo:
    return SeedDemo("demo_1", Path("x.hdf5"), "PickPlace", np.zeros((length, 3)), np.zeros((length, 7)))


def _holds(length: int, first: dict[int, int], count: int) -> np.ndarray:
    holds = np.zeros((length, count), dtype=bool)
    for i, t in first.items():
        holds[t:, i] = True
    return holds


def test_subtask_order_follows_the_demo_not_the_spec():
    # spec: grasp bread, bread in bin, grasp cereal, (cereal in bin: last, ends with the demo)
    preds = [parse_predicate(p) for p in ("grasped(bread)", "inside(bread, bin)", "grasped(cereal)")] + [None]
    # the person picked the cereal first: grasped(cereal) at 10, ... bread grasped at 50, in bin at 80
    holds = _holds(100, {2: 10, 0: 50, 1: 80}, 4)
    order, ends = subtask_order_and_ends(_demo(100), holds, preds, np.zeros(100))
    assert order == (2, 0, 1, 3)
    assert ends == (51, 81, 11, 100)


def test_spec_order_when_the_demo_agrees():
    preds = [parse_predicate("grasped(cubeA)"), None]
    order, ends = subtask_order_and_ends(_demo(40), _holds(40, {0: 12}, 2), preds, np.zeros(40))
    assert order == (0, 1) and ends == (13, 40)


def test_subtasks_without_predicates_end_at_gripper_events():
    gripper = np.array([-1] * 10 + [1] * 15 + [-1] * 5, dtype=float)
    assert gripper_events(gripper).tolist() == [10, 25]
    order, ends = subtask_order_and_ends(_demo(30), np.zeros((30, 3), bool), [None, None, None], gripper)
    assert order == (0, 1, 2) and ends == (10, 25, 30)


def test_a_predicate_that_never_holds_names_the_demo_and_subtask():
    preds = [parse_predicate("grasped(cubeA)"), None]
    with pytest.raises(UserError, match=r"data/demo_1: subtask 0 never ends: grasped\(cubeA\)"):
        subtask_order_and_ends(_demo(20), np.zeros((20, 2), bool), preds, np.zeros(20))


def test_pose_distance_adds_metres_and_radians():
    a, b = np.eye(4), np.eye(4)
    b[:3, 3] = [0.3, 0.4, 0.0]
    b[:3, :3] = [[0, -1, 0], [1, 0, 0], [0, 0, 1]]  # 90 degrees about z
    assert pose_distance(a, b) == pytest.approx(0.5 + np.pi / 2)


@pytest.fixture(scope="module")
def noisy_lift():
    overrides = {"generation.action_noise": 0.2, "generation.subtask_retries": 3, "task.horizon": 700}
    return resolve_spec(load_spec(SPECS / "lift.yaml", overrides))


def test_retries_restore_the_subtask_start_and_keep_one_continuous_branch(noisy_lift):
    found = None
    for i in range(8):
        attempt = generate_attempt(noisy_lift.scene, noisy_lift.demos, AttemptPlan(i, 0, attempt_seed(0, 0, i)))
        # Sim time advances by one control period per stored step: no step of a failed try remains.
        np.testing.assert_allclose(attempt.states[:, 0], np.arange(attempt.length) * 0.05, atol=1e-9)
        if attempt.success and sum(attempt.retries) > 0:
            found = attempt
            break
    assert found is not None, "no retried-then-successful attempt among 8 noisy Lift attempts"
    assert len(found.provenance["sources"]) == len(noisy_lift.spec.subtasks) + sum(found.retries)


def test_the_horizon_filters_sources_that_cannot_fit(noisy_lift):
    # demo_2 (1143 steps) cannot fit in 700 steps: it is never chosen, so no attempt fails by horizon.
    for i in range(4):
        attempt = generate_attempt(noisy_lift.scene, noisy_lift.demos, AttemptPlan(i, 0, attempt_seed(0, 0, i)))
        assert not any("demo_2" in s for s in attempt.provenance["sources"])
        assert not attempt.reason.startswith("horizon")


def test_an_impossible_subtask_fails_after_the_retry_bound():
    spec = load_spec(SPECS / "lift.yaml", {"generation.subtask_retries": 1, "task.horizon": 700})
    resolved = resolve_spec(spec)
    # Judge subtask 0 by a predicate it cannot meet (the cube 0.5 m up while being grasped).
    impossible = spec.model_copy(update={"subtasks": [
        spec.subtasks[0].model_copy(update={"ends_when": "lifted(cube, 0.5)"}), spec.subtasks[1]]})
    resolved.scene.spec = impossible
    attempt = generate_attempt(resolved.scene, resolved.demos, AttemptPlan(0, 0, attempt_seed(0, 0, 0)))
    assert not attempt.success
    assert attempt.reason.startswith("subtask 0 failed: lifted(cube, 0.5) did not hold after 2 tries")
    assert attempt.retries == (1, 0) and attempt.failed_subtask == 0 and attempt.reached == (0,)


def _result(index: int, successes: int) -> ShardResult:
    task = ShardTask(index, (index * 2, index * 2 + 1))
    info = ShardInfo(task.name, samples=0, episodes=successes, bytes=0, sha256="0" * 64)
    return ShardResult(task, info, attempts=2, successes=successes, failures={}, episodes=(), wall_s=0.0)


def test_generate_until_n_keeps_the_shortest_prefix_of_shards(tmp_path):
    tasks = [ShardTask(i, (2 * i, 2 * i + 1)) for i in range(5)]
    recorder = DatasetRecorder(tmp_path, {})
    for index, successes in [(1, 2), (0, 1), (3, 2)]:  # finishing order differs from index order
        recorder.results[tasks[index].name] = _result(index, successes)
    assert recorder.prefix_for(3, tasks) == tasks[:2]  # shards 0 and 1 hold 3 successes
    assert recorder.prefix_for(4, tasks) is None  # shard 2 is not finished: undecided
    assert recorder.prefix_for(None, tasks) is None


def test_annotate_command_prints_every_demo_segment(capsys):
    import json

    from factory.cli import main

    assert main(["annotate", str(SPECS / "lift.yaml"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    lengths = [d["length"] for d in report["demos"]]
    assert lengths == [226, 1143, 285, 296]
    for demo in report["demos"]:
        grasp, lift = demo["segments"]
        assert grasp["ends_when"] == "grasped(cube)" and lift["ends_when"] == "end of demo"
        assert grasp["start"] == 0 < grasp["end"] == lift["start"] < lift["end"] == demo["length"]
