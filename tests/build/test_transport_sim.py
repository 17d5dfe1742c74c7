"""TwoArmTransport (a Panda pair facing each other, parallel then sequential subtasks): the right
arm takes the lid off the start bin and hands the hammer over; the left throws the cube into the
trash bin meanwhile, takes the hammer and puts it in the target bin."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from demofactory.generators.bimanual import generate_bimanual_attempt
from demofactory.generators.mimicgen import AttemptPlan, attempt_seed
from demofactory.seeds.resolve import resolve_spec
from demofactory.specs.adapters import bimanual_params
from demofactory.specs.spec import load_spec

pytestmark = pytest.mark.sim  # three 640-step demos annotated and one attempt: ~5 s

SPEC = Path(__file__).parents[2] / "scene_specs" / "two_arm_transport.yaml"
LID, LID_AWAY, HAMMER, CARRY, TRASH, DROP, TAKE, RELEASE, PLACE = range(9)


@pytest.fixture(scope="module")
def resolved():
    return resolve_spec(load_spec(SPEC, {"generation.attempts": 1}))


def test_the_arms_work_side_by_side_then_hand_over(resolved):
    for demo in resolved.demos:
        seg = demo.segments
        # each arm's chain of segments, back to back
        assert [seg[i][1] for i in (LID, LID_AWAY, HAMMER)] == [
            seg[i][0] for i in (LID_AWAY, HAMMER, CARRY)
        ]
        assert seg[TRASH][1] == seg[DROP][0]
        assert seg[TRASH][0] == seg[LID][0] == 0  # the cube and the lid at the same time
        # the left waited for the carry and the right for the left's grasp: waits cut out
        assert seg[TAKE][0] > seg[DROP][1] and seg[RELEASE][0] == seg[TAKE][1] == seg[PLACE][0]


def test_a_generated_transport_ends_with_both_objects_in_their_bins(resolved):
    spec, scene = resolved.spec, resolved.scene
    plan = AttemptPlan(0, 0, attempt_seed(spec.seed, 0, 0))
    attempt = generate_bimanual_attempt(scene, resolved.demos, plan, bimanual_params(spec))
    assert attempt.success, attempt.reason
    starts = dict(attempt.provenance["subtask_starts"])
    assert starts[TAKE] > starts[CARRY] and starts[RELEASE] > starts[TAKE]
    assert starts[TRASH] < starts[HAMMER]  # the left worked while the right opened the bin
    scene.set_state(attempt.states[-1])
    transport = scene.env.transport
    assert transport.payload_in_target_bin and transport.trash_in_trash_bin
    lid_z = scene.object_pose("lid")[2, 3]
    assert np.isclose(lid_z, scene.object_pose("table")[2, 3] + 0.045, atol=0.02)  # on the table
