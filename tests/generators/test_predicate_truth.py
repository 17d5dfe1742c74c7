"""Each predicate kind seen true and seen false in a real Stack scene, on states of its human demo.

The demo starts with the cubes apart and ends with the red cube resting on the green one, the hand
open; in between the hand carries the red cube. Numeric parameters are checked at the boundary: a
threshold just below the measured value holds, just above it does not. `inside`, `on_peg`,
`opened` and `joint` need other scenes: tests/generators/test_task_predicates.py sees them both
ways.
"""

from __future__ import annotations

import numpy as np
import pytest
from demofactory.seeds.demos import load_seed_demos
from demofactory.simulation.scene import Placement, Scene
from demofactory.specs.spec import load_spec

from tests.conftest import SPECS

pytestmark = pytest.mark.sim

CARRY = 300  # a step of the demo with the red cube in the closed hand, above the table


@pytest.fixture(scope="module")
def stack():
    spec = load_spec(SPECS / "stack.yaml", {"cameras": []})
    scene = Scene(spec)
    demo = load_seed_demos(spec.resolve_path(spec.seed_demos[0]))[0]
    scene.reset_to(demo.states[0], Placement({}))
    scene.mark_start()  # `lifted` measures from here
    return scene, demo


def _at(stack, step: int) -> Scene:
    scene, demo = stack
    step %= demo.length
    scene.set_state(demo.states[step])
    scene.gripper_closed = bool(demo.actions[max(step - 1, 0), -1] > 0)  # the command held then
    return scene


def _holds(scene: Scene, *predicates: str) -> list[bool]:
    return [scene.holds(p) for p in predicates]


def test_grasped_holds_while_carried_not_before_or_after(stack):
    assert _at(stack, CARRY).holds("grasped(cubeA)")
    assert not _at(stack, 0).holds("grasped(cubeA)")
    assert not _at(stack, -1).holds("grasped(cubeA)")  # released on the green cube
    assert not _at(stack, CARRY).holds("grasped(cubeB)")


def test_lifted_compares_the_height_gain_with_its_threshold(stack):
    scene = _at(stack, CARRY)
    gain = float(scene.data.xpos[scene.bodies["cubeA"]][2] - scene._start_z["cubeA"])
    assert gain > 0.01
    assert _holds(
        scene, f"lifted(cubeA, {gain - 0.005:.4f})", f"lifted(cubeA, {gain + 0.005:.4f})"
    ) == [
        True,
        False,
    ]
    assert not scene.holds("lifted(cubeB, 0.01)")
    assert not _at(stack, 0).holds("lifted(cubeA, 0.01)")


def test_near_compares_the_centre_distance_with_its_threshold(stack):
    for step in (0, -1):
        scene = _at(stack, step)
        a, b = (scene.data.xpos[scene.bodies[n]] for n in ("cubeA", "cubeB"))
        gap = float(np.linalg.norm(a - b))
        below, above = (
            f"near(cubeA, cubeB, {gap - 0.002:.4f})",
            f"near(cubeA, cubeB, {gap + 0.002:.4f})",
        )
        assert _holds(scene, below, above) == [False, True], gap
    assert _at(stack, -1).holds("near(cubeA, cubeB)")  # 0.05 m: stacked
    assert not _at(stack, 0).holds("near(cubeA, cubeB)")  # apart


def test_contact_and_on_top_hold_once_stacked(stack):
    end = _at(stack, -1)
    assert _holds(end, "contact(cubeA, cubeB)", "on_top(cubeA, cubeB)") == [True, True]
    assert not end.holds("on_top(cubeB, cubeA)")  # the order matters
    start = _at(stack, 0)
    assert _holds(start, "contact(cubeA, cubeB)", "on_top(cubeA, cubeB)") == [False, False]
    carried = _at(stack, CARRY)
    assert not carried.holds("on_top(cubeA, cubeB)")  # held, and not touching


def test_on_top_needs_touching_and_a_free_cube(stack):
    scene = _at(stack, -1)
    body = scene.bodies["cubeA"]
    adr = scene.model.jnt_qposadr[scene.model.body_jntadr[body]]
    state = scene.get_state()
    state[1 + adr + 2] += 0.03  # 3 cm above the green cube: still over it, no longer touching
    scene.set_state(state)
    assert _holds(scene, "contact(cubeA, cubeB)", "on_top(cubeA, cubeB)") == [False, False]
    assert scene.holds("near(cubeA, cubeB, 0.08)")


def test_success_and_compositions_both_ways(stack):
    start = _at(stack, 0)
    assert _holds(
        start,
        "success",
        "not(success)",
        "any(grasped(cubeA), near(cubeA, cubeB))",
        "all(not(grasped(cubeA)), not(near(cubeA, cubeB)))",
    ) == [False, True, False, True]
    end = _at(stack, -1)
    assert _holds(
        end,
        "success",
        "not(success)",
        "any(grasped(cubeA), near(cubeA, cubeB))",
        "all(on_top(cubeA, cubeB), grasped(cubeA))",
        "all(on_top(cubeA, cubeB), not(grasped(cubeA)))",
    ) == [True, False, True, False, True]


def test_touching_is_not_fooled_by_mujocos_zero_distance(stack):
    """MuJoCo 3.9's mj_geomDistance reads exactly 0.0 for some geoms centimetres apart
    (google-deepmind/mujoco#3383; on this demo's states, the Panda hand's mesh and a finger
    pad against a cube). `touching` and `grasped` read distances through
    `geom_distance.surface_distance`, which checks each 0.0 against smaller `distmax`: every
    such pair is found apart, as a reading bounded just above the 3 mm margin agrees."""
    import mujoco
    from demofactory.robots.geom_distance import TOLERANCE, surface_distance
    from demofactory.simulation.scene import TOUCH_MARGIN

    scene, demo = stack
    found = []
    for step in range(0, demo.length, 4):
        scene.set_state(demo.states[step])
        for h in sorted(scene._hand):
            for obj in ("cubeA", "cubeB"):
                for g in scene._geoms[obj]:
                    raw = mujoco.mj_geomDistance(scene.model, scene.data, h, g, 1.0, None)
                    bounded = mujoco.mj_geomDistance(
                        scene.model, scene.data, h, g, TOUCH_MARGIN + 1e-6, None
                    )
                    if raw == 0.0 and bounded > TOUCH_MARGIN:
                        found.append((step, h, obj, g))
    assert len(found) >= 3, "the demo's states show MuJoCo's 0.0 (the bug this guards)"
    for step, h, obj, g in found:
        scene.set_state(demo.states[step])
        fixed = surface_distance(scene.model, scene.data, h, g, 1.0)
        assert fixed > TOUCH_MARGIN, (step, h, obj)
        # the value is the pair's distance: no reading under it, one just above it
        below = mujoco.mj_geomDistance(scene.model, scene.data, h, g, fixed - TOLERANCE, None)
        assert below == pytest.approx(fixed - TOLERANCE)
        near = scene._distance(frozenset({h}), scene._geoms[obj], TOUCH_MARGIN)
        assert near > TOUCH_MARGIN
