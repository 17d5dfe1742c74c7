"""Skill windows and pauses (generators/skills.py) on hand-made trajectories, and the planner
(factory/simulation/planning.py) and `transit: plan` on a real robosuite scene."""

from __future__ import annotations

import numpy as np
import pytest
from demofactory.generators.skills import event_steps, paused_steps, relative_positions, skill_start


def _poses(positions: np.ndarray) -> np.ndarray:
    poses = np.repeat(np.eye(4)[None], len(positions), axis=0)
    poses[:, :3, 3] = positions
    return poses


def test_relative_positions_are_in_the_object_frame():
    turn = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])  # 90 deg about z
    obj = np.eye(4)
    obj[:3, :3], obj[:3, 3] = turn, [1.0, 0.0, 0.0]
    hand = np.eye(4)
    hand[:3, 3] = [1.0, 0.5, 0.2]  # 0.5 m along world y = the object's +x
    rel = relative_positions(hand[None], obj[None])
    np.testing.assert_allclose(rel[0], [0.5, 0.0, 0.2], atol=1e-12)


def test_a_detour_before_the_grasp_is_left_out_of_the_window():
    # 0..39: the hand wanders 40 cm up and back; 40..59: it descends 10 cm to the object;
    # contact and the gripper closing at 55.
    wander = np.stack([np.zeros(40), np.zeros(40), 0.1 + 0.4 * np.sin(np.linspace(0, np.pi, 40))])
    descend = np.stack([np.zeros(20), np.zeros(20), np.linspace(0.1, 0.0, 20)])
    rel = np.concatenate([wander.T, descend.T])
    contact = np.zeros(60, bool)
    contact[55:] = True
    gripper = -np.ones(60)
    gripper[55:] = 1.0
    start = skill_start(rel, contact, gripper, 0, 60, margin=0.08)
    assert 38 <= start <= 48  # the descent's last 8 cm, not the 40 cm wander before it
    assert np.linalg.norm(rel[start] - rel[55]) <= 0.08
    assert np.linalg.norm(rel[start - 1] - rel[55]) > 0.08


def test_a_regrasp_anchors_the_window_at_the_second_grasp():
    # Contact 10..19 (first grasp), the hand goes 20 cm away, comes back, contact again 50..59.
    x = np.concatenate(
        [np.zeros(20), np.linspace(0, 0.2, 15), np.linspace(0.2, 0, 15), np.zeros(10)]
    )
    rel = np.stack([x, np.zeros(60), np.zeros(60)], axis=1)
    contact = np.zeros(60, bool)
    contact[10:20] = contact[50:] = True
    events = event_steps(contact, -np.ones(60), 0, 60)
    assert events.tolist() == [10, 50]
    assert skill_start(rel, contact, -np.ones(60), 0, 60, margin=0.05) > 35


def test_a_segment_in_contact_from_its_start_is_all_skill():
    rel = np.stack([np.linspace(0, 0.5, 30), np.zeros(30), np.zeros(30)], axis=1)
    contact = np.ones(30, bool)
    assert skill_start(rel, contact, np.ones(30), 0, 30, margin=0.08) == 0


def test_no_event_anchors_at_the_segment_end():
    rel = np.stack([np.linspace(0.5, 0, 30), np.zeros(30), np.zeros(30)], axis=1)
    start = skill_start(rel, np.zeros(30, bool), -np.ones(30), 0, 30, margin=0.1)
    assert 20 <= start <= 25


def test_pauses_keep_their_first_steps_and_a_gripper_change_is_never_a_pause():
    pos = np.zeros((20, 3))
    pos[:5, 0] = np.linspace(0, 0.05, 6)[:5]
    pos[5:, 0] = 0.05  # still from step 5 on
    poses = _poses(pos)
    gripper = -np.ones(20)
    gripper[12:] = 1.0  # the person closes the hand at 12
    fingers = np.zeros((20, 2))
    objects = np.zeros((20, 1, 3))
    drop = paused_steps(poses, gripper, fingers, objects, keep=2)
    assert not drop[:7].any()  # moving, then the first two still steps kept
    assert drop[7:11].all()
    assert not drop[11]  # the step before the command changes is not still
    assert not drop[12:14].any() and drop[14:19].all()


def test_fingers_still_closing_are_not_a_pause():
    poses = _poses(np.zeros((10, 3)))
    fingers = np.linspace(0, 0.04, 10)[:, None].repeat(2, axis=1)  # closing 4 mm a step
    drop = paused_steps(poses, np.ones(10), fingers, np.zeros((10, 1, 3)))
    assert not drop.any()


# --- the planner, on a real scene ------------------------------------------------------------


@pytest.fixture(scope="module")
def lift_scene():
    from demofactory.simulation.scene import Placement, Scene
    from demofactory.specs.spec import load_spec

    from tests.conftest import SPECS

    spec = load_spec(SPECS / "lift.yaml", {"cameras": []})
    scene = Scene(spec)
    scene.reset_to(None, Placement({}))
    return scene


@pytest.mark.sim
def test_a_planned_transit_reaches_its_goal_and_clears_the_cube(lift_scene):
    scene = lift_scene
    start = scene.eef_pose()
    cube = scene.object_pose("cube")
    goal = start.copy()
    goal[:3, 3] = cube[:3, 3] + [0.0, 0.0, 0.08]
    way, why = scene.plan_transit(goal, None, 0.01, 20000, seed=3)
    assert why == "" and way is not None
    np.testing.assert_allclose(way[-1][:3, 3], goal[:3, 3], atol=2e-3)
    steps = np.linalg.norm(np.diff(way[:, :3, 3], axis=0), axis=1)
    assert steps.max() <= 0.01 + 1e-6  # the speed limit, per control step
    # The same call plans the same way (the planner's budget is a count, not seconds).
    again, _ = scene.plan_transit(goal, None, 0.01, 20000, seed=3)
    np.testing.assert_array_equal(way, again)


@pytest.mark.sim
def test_a_goal_inside_the_table_is_refused_with_a_reason(lift_scene):
    scene = lift_scene
    goal = scene.eef_pose()
    goal[:3, 3] = scene.object_pose("cube")[:3, 3] - [0.0, 0.0, 0.1]  # under the table top
    way, why = scene.plan_transit(goal, None, 0.01, 2000, seed=0)
    assert way is None
    assert "collision" in why or "reach" in why


# --- transit: plan, end to end on the human Lift demos -------------------------------------------


@pytest.fixture(scope="module")
def lift_plan():
    from demofactory.seeds.resolve import resolve_spec
    from demofactory.specs.spec import load_spec

    from tests.conftest import SPECS

    spec = load_spec(SPECS / "lift.yaml", {"cameras": [], "generation.transit": "plan"})
    return spec, resolve_spec(spec)


def _attempt(spec, resolved, attempt_id):
    from demofactory.generators.mimicgen import AttemptPlan, attempt_seed, generate_attempt

    plan = AttemptPlan(attempt_id, 0, attempt_seed(spec.seed, 0, attempt_id))
    return generate_attempt(resolved.scene, resolved.demos, plan, resolved.params)


@pytest.mark.sim
def test_planned_transits_leave_the_persons_detours_out(lift_plan):
    spec, resolved = lift_plan
    # The 1,143-step human demo (demo_2) wanders; its skill windows are a fraction of it.
    long = next(d for d in resolved.demos if d.demo.length > 1000)
    skill = sum(e - s for s, e in (long.skill(p) for p in range(len(long.order))))
    assert skill < 0.3 * long.demo.length
    attempts = [_attempt(spec, resolved, i) for i in range(4)]
    assert all(a.success for a in attempts), [a.reason for a in attempts]
    assert all(a.length < 300 for a in attempts), [a.length for a in attempts]
    # The reach is planned; the lift starts in contact, where the hand already is: no transit.
    assert all(a.provenance["transits"] == 1 for a in attempts)
    assert not any("transit_fallbacks" in a.provenance for a in attempts)


@pytest.mark.sim
def test_a_planned_attempt_is_the_same_attempt_again(lift_plan):
    spec, resolved = lift_plan
    first, again = _attempt(spec, resolved, 7), _attempt(spec, resolved, 7)
    np.testing.assert_array_equal(first.states, again.states)
    np.testing.assert_array_equal(first.actions, again.actions)


@pytest.mark.sim
def test_a_window_the_arm_cannot_reach_is_refused_naming_the_subtask(lift_plan):
    import dataclasses

    from demofactory.errors import SpecError
    from demofactory.seeds.resolve import check_planning_goals

    spec, resolved = lift_plan
    demo = resolved.demos[0]
    far = demo.eef_poses.copy()
    far[:, 0, 3] += 3.0  # three metres in front of the robot
    broken = dataclasses.replace(demo, eef_poses=far)
    with pytest.raises(SpecError, match=r"subtask 0 in .*out of the Panda's reach"):
        check_planning_goals(spec, resolved.scene, [broken])
    check_planning_goals(spec, resolved.scene, resolved.demos)  # the real windows: reachable


@pytest.mark.sim
def test_a_skill_window_outside_its_segment_is_one_line_and_exit_2(tmp_path, capsys):
    from demofactory.cli.main import main

    from tests.conftest import write_spec

    spec = write_spec(
        tmp_path / "lift.yaml",
        subtasks=[
            {"object": "cube", "ends_when": "grasped(cube)", "skill": {"window": [5000, 5010]}},
            {"object": "cube"},
        ],
    )
    capsys.readouterr()
    code = main(["annotate", str(spec)])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert "subtasks[0].skill.window" in err and "outside the subtask's segment" in err


@pytest.mark.sim
def test_a_skill_window_given_in_the_spec_is_replayed_as_given(tmp_path):
    from demofactory.seeds.resolve import resolve_spec
    from demofactory.specs.spec import load_spec

    from tests.conftest import write_spec

    path = write_spec(
        tmp_path / "lift.yaml",
        subtasks=[
            {"object": "cube", "ends_when": "grasped(cube)", "skill": {"window": [130, 150]}},
            {"object": "cube"},
        ],
        generation={"transit": "plan"},
    )
    resolved = resolve_spec(load_spec(path, {"cameras": []}))
    for demo in resolved.demos:
        assert demo.skill(0) == (130, 150), demo.demo.label  # both ends, in every demo
        assert demo.skill(1)[1] == demo.segment(1)[1]  # the other subtask: found, not given


@pytest.mark.sim
def test_planned_transits_count_only_skill_windows_against_the_horizon():
    """Under `transit: plan` a person's approach is not replayed, so a demo with a long detour
    (the 1,143-step Lift demo) still fits a 300-step horizon: every Lift human demo does."""
    from demofactory.generators.mimicgen import _demo_span
    from demofactory.seeds.resolve import resolve_spec
    from demofactory.specs.spec import load_spec

    from tests.conftest import SPECS

    spec = load_spec(SPECS / "lift_img_human.yaml", {"cameras": []})
    resolved = resolve_spec(spec)
    try:
        gen, horizon = resolved.params.generation, resolved.params.horizon
        bridge = gen.interpolation_steps + gen.fixed_steps
        whole = [_demo_span(d) + len(d.order) * bridge for d in resolved.demos]
        skills = [_demo_span(d, planned=True) + len(d.order) * bridge for d in resolved.demos]
        assert all(s < w for s, w in zip(skills, whole, strict=True))
        assert sum(w <= horizon for w in whole) < len(whole)  # the whole demos do not all fit
        assert all(s <= horizon for s in skills)
    finally:
        resolved.scene.env.close()
