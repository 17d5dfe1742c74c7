"""Subtask order from demos, where segments start and end, retries, source selection,
generate-until-N."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from demofactory.build.records import ShardResult, ShardTask
from demofactory.build.run import DatasetRecorder
from demofactory.errors import UserError
from demofactory.generators.mimicgen import (
    AttemptPlan,
    attempt_seed,
    generate_attempt,
    pose_distance,
)
from demofactory.generators.records import SeedDemo
from demofactory.seeds.annotate import FINISH_TAIL, MIN_RUN, segment_demo, segment_starts
from demofactory.seeds.resolve import resolve_spec
from demofactory.shards import ShardInfo
from demofactory.specs.spec import load_spec

from tests.conftest import SPECS


def _demo(length: int) -> SeedDemo:
    return SeedDemo(
        "demo_1", Path("x.hdf5"), "PickPlace", np.zeros((length, 3)), np.zeros((length, 7))
    )


def _holds(length: int, spans: dict[int, list[tuple[int, int]]], count: int) -> np.ndarray:
    """[T, count] predicates holding over the given [start, stop) spans (stop None: to the end)."""
    holds = np.zeros((length, count), dtype=bool)
    for i, ranges in spans.items():
        for start, stop in ranges:
            holds[start:stop, i] = True
    return holds


LABELS = ["grasped(bread)", "inside(bread, bin)", "grasped(cereal)", "inside(cereal, bin)"]


def test_subtask_order_follows_the_demo_not_the_spec():
    # spec: grasp bread, bread in bin, grasp cereal, cereal in bin; the person took the cereal first
    holds = _holds(100, {2: [(10, 30)], 3: [(30, None)], 0: [(50, 70)], 1: [(70, None)]}, 4)
    order, ends, reasons = segment_demo(_demo(100), holds, LABELS, finishing=None)
    assert order == (2, 3, 0, 1)
    assert ends == (51, 100, 11, 31)  # the last in the demo's order runs to its end
    assert reasons[2] == "grasped(cereal) holds from step 10"


def test_a_predicate_already_true_at_the_segment_start_does_not_end_it():
    # inside(bread, bin) is true from step 0 (a loose container check, or a bread already there):
    # the cut waits for a predicate that starts to hold after the segment began.
    holds = _holds(60, {1: [(0, None)], 0: [(20, 40)]}, 2)
    order, ends, _ = segment_demo(_demo(60), holds, LABELS[:2], finishing=None)
    assert order == (0, 1) and ends == (21, 60)


def test_a_drop_and_second_grasp_ends_the_grasp_at_the_second_grasp():
    # grasped at 10-20, dropped, grasped again at 40-70; the cube is on the other at 75 (success)
    holds = _holds(100, {0: [(10, 20), (40, 70)], 1: [(75, None)]}, 2)
    order, ends, reasons = segment_demo(
        _demo(100), holds, ["grasped(cubeA)", "success"], finishing=1
    )
    assert order == (0, 1)
    assert ends[0] == 41, "the carry must start with the cube in hand, after the second grasp"
    assert "the last of 2 times" in reasons[0]
    assert (
        ends[1] == 75 + FINISH_TAIL
    )  # the task is done at 75: a short tail, not the rest of the demo


def test_a_flicker_shorter_than_min_run_is_not_a_grasp():
    holds = _holds(60, {0: [(5, 5 + MIN_RUN - 1), (30, 50)], 1: [(55, None)]}, 2)
    _, ends, _ = segment_demo(_demo(60), holds, ["grasped(a)", "success"], finishing=1)
    assert ends[0] == 31


def test_the_finishing_subtask_is_last_whatever_the_spec_order():
    # subtask 0 ends at success, listed first
    holds = _holds(50, {0: [(40, None)], 1: [(10, 30)]}, 2)
    order, ends, _ = segment_demo(_demo(50), holds, ["success", "grasped(a)"], finishing=0)
    assert order == (1, 0) and ends == (50, 11)


def test_a_predicate_that_never_holds_names_the_demo_and_subtask():
    with pytest.raises(UserError, match=r"data/demo_1: subtask 0 never ends: grasped\(cubeA\)"):
        segment_demo(_demo(20), np.zeros((20, 2), bool), ["grasped(cubeA)", "success"], finishing=1)


def test_a_demo_that_never_completes_the_task_is_refused():
    holds = _holds(30, {0: [(5, 20)]}, 2)
    with pytest.raises(UserError, match="the task is never done in this demo"):
        segment_demo(_demo(30), holds, ["grasped(cubeA)", "success"], finishing=1)


def test_steps_spent_on_another_object_are_skipped():
    # subtask 0 (grasp the square nut, body 1) starts after the round nut (body 2), handled by the
    # person during steps 0..40, has come to rest; the square nut itself is of concern, not skipped.
    xpos = np.zeros((100, 2, 3))
    xpos[:41, 1, 0] = np.linspace(0.0, 0.3, 41)
    xpos[41:, 1, 0] = 0.3
    starts = segment_starts((0, 1), (60, 100), [{1}, {1, 3}], [1, 2], xpos)
    assert starts == (40, 60)
    assert segment_starts((0, 1), (60, 100), [{1, 2}, {1}], [1, 2], xpos) == (
        0,
        60,
    )  # the body concerns it


def test_pose_distance_adds_metres_and_radians():
    a, b = np.eye(4), np.eye(4)
    b[:3, 3] = [0.3, 0.4, 0.0]
    b[:3, :3] = [[0, -1, 0], [1, 0, 0], [0, 0, 1]]  # 90 degrees about z
    assert pose_distance(a, b) == pytest.approx(0.5 + np.pi / 2)


@pytest.fixture(scope="module")
def noisy_lift():
    overrides = {
        "generation.action_noise": 0.2,
        "generation.subtask_retries": 3,
        "task.horizon": 700,
    }
    return resolve_spec(load_spec(SPECS / "lift.yaml", overrides))


def test_retries_restore_the_subtask_start_and_keep_one_continuous_branch(noisy_lift):
    found = None
    for i in range(8):
        attempt = generate_attempt(
            noisy_lift.scene,
            noisy_lift.demos,
            AttemptPlan(i, 0, attempt_seed(0, 0, i)),
            noisy_lift.params,
        )
        # Sim time advances by one control period per stored step: no step of a failed try remains.
        np.testing.assert_allclose(
            attempt.states[:, 0], np.arange(attempt.length) * 0.05, atol=1e-9
        )
        if attempt.success and sum(attempt.retries) > 0:
            found = attempt
            break
    assert found is not None, "no retried-then-successful attempt among 8 noisy Lift attempts"
    assert len(found.provenance["sources"]) == len(noisy_lift.spec.subtasks) + sum(found.retries)


def test_the_horizon_filters_sources_that_cannot_fit(noisy_lift):
    # demo_2's grasp segment (1120 steps: the person fumbled) cannot fit in 700 steps: it never
    # starts an attempt, and a retry takes a source only when its segment fits, so no attempt fails
    # by horizon.
    # (Its lift segment, 23 steps after the last grasp, may serve a retry of the lift.)
    assert noisy_lift.demos[1].segment(0)[1] > 700
    for i in range(4):
        attempt = generate_attempt(
            noisy_lift.scene,
            noisy_lift.demos,
            AttemptPlan(i, 0, attempt_seed(0, 0, i)),
            noisy_lift.params,
        )
        assert "demo_2" not in attempt.provenance["sources"][0]
        assert not attempt.reason.startswith("horizon")


@pytest.mark.sim
def test_an_impossible_subtask_fails_after_the_retry_bound():
    spec = load_spec(SPECS / "lift.yaml", {"generation.subtask_retries": 1, "task.horizon": 700})
    resolved = resolve_spec(spec)
    # Judge subtask 0 by a predicate it cannot meet (the cube 0.5 m up while being grasped).
    impossible = spec.model_copy(
        update={
            "subtasks": [
                spec.subtasks[0].model_copy(update={"ends_when": "lifted(cube, 0.5)"}),
                spec.subtasks[1],
            ]
        }
    )
    resolved.spec = impossible
    attempt = generate_attempt(
        resolved.scene, resolved.demos, AttemptPlan(0, 0, attempt_seed(0, 0, 0)), resolved.params
    )
    assert not attempt.success
    assert attempt.reason.startswith(
        "subtask 0 failed: lifted(cube, 0.5) did not hold after 2 tries"
    )
    assert attempt.retries == (1, 0) and attempt.failed_subtask == 0 and attempt.reached == (0,)


def _result(index: int, successes: int) -> ShardResult:
    task = ShardTask(index, (index * 2, index * 2 + 1))
    info = ShardInfo(task.name, samples=0, episodes=successes, bytes=0, sha256="0" * 64)
    return ShardResult(
        task, info, attempts=2, successes=successes, failures={}, episodes=(), wall_s=0.0
    )


def test_generate_until_n_keeps_the_shortest_prefix_of_shards(tmp_path):
    tasks = [ShardTask(i, (2 * i, 2 * i + 1)) for i in range(5)]
    recorder = DatasetRecorder(tmp_path, {})
    for index, successes in [(1, 2), (0, 1), (3, 2)]:  # finishing order differs from index order
        recorder.results[tasks[index].name] = _result(index, successes)
    assert recorder.prefix_for(3, tasks) == tasks[:2]  # shards 0 and 1 hold 3 successes
    assert recorder.prefix_for(4, tasks) is None  # shard 2 is not finished: undecided
    assert recorder.prefix_for(None, tasks) is None


@pytest.mark.sim
def test_annotate_command_prints_every_demo_segment(capsys):
    import json

    from demofactory.cli.main import main

    assert main(["annotate", str(SPECS / "lift.yaml"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    lengths = [d["length"] for d in report["demos"]]
    assert lengths == [226, 1143, 285, 296]
    for demo in report["demos"]:
        grasp, lift = demo["segments"]
        assert grasp["ends_when"] == "grasped(cube)" and lift["ends_when"] == "success"
        assert grasp["object"] == lift["object"] == "cube"
        assert grasp["reason"].startswith("grasped(cube) holds from step")
        assert lift["reason"].startswith("the task is done (success from step")
        assert grasp["start"] == 0 < grasp["end"] == lift["start"] < lift["end"] <= demo["length"]


@pytest.mark.sim
def test_annotate_plot_writes_a_timeline_png_per_demo(tmp_path, capsys):
    from demofactory.cli.main import main
    from PIL import Image

    assert main(["annotate", str(SPECS / "stack.yaml"), "--plot", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    (png,) = tmp_path.glob("*.png")
    assert f"timeline: {png}" in out
    with Image.open(png) as image:
        pixels = np.asarray(image.convert("RGB"))
    assert image.width > 900 and image.height > 100
    assert (pixels != 255).any(
        axis=2
    ).mean() > 0.05  # lanes and segments were drawn, not a blank page
