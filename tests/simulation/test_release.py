"""Putting an object down instead of dropping it (`generation.release: lower`): the support
below an object by rays (`Scene.support_heights`, `drop_height`), the sideways move that gets it
over one flat surface (`Scene.place_shift`), and PickPlace from its human demo, whose release of
today's larger cereal box would land it across the bin's divider."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
from demofactory.generators.mimicgen import (
    AttemptPlan,
    _release_step,
    attempt_seed,
    generate_attempt,
)
from demofactory.seeds.resolve import resolve_spec
from demofactory.simulation.scene import FLAT, Placement
from demofactory.specs.adapters import mimicgen_params
from demofactory.specs.spec import load_spec

from tests.conftest import SPECS


def test_release_step_is_the_first_opening_after_a_close():
    assert _release_step(np.array([-1.0, 1, 1, 1, -1, -1, 1])) == 4
    assert _release_step(np.array([1.0, 1, 1])) is None
    assert _release_step(np.array([-1.0, -1, 1, 1])) is None  # a close, never let go


@pytest.fixture(scope="module")
def pick_place():
    spec = load_spec(SPECS / "pick_place_human.yaml", {"cameras": [], "generation.attempts": 10})
    resolved = resolve_spec(spec)
    yield spec, resolved
    resolved.scene.env.close()


def _put(scene, name: str, xyz, quat=(1.0, 0.0, 0.0, 0.0)) -> None:
    joint = scene.model.body_jntadr[scene.bodies[name]]
    adr = scene.model.jnt_qposadr[joint]
    scene.data.qpos[adr : adr + 7] = [*xyz, *quat]
    scene.data.qvel[:] = 0.0
    mujoco.mj_forward(scene.model, scene.data)


@pytest.mark.sim
def test_drop_height_of_resting_and_raised_objects(pick_place):
    _, resolved = pick_place
    scene = resolved.scene
    scene.reset_to(resolved.demos[0].start_state, Placement({}))
    for name in ("milk", "bread", "cereal", "can"):
        assert abs(scene.drop_height(name)) < 0.005, name  # each rests in the first bin
        assert scene.resting(name)
    pose = scene.object_pose("can")
    _put(scene, "can", pose[:3, 3] + [0.0, 0.0, 0.1])
    assert scene.drop_height("can") == pytest.approx(0.1, abs=0.005)
    assert not scene.resting("can")


@pytest.mark.sim
def test_place_shift_moves_a_box_off_the_divider(pick_place):
    _, resolved = pick_place
    scene = resolved.scene
    scene.reset_to(resolved.demos[0].start_state, Placement({}))
    # The cereal box (10 cm wide in x) over the second bin's -x/+y quadrant, 4 cm across the
    # divider at x = 0.1 (2 cm thick), its bottom 3 mm over the divider's top (z = 0.9).
    _put(scene, "cereal", [0.07, 0.40, 0.978])
    heights = scene.support_heights("cereal")
    assert max(heights) == pytest.approx(0.9, abs=0.002)  # the divider's top
    assert min(heights) == pytest.approx(0.82, abs=0.002)  # the bin's floor
    shift = scene.place_shift("cereal", reach=0.04, step=0.005)
    assert shift is not None and shift[0] < -0.01  # away from the divider, into its quadrant
    assert float(np.linalg.norm(shift)) <= 0.04 + 1e-9
    after = scene.support_heights("cereal", shift)
    assert all(abs(h - 0.82) < FLAT for h in after)
    # Over the floor already: no move. Over a wider obstacle than the reach: none found.
    _put(scene, "cereal", [0.0, 0.40, 0.978])
    assert not scene.place_shift("cereal", reach=0.04, step=0.005).any()
    _put(scene, "cereal", [0.10, 0.28, 0.978])  # across both dividers' crossing
    assert scene.place_shift("cereal", reach=0.01, step=0.005) is None


@pytest.mark.sim
@pytest.mark.slow
def test_pick_place_human_puts_the_cereal_down_in_its_quadrant(pick_place):
    """The shard's first 8 attempts, each put down (`lower`) and with the person's own release
    (`replay`). Counted over attempts, not read off one: which attempt succeeds, and whether a
    given box stands, moves with the last bits of the physics, and those differ between CPUs
    (numba compiles the fast loop for the host's vector width): on one machine the first
    success stood, on another (AVX-512) it leans at 32 degrees and three others stand."""
    spec, resolved = pick_place
    replay = load_spec(
        SPECS / "pick_place_human.yaml",
        {"cameras": [], "generation.attempts": 10, "generation.release": "replay"},
    )
    replay_params = mimicgen_params(replay)
    upright = np.cos(np.radians(10))
    lowered = {"success": 0, "standing": 0}
    dropped = {"success": 0, "standing": 0}
    for i in range(8):
        plan = AttemptPlan(i, 0, attempt_seed(spec.seed, 0, i))
        put = generate_attempt(resolved.scene, resolved.demos, plan, resolved.params)
        lowered["success"] += put.success
        lowered["standing"] += resolved.scene.object_pose("cereal")[2, 2] > upright
        placed = {p["object"]: p["moved"] for p in put.provenance.get("placed", ())}
        if "cereal" in placed and np.any(placed["cereal"]):
            assert placed["cereal"][0] < 0  # moved off the divider, into its quadrant
        if "can" in placed:
            assert placed["can"][2] < -0.05  # the person dropped the can from 10+ cm
        fell = generate_attempt(resolved.scene, resolved.demos, plan, replay_params)
        assert "placed" not in fell.provenance
        dropped["success"] += fell.success
        dropped["standing"] += resolved.scene.object_pose("cereal")[2, 2] > upright
    # Put down, boxes stand and attempts succeed; let go where the person let go, the box
    # lands across the divider and leans on it (at most now and then one lands upright: 1 of 8
    # since touching/grasped read true surface distances, mujoco#3383), and no attempt succeeds.
    assert lowered["success"] >= 2 and lowered["standing"] >= 2, lowered
    assert dropped["success"] == 0, dropped
    assert dropped["standing"] < lowered["standing"], (lowered, dropped)
