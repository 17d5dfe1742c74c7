"""Scripted seed demos: waypoint pose math, one real recording read back, and the CLI's bad
input."""

from __future__ import annotations

import json
import subprocess
import sys

import h5py
import numpy as np
import pytest
from demofactory.errors import SpecError
from demofactory.specs.spec import WaypointSpec, load_spec

from tests.conftest import REPO, SPECS, write_spec

C, S = np.cos(0.7), np.sin(0.7)
# The top-down grasp: grip site x along world y, y along world x, z down.
TOP_DOWN = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, -1.0]])
LIFT_SCRIPT = {
    "demos": 1,
    "tries": 2,
    "waypoints": [
        {"relative_to": "cube", "pos": [0, 0, 0.1], "gripper": "open", "steps": 30},
        {"relative_to": "cube", "pos": [0, 0, 0.0], "gripper": "open", "steps": 20},
        {"pos": [0, 0, 0], "gripper": "close", "steps": 10},
        {"relative_to": "cube", "pos": [0, 0, 0.15], "gripper": "close", "steps": 30},
    ],
}


def pose(pos, rot) -> np.ndarray:
    out = np.eye(4)
    out[:3, :3], out[:3, 3] = rot, pos
    return out


def point(**fields) -> WaypointSpec:
    return WaypointSpec(**{"gripper": "open", "steps": 10, **fields})


# --- pose math against hand-computed poses -----------------------------------------------------


def test_rpy_to_mat_quarter_turns():
    from demofactory.seeds.script import rpy_to_mat

    np.testing.assert_allclose(
        rpy_to_mat((0, 0, np.pi / 2)), [[0, -1, 0], [1, 0, 0], [0, 0, 1]], atol=1e-12
    )
    np.testing.assert_allclose(
        rpy_to_mat((np.pi / 2, 0, 0)), [[1, 0, 0], [0, 0, -1], [0, 1, 0]], atol=1e-12
    )
    # roll first, then yaw: x stays x under the roll, then turns to y
    np.testing.assert_allclose(
        rpy_to_mat((np.pi / 2, 0, np.pi / 2)) @ [1, 0, 0], [0, 1, 0], atol=1e-12
    )


def test_top_down_ignores_the_object_yaw():
    from demofactory.seeds.script import rpy_to_mat, waypoint_target

    obj = pose([0.1, 0.2, 0.8], rpy_to_mat((0, 0, 0.7)))
    target = waypoint_target(point(relative_to="can", pos=(0, 0, 0.1)), obj, np.eye(4))
    np.testing.assert_allclose(target, pose([0.1, 0.2, 0.9], TOP_DOWN), atol=1e-12)


def test_object_yaw_turns_axes_and_gripper():
    from demofactory.seeds.script import rpy_to_mat, waypoint_target

    obj = pose([0.1, 0.2, 0.8], rpy_to_mat((0, 0, 0.7)))
    target = waypoint_target(
        point(relative_to="box", pos=(0.1, 0, 0), orientation="object_yaw"), obj, np.eye(4)
    )
    expected = pose([0.1 + 0.1 * C, 0.2 + 0.1 * S, 0.8], [[-S, C, 0], [C, S, 0], [0, 0, -1]])
    np.testing.assert_allclose(target, expected, atol=1e-12)


def test_half_turn_nearer_home_is_chosen():
    from demofactory.seeds.script import rpy_to_mat, waypoint_target

    # yaw 2.5 and 2.5 - pi close a parallel gripper the same way: the smaller wrist turn wins
    obj = pose([0, 0, 0], rpy_to_mat((0, 0, 2.5)))
    target = waypoint_target(point(relative_to="box", orientation="object_yaw"), obj, np.eye(4))
    np.testing.assert_allclose(
        target[:3, :3], rpy_to_mat((0, 0, 2.5 - np.pi)) @ TOP_DOWN, atol=1e-12
    )


def test_object_frame_with_a_turn_about_its_origin():
    from demofactory.seeds.script import waypoint_target

    # a quarter turn about the object's y: the point 10 cm along x goes 10 cm down
    wp = point(relative_to="handle", pos=(0.1, 0, 0), orientation="object", turn=(0, np.pi / 2, 0))
    target = waypoint_target(wp, pose([1.0, 2.0, 3.0], np.eye(3)), np.eye(4))
    np.testing.assert_allclose(
        target, pose([1.0, 2.0, 2.9], [[0, 0, -1], [1, 0, 0], [0, -1, 0]]), atol=1e-12
    )


def test_without_an_object_the_previous_target_moves_by_a_world_offset():
    from demofactory.seeds.script import rpy_to_mat, waypoint_target

    previous = pose([0.3, -0.1, 1.0], rpy_to_mat((0.1, 0.2, 0.3)))
    target = waypoint_target(point(pos=(0, 0, 0.05)), None, previous)
    np.testing.assert_allclose(target, pose([0.3, -0.1, 1.05], previous[:3, :3]), atol=1e-12)


def test_demo_seeds_are_stable_and_distinct():
    from demofactory.seeds.script import demo_seed

    assert demo_seed(0, 1, 0) == demo_seed(0, 1, 0)
    assert (
        len({demo_seed(0, 0, 0), demo_seed(0, 1, 0), demo_seed(0, 0, 1), demo_seed(1, 0, 0)}) == 4
    )


# --- the schema ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("waypoint", "field", "fragment"),
    [
        (
            {"relative_to": "mug", "gripper": "open", "steps": 5},
            "script.waypoints[1].relative_to",
            "expected one of: cube",
        ),
        (
            {"relative_to": "cube", "pos": [0, 0], "gripper": "open", "steps": 5},
            "script.waypoints[1].pos",
            "three numbers",
        ),
        ({"gripper": "grab", "steps": 5}, "script.waypoints[1].gripper", "'open' or 'close'"),
        (
            {"gripper": "open", "steps": -1},
            "script.waypoints[1].steps",
            "greater than or equal to 1",
        ),
        (
            {"rot": [0, 0, 1], "gripper": "open", "steps": 5},
            "script.waypoints[1]",
            "need relative_to",
        ),
        ({"gripper": "open", "steps": 5000}, "script.waypoints", "task.horizon"),
    ],
)
def test_bad_waypoints_name_their_field(tmp_path, waypoint, field, fragment):
    script = {**LIFT_SCRIPT, "waypoints": [LIFT_SCRIPT["waypoints"][0], waypoint]}
    path = write_spec(tmp_path / "spec.yaml", script=script)
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert err.value.field == field and fragment in err.value.message, str(err.value)


# --- one real recording --------------------------------------------------------------------------


@pytest.mark.sim
def test_scripted_lift_demo_reads_back_and_succeeds(tmp_path):
    from demofactory.seeds.demos import load_seed_demos
    from demofactory.seeds.script import make_scene, model_xml, record_demos, save_demos

    spec = load_spec(write_spec(tmp_path / "spec.yaml", script=LIFT_SCRIPT))
    scene = make_scene(spec)
    demos = record_demos(scene, 1)
    out = tmp_path / "lift_scripted.hdf5"
    save_demos(out, spec, model_xml(scene), demos)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "lift_scripted.hdf5",
        "spec.yaml",
    ]  # no temporary left

    (demo,) = load_seed_demos(out)
    steps = sum(w["steps"] for w in LIFT_SCRIPT["waypoints"])
    assert (
        demo.env_name == "Lift"
        and demo.states.shape == (steps, scene.state_size)
        and demo.actions.shape == (steps, 7)
    )
    assert demo.states.dtype == np.float64 and np.abs(demo.actions).max() <= 1.0
    with h5py.File(out) as f:
        assert json.loads(f["data"].attrs["env_info"])["env_name"] == "Lift"
        assert {"repository_version", "date", "time"} <= set(f["data"].attrs)
        assert "<mujoco" in f["data/demo_1"].attrs["model_file"]
        assert isinstance(json.loads(f["data/demo_1"].attrs["fixture_poses"]), dict)
    scene.set_state(demo.states[0])
    assert not scene.env._check_success()
    scene.set_state(demo.states[-1])
    assert scene.env._check_success()


SCRIPTED_SPECS = sorted(p for p in SPECS.glob("*.yaml") if load_spec(p).script is not None)


def test_the_scripted_specs_are_found():
    assert {p.stem for p in SCRIPTED_SPECS} >= {
        "pick_place_can",
        "pick_place",
        "pick_place_milk",
        "pick_place_bread",
        "pick_place_cereal",
        "door",
    }


@pytest.mark.sim
@pytest.mark.parametrize("path", SCRIPTED_SPECS, ids=lambda p: p.stem)
def test_shipped_scripted_seeds_end_in_success(path):
    """Each shipped scripted seed file loads, and each demo's last state (fixtures restored)
    succeeds."""
    from demofactory.seeds.demos import load_seed_demos
    from demofactory.seeds.script import make_scene
    from demofactory.specs.arms import robot_list

    spec = load_spec(path)
    files = [spec.resolve_path(rel) for rel in spec.seed_demos if "scripted" in rel]
    assert files, f"{path.name}: seed_demos lists no scripted file"
    scene = make_scene(spec)
    for file in files:
        demos = load_seed_demos(
            file, arms=1 if spec.task.two_arm is None else 2, robots=len(robot_list(spec.task))
        )
        assert len(demos) == spec.script.demos
        with h5py.File(file) as f:
            fixtures = [json.loads(f[f"data/{d.name}"].attrs["fixture_poses"]) for d in demos]
        for demo, poses in zip(demos, fixtures, strict=True):
            assert demo.env_name == spec.task.env and demo.states.shape[1] == scene.state_size
            scene.reset(poses)
            scene.set_state(demo.states[0])
            scene.mark_start()  # `lifted` (lift_colour's success) counts from the demo's start
            scene.set_state(demo.states[-1])
            assert scene.env._check_success(), f"{file.name}:{demo.name}"


# --- the CLI: one line, exit 2 -------------------------------------------------------------------


def factory(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "demofactory.cli.main", *map(str, args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def assert_one_line(result: subprocess.CompletedProcess, *fragments: str) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == 2 and "Traceback" not in output, output
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ") and all(f in line for f in fragments), line


@pytest.mark.sim
@pytest.mark.parametrize(
    ("waypoint", "fragments"),
    [
        (
            {"relative_to": "mug", "gripper": "open", "steps": 5},
            ("script.waypoints[1].relative_to", "'mug'", "cube"),
        ),
        (
            {"relative_to": "cube", "pos": [0, 0, 0, 1], "gripper": "open", "steps": 5},
            ("script.waypoints[1].pos", "three numbers"),
        ),
        (
            {"gripper": "shut", "steps": 5},
            ("script.waypoints[1].gripper", "'open' or 'close'", "'shut'"),
        ),
        ({"gripper": "open", "steps": -3}, ("script.waypoints[1].steps", "-3")),
    ],
)
def test_cli_bad_waypoint(tmp_path, waypoint, fragments):
    script = {**LIFT_SCRIPT, "waypoints": [LIFT_SCRIPT["waypoints"][0], waypoint]}
    spec = write_spec(tmp_path / "spec.yaml", script=script)
    assert_one_line(factory("script", spec, "--out", tmp_path / "d.hdf5"), str(spec), *fragments)
    assert not (tmp_path / "d.hdf5").exists()


@pytest.mark.sim
def test_cli_spec_without_script(tmp_path):
    spec = write_spec(tmp_path / "spec.yaml")
    assert_one_line(
        factory("script", spec, "--out", tmp_path / "d.hdf5"),
        str(spec),
        "script",
        "no script: section",
    )


@pytest.mark.sim
def test_cli_refuses_an_existing_or_unwritable_output(tmp_path):
    spec = write_spec(tmp_path / "spec.yaml", script=LIFT_SCRIPT)
    existing = tmp_path / "d.hdf5"
    existing.write_bytes(b"keep")
    assert_one_line(factory("script", spec, "--out", existing), str(existing), "exists", "--force")
    assert existing.read_bytes() == b"keep"
    missing = tmp_path / "no_such_folder" / "d.hdf5"
    assert_one_line(factory("script", spec, "--out", missing), str(missing), "does not exist")


@pytest.mark.sim
def test_cli_script_that_never_succeeds(tmp_path):
    script = {
        "demos": 1,
        "tries": 2,
        "waypoints": [{"pos": [0, 0, 0], "gripper": "open", "steps": 3}],
    }
    spec = write_spec(tmp_path / "spec.yaml", script=script)
    out = tmp_path / "d.hdf5"
    result = factory("script", spec, "--out", out, "--quiet")
    assert_one_line(
        result, str(spec), "script.waypoints", "demo 0", "after 2 tries", "task not done at the end"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "spec.yaml"
    ]  # nothing written, not even a temporary
