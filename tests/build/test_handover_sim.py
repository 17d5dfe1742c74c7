"""TwoArmHandover (a Panda pair, sequential subtasks): the right arm hands the hammer to the left.
Scripted per-arm seeds, the sequential cut of each arm's wait, and a generated attempt that ends
with the left hand on the handle and the right hand off the hammer (robosuite's own check)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from demofactory.generators.bimanual import generate_bimanual_attempt
from demofactory.generators.mimicgen import AttemptPlan, attempt_seed
from demofactory.seeds.resolve import resolve_spec
from demofactory.specs.adapters import bimanual_params
from demofactory.specs.spec import load_spec

pytestmark = pytest.mark.sim  # an env, three demos annotated and one attempt: ~4 s

SPEC = Path(__file__).parents[2] / "scene_specs" / "two_arm_handover.yaml"
GRASP, CARRY, TAKE, RELEASE, HOLD = range(5)  # the spec's subtasks, in order


@pytest.fixture(scope="module")
def resolved():
    return resolve_spec(load_spec(SPEC, {"generation.attempts": 1}))


def test_each_arm_waits_are_cut_out_of_the_seeds(resolved):
    for demo in resolved.demos:
        seg = demo.segments
        assert seg[GRASP][1] == seg[CARRY][0]
        # The receiver held still until the carry ended: its window opens when it starts to move.
        left = demo.eef_poses["left"][:, :3, 3]
        assert seg[TAKE][0] > 100
        assert np.linalg.norm(left[seg[TAKE][0]] - left[0]) < 0.01
        # The giver's settling after the carry closes the carry; its wait for the receiver's
        # grasp is skipped, so the release starts where that grasp ended.
        assert seg[RELEASE][0] == seg[TAKE][1] == seg[HOLD][0]
        right = demo.eef_poses["right"][:, :3, 3]
        held = right[seg[CARRY][1] : seg[RELEASE][0] + 1]
        assert seg[RELEASE][0] - seg[CARRY][1] > 50
        assert np.linalg.norm(held - held[-1], axis=1).max() <= 0.005  # annotate's STILL


def test_a_generated_handover_ends_in_the_left_hand(resolved):
    spec, scene = resolved.spec, resolved.scene
    plan = AttemptPlan(0, 0, attempt_seed(spec.seed, 0, 0))
    attempt = generate_bimanual_attempt(scene, resolved.demos, plan, bimanual_params(spec))
    assert attempt.success, attempt.reason
    starts = dict(attempt.provenance["subtask_starts"])
    assert starts[TAKE] > starts[CARRY] and starts[RELEASE] > starts[TAKE]
    scene.set_state(attempt.states[-1])
    right_holds_any, left_holds_handle, hammer_z, table_z = scene.env._get_task_info()
    assert left_holds_handle and not right_holds_any and hammer_z - table_z > 0.1
    assert attempt.actions.shape[1] == 14
