"""Non-prehensile contact on a real Door: `touching(hand, X)`, the annotation's fallback from a
grasp that never happens, the door's pose inferred from a push, and generation from demos in which
the gripper never closes.

The seeds are door_push.yaml's scripted ones (the open hand presses the lever down, the pad's
friction drags the door), used with door.yaml's subtasks unchanged (`grasped(handle)`) and with
their `fixture_poses` removed, as a person's demos come.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml
from demofactory.generators.mimicgen import AttemptPlan, attempt_seed, generate_attempt
from demofactory.seeds.annotate import run_starts
from demofactory.seeds.demos import load_seed_demos
from demofactory.seeds.resolve import resolve_spec
from demofactory.simulation.scene import Scene
from demofactory.specs.spec import load_raw_spec, load_spec

from tests.conftest import DEMOS, REPO, SPECS

pytestmark = pytest.mark.sim

PUSH_DEMOS = DEMOS / "door_push_scripted.hdf5"
FALLBACK = "grasped(handle) never holds: the hand pushes it; ends where touching(hand, handle)"


def _recorded_poses() -> dict[str, dict[str, list[float]]]:
    with h5py.File(PUSH_DEMOS) as f:
        return {name: json.loads(g.attrs["fixture_poses"]) for name, g in f["data"].items()}


@pytest.fixture(scope="module")
def grasp_spec(tmp_path_factory) -> Path:
    """door.yaml (subtask 0 ends on grasped(handle)) seeded by the pushes without their poses."""
    folder = tmp_path_factory.mktemp("door_push")
    demos = folder / "door_push_unposed.hdf5"
    shutil.copy(PUSH_DEMOS, demos)
    with h5py.File(demos, "r+") as f:
        for group in f["data"].values():
            del group.attrs["fixture_poses"]
    raw = load_raw_spec(SPECS / "door.yaml")
    raw.update(seed_demos=[str(demos)], cameras=[])
    raw["generation"]["subtask_retries"] = 1  # the subtask's check runs: it must be the touch
    path = folder / "door.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def pushed(grasp_spec):
    return resolve_spec(load_spec(grasp_spec))


@pytest.fixture(scope="module")
def scene():
    return Scene(load_spec(SPECS / "door_push.yaml", {"cameras": []}))


def test_touching_holds_while_the_open_hand_presses_the_lever(scene):
    demo = load_seed_demos(PUSH_DEMOS)[0]
    poses = _recorded_poses()[demo.name]
    scene.reset(poses)
    latch = 1 + scene._joint_qpos("handle")
    pressing = int(np.flatnonzero(demo.states[:, latch] > 0.5)[0])  # the lever half way down
    assert (demo.actions[:, -1] < 0).all()  # the gripper is never closed
    scene.gripper_closed = False

    def at(step: int, text: str) -> bool:
        scene.set_state(demo.states[step])
        return scene.holds(text)

    assert not at(0, "touching(hand, handle)")  # the hand starts 30 cm away
    assert at(pressing, "touching(hand, handle)") and at(pressing, "touching(handle, hand)")
    assert not at(pressing, "grasped(handle)")  # touched, not grasped: the hand is open
    assert not at(pressing, "touching(hand, door)")  # the panel: the hand is on the lever only
    assert at(pressing, "all(touching(hand, handle), not(touching(door, hand)))")
    # Within 3 mm counts (a restored state in a model a hair off): the door 2 mm lower leaves
    # the finger 1.7 mm above the lever (measured), 4 mm lower 3.5 mm.
    for drop, touching in ((0.002, True), (0.004, False)):
        lowered = {body: [p[0], p[1], p[2] - drop, *p[3:]] for body, p in poses.items()}
        scene.set_fixture_poses(lowered)
        assert at(pressing, "touching(hand, handle)") is touching, drop
    scene.reset()


def test_a_demo_without_a_grasp_is_cut_where_the_hand_touches(pushed):
    assert len(pushed.demos) == 3
    for annotated in pushed.demos:
        label = annotated.demo.label
        assert annotated.ended_by == ("touching(hand, handle)", ""), label
        reason = annotated.end_reasons[0]
        assert reason.startswith(FALLBACK), reason
        end = annotated.subtask_ends[0]
        assert reason.endswith(f"holds from step {end - 1}"), reason
        # The hand comes to rest on the lever after the 65-step approach, before it turns it.
        assert 60 < end < 90, (label, end)
        # The first sustained touch (a finger brushing the lever on the way in is not one).
        assert run_starts(annotated.holds[:, 0])[0] == end - 1, label
        assert annotated.end_reasons[1].startswith("the task is done"), annotated.end_reasons


def test_the_doors_pose_is_inferred_from_the_push(pushed):
    """Within 0.03 rad of where the door stood (the model's own pose is 0.1 off for two demos)
    and 25 mm (a finger on the lever's 3 cm deep top face explains the demo anywhere across it)."""

    def yaw(pose) -> float:
        return 2 * float(np.arctan2(pose[6], pose[3]))

    recorded = _recorded_poses()
    own = pushed.scene.default_fixtures["Door_main"]
    moved = 0
    for annotated in pushed.demos:
        truth = recorded[annotated.demo.name]["Door_main"]
        found = annotated.fixture_poses["Door_main"]
        assert abs(yaw(found) - yaw(truth)) < 0.03, annotated.demo.label
        assert np.linalg.norm(np.subtract(found[:2], truth[:2])) < 0.025, annotated.demo.label
        moved += abs(yaw(own) - yaw(truth)) > 0.05
    assert moved == 2  # two demos stood elsewhere than the model's door: the push told where


def test_generation_replays_the_push_and_holds_nothing(pushed):
    """Each attempt replays the open hand; the handle is never taken for a held object (no
    held-object shift) and the first subtask's check is the touch, not the grasp that the
    person never made (with retries on, a grasp check would fail every attempt)."""
    attempts = [
        generate_attempt(
            pushed.scene,
            pushed.demos,
            AttemptPlan(a, 0, attempt_seed(pushed.spec.seed, 0, a)),
            pushed.params,
        )
        for a in range(5)
    ]
    assert all("held_offsets" not in a.provenance for a in attempts)
    assert all((a.actions[:, -1] < 0).all() for a in attempts)  # the gripper stays open
    assert sum(a.success for a in attempts) >= 4, [a.reason for a in attempts]


@pytest.mark.slow
def test_factory_annotate_prints_the_fallback(grasp_spec):
    result = subprocess.run(
        [sys.executable, "-m", "demofactory.cli.main", "annotate", str(grasp_spec)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(FALLBACK) == 3, result.stdout
