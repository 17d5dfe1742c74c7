"""generation.held_object_correction on a real Stack scene: the carry to the base cube is shifted
by where the red cube sits in this hand against where it sat in the human demo's."""

from __future__ import annotations

import numpy as np
import pytest
from demofactory.generators.mimicgen import AttemptPlan, attempt_seed, generate_attempt
from demofactory.seeds.resolve import resolve_spec
from demofactory.specs.adapters import mimicgen_params
from demofactory.specs.spec import load_spec

from tests.conftest import SPECS

pytestmark = pytest.mark.sim


@pytest.fixture(scope="module")
def stack():
    return resolve_spec(load_spec(SPECS / "stack_lowdim.yaml"))


def _attempt(stack, correction: bool):
    spec = load_spec(SPECS / "stack_lowdim.yaml", {"generation.held_object_correction": correction})
    return generate_attempt(
        stack.scene, stack.demos, AttemptPlan(0, 0, attempt_seed(0, 0, 0)), mimicgen_params(spec)
    )


def test_the_carry_is_shifted_by_the_grip_offset_and_only_the_carry(stack):
    corrected, plain = _attempt(stack, True), _attempt(stack, False)
    assert "held_offsets" not in plain.provenance
    (entry,) = corrected.provenance["held_offsets"]
    assert entry["subtask"] == 1 and entry["object"] == "cubeA"  # carried to cubeB, not cubeA
    offset = np.array(entry["offset"])
    assert 0 < np.linalg.norm(offset) < 0.04
    # The same grasp (same seed, same draws) up to the carry, then other commands.
    first = int(np.flatnonzero(np.any(corrected.actions != plain.actions, axis=1))[0])
    grasp_end = stack.demos[0].subtask_ends[0]
    assert first >= grasp_end - 5
    np.testing.assert_array_equal(corrected.states[:first], plain.states[:first])


def test_on_another_robots_hand_the_cube_is_released_nearer_the_demos_place():
    """IIWA's Robotiq 140 holds the red cube ~8 mm off where the Panda's hand held it: where the
    cube is let go, in the base cube's frame, against the human demo's, with and without."""
    iiwa = resolve_spec(load_spec(SPECS / "stack_lowdim.yaml", {"task.robot": "IIWA"}))
    scene, demo = iiwa.scene, iiwa.demos[0]

    def released(states, actions, poses) -> np.ndarray:
        opens = np.flatnonzero((actions[1:, -1] <= 0) & (actions[:-1, -1] > 0)) + 1
        a, b = poses(states, int(opens[-1]))
        return (np.linalg.inv(b) @ a)[:3, 3]  # the red cube in the green cube's frame

    def scene_poses(states, step):
        scene.env.sim.set_state_from_flattened(states[step])
        scene.env.sim.forward()
        return scene.object_pose("cubeA"), scene.object_pose("cubeB")

    def demo_poses(_, step):
        return demo.object_poses["cubeA"][step], demo.object_poses["cubeB"][step]

    wanted = released(None, demo.demo.actions, demo_poses)
    misses = {}
    for correction in (True, False):
        spec = load_spec(
            SPECS / "stack_lowdim.yaml",
            {"task.robot": "IIWA", "generation.held_object_correction": correction},
        )
        plan = AttemptPlan(1, 0, attempt_seed(0, 0, 1))
        attempt = generate_attempt(scene, iiwa.demos, plan, mimicgen_params(spec))
        got = released(attempt.states, attempt.actions, scene_poses)
        misses[correction] = float(np.linalg.norm((got - wanted)[:2]))
    # Measured: 14 mm against 20 (the rest is the arm's tracking under action noise, alike in
    # both); the grip's offset on this attempt is 8 mm.
    assert misses[False] - misses[True] > 0.004, misses
