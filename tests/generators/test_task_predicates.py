"""Predicates mean what robosuite means: checked against each env's own success function on the
final states of real seed demos (human NutAssembly, scripted PickPlaceCan and Door) and on
perturbations of them that undo the task."""

from __future__ import annotations

import numpy as np
import pytest
from demofactory.seeds.demos import load_seed_demos
from demofactory.simulation.scene import Placement, Scene
from demofactory.specs.spec import load_spec

from tests.conftest import SPECS

pytestmark = pytest.mark.sim

# spec, the predicate that says "done", and perturbations of the final state that undo it:
# (object, world offset in metres) applied to the object's free joint, or ("joint", object, value).
CASES = {
    "nut_assembly": (
        "all(on_peg(square_nut, square_peg), on_peg(round_nut, round_peg))",
        [
            ("square_nut", (0.06, 0.0, 0.0)),
            ("round_nut", (0.0, 0.0, 0.25)),
            ("round_nut", (-0.3, 0.0, 0.0)),
        ],
    ),
    "pick_place_can": (
        "all(inside(can, bin), not(grasped(can)))",
        [("can", (0.0, 0.0, 0.25)), ("can", (0.0, -0.5, 0.0)), ("can", (0.3, 0.0, 0.0))],
    ),
    "door": (
        "opened(door, 0.3)",
        [("joint", "door", 0.1), ("joint", "door", 0.0), ("joint", "door", 0.28)],
    ),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def final_state(request):
    spec = load_spec(SPECS / f"{request.param}.yaml", {"cameras": []})
    scene = Scene(spec)
    demo = load_seed_demos(spec.resolve_path(spec.seed_demos[0]))[0]
    scene.reset_to(demo.states[0], Placement({}), fixtures=demo.fixture_poses)
    scene.mark_start()
    return request.param, scene, demo


def test_the_done_predicate_agrees_with_robosuite_on_the_final_state(final_state):
    name, scene, demo = final_state
    done, _ = CASES[name]
    scene.set_state(demo.states[-1])
    assert scene.env._check_success(), "the seed demo itself must end with the task done"
    assert scene.holds(done)


def _perturb(scene, demo, change) -> None:
    """The demo's final state with one perturbation of CASES applied, set in the scene."""
    state = demo.states[-1].copy()
    if change[0] == "joint":
        state[1 + scene._joint_qpos(change[1])] = change[2]
    else:
        body = scene.bodies[change[0]]
        adr = scene.model.jnt_qposadr[scene.model.body_jntadr[body]]
        state[1 + adr : 1 + adr + 3] += change[1]
    scene.set_state(state)


@pytest.mark.parametrize("which", range(3))
def test_perturbations_that_undo_the_task_undo_both(final_state, which):
    name, scene, demo = final_state
    done, perturbations = CASES[name]
    _perturb(scene, demo, perturbations[which])
    assert not scene.env._check_success()
    assert not scene.holds(done)


# Per case, leaf predicates (each kind on its own, not inside a composition) that hold on the
# final state, each with the perturbation of CASES that must make it false.
LEAVES = {
    "nut_assembly": [
        ("on_peg(square_nut, square_peg)", 0),  # moved 6 cm off its peg
        ("on_peg(round_nut, round_peg)", 1),  # lifted above the peg's top
        ("on_peg(round_nut, round_peg)", 2),
    ],
    "pick_place_can": [("inside(can, bin)", 0), ("inside(can, bin)", 1), ("inside(can, bin)", 2)],
    "door": [("opened(door, 0.3)", 0), ("opened(door, 0.3)", 2), ("joint(door, {lo}, {hi})", 0)],
}


def test_each_leaf_predicate_holds_at_the_end_and_not_once_undone(final_state):
    name, scene, demo = final_state
    _, perturbations = CASES[name]
    for text, which in LEAVES[name]:
        scene.set_state(demo.states[-1])
        if name == "door":  # a window around the door's final joint position
            value = float(scene.data.qpos[scene._joint_qpos("door")])
            assert value > 0.35, value
            text = text.format(lo=f"{value - 0.05:.4f}", hi=f"{value + 0.05:.4f}")
        assert scene.holds(text), f"{text} on the final state"
        _perturb(scene, demo, perturbations[which])
        assert not scene.holds(text), f"{text} after {perturbations[which]}"


def test_a_spec_success_composition_replaces_robosuites_check():
    spec = load_spec(
        SPECS / "nut_assembly.yaml",
        {
            "cameras": [],
            "task.success": "all(on_peg(square_nut, square_peg), on_peg(round_nut, round_peg))",
        },
    )
    scene = Scene(spec)
    demo = load_seed_demos(spec.resolve_path(spec.seed_demos[0]))[0]
    scene.reset()
    agree = 0
    for t in range(0, demo.length, 25):
        scene.set_state(demo.states[t])
        assert scene.success() == scene.holds(spec.task.success)
        agree += scene.success() == bool(scene.env._check_success())
    scene.set_state(demo.states[-1])
    assert scene.success() and scene.env._check_success()
    assert agree >= 0.9 * len(
        range(0, demo.length, 25)
    )  # robosuite also wants the hand away from the nut


def test_inside_is_the_cavity_not_the_bounding_box():
    spec = load_spec(SPECS / "pick_place_can.yaml", {"cameras": []})
    scene = Scene(spec)
    scene.reset()
    lo, hi, floor_top = scene._cavity("bin")
    bin_pos = scene.data.xpos[scene.bodies["bin"]]
    centre = bin_pos + np.array([0.0, 0.0, floor_top + 0.03])
    assert scene._inside(centre, "bin")
    assert not scene._inside(centre + [0.0, 0.0, -0.04], "bin"), "below the floor's top"
    assert not scene._inside(centre + [hi[0] + 0.01, 0.0, 0.0], "bin"), "beyond the wall"
    assert not scene._inside(centre + [0.0, 0.0, hi[2] + 0.2], "bin"), "far above the rim"
