"""`factory export --actions`: relabeled action spaces, replayed with robosuite's controllers."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from demofactory.build.action_spaces import (
    ACTION_SPACES,
    parse_action_spaces,
    rotation_6d,
    rotation_from_6d,
    space_layout,
)
from demofactory.cli.main import main
from demofactory.errors import UserError


def test_action_spaces_parse_comma_separated_and_repeated_in_order_once():
    assert parse_action_spaces(None) == ("delta_eef",)
    assert parse_action_spaces(["abs_eef,joint_pos", "abs_eef", " delta_eef"]) == (
        "abs_eef",
        "joint_pos",
        "delta_eef",
    )


def test_an_unknown_action_space_names_the_flag_and_the_allowed_names():
    with pytest.raises(UserError) as err:
        parse_action_spaces(["abs_eef,ee_vel"])
    text = str(err.value)
    assert "--actions" in text and "'ee_vel'" in text
    assert all(name in text for name in ACTION_SPACES)


def test_an_unknown_action_space_is_one_line_and_exit_2_before_anything_is_read(tmp_path, capsys):
    out = tmp_path / "export"
    code = main(["export", str(tmp_path / "nothing"), "--to", "gr00t", str(out), "--actions", "x"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--actions" in err[0]
    assert not out.exists()


def test_rotation_6d_is_pytorch3d_s_rows_and_inverts():
    rng = np.random.default_rng(3)
    from scipy.spatial.transform import Rotation

    rot = Rotation.random(5, random_state=rng).as_matrix()
    six = rotation_6d(rot)
    assert six.shape == (5, 6)
    np.testing.assert_array_equal(six[:, :3], rot[:, 0, :])  # first row, then second
    np.testing.assert_allclose(rotation_from_6d(six), rot, atol=1e-12)


def test_layout_names_mark_absolute_parts_the_way_gr00t_s_modality_reads_them():
    from demofactory.shards.export_gr00t import _parts

    layout = [p for name in ACTION_SPACES for p in space_layout(name, 7)]
    parts = _parts(layout, action=True)
    assert [k for k, v in parts.items() if not v["absolute"]] == ["delta_pos", "delta_axis_angle"]
    assert parts["abs_eef_rot6d"]["rotation_type"] == "rotation_6d"
    assert parts["joint_pos"]["end"] - parts["joint_pos"]["start"] == 7


def test_export_relabels_replays_and_reports(lift_dataset, tmp_path):
    """The tiny Lift dataset exported with all three spaces: each replays with its controller,
    the labels agree with the recorded states, and modality.json marks absolute per part."""
    import pyarrow.parquet as pq
    from demofactory.shards.export_source import load_source, read_episodes
    from demofactory.shards.metadata import load_dataset_info
    from demofactory.simulation.scene import Scene
    from demofactory.specs.spec import load_stored_spec

    out = tmp_path / "gr00t"
    args = ["export", str(lift_dataset), "--to", "gr00t", str(out)]
    assert main([*args, "--actions", "delta_eef,abs_eef", "--actions", "joint_pos"]) == 0
    report = json.loads((out / "meta" / "action_spaces.json").read_text())
    for name in ("abs_eef", "joint_pos", "delta_eef"):
        replay = report["spaces"][name]["replay"]
        assert replay["episodes"] == len(load_source(lift_dataset).records)
        assert replay["success_rate"] >= 0.95, (name, replay)
        assert replay["loop"] == "fast", (name, replay)  # the factory's loop, not env.step
    assert report["spaces"]["delta_eef"]["replay"]["eef_position_error_m"]["max"] < 1e-3
    assert report["spaces"]["abs_eef"]["replay"]["eef_position_error_m"]["mean"] < 5e-3
    modality = json.loads((out / "meta" / "modality.json").read_text())["action"]
    assert {k: v["absolute"] for k, v in modality.items()} == {
        k: v["absolute"] for k, v in report["action"].items()
    }
    assert modality["abs_eef_pos"]["absolute"] and not modality["delta_pos"]["absolute"]

    # the labels against the recorded states: joint targets are the next state's joints, and
    # the absolute pose goal lies within one step's reach of the next state's grip site
    source = load_source(lift_dataset)
    episode = next(read_episodes(source))
    info = load_dataset_info(lift_dataset)
    scene = Scene(load_stored_spec(info, lift_dataset / "dataset_info.json"))
    table = pq.read_table(sorted(out.glob("data/chunk-000/episode_000000.parquet"))[0])
    action = np.stack(table.column("action").to_numpy(zero_copy_only=False))
    np.testing.assert_array_equal(action[:, :7], episode.actions)  # delta_eef: as stored
    robot = scene.env.robots[0]
    joints = episode.sim_states[:, 1 + np.asarray(robot._ref_joint_pos_indexes)]
    start = modality["joint_pos"]["start"]
    np.testing.assert_allclose(action[:-1, start : start + 7], joints[1:], atol=1e-6)
    t = len(episode.actions) // 2
    scene.set_state(episode.sim_states[t + 1])
    base_pos, base_ori = robot.composite_controller.get_controller_base_pose(robot.arms[0])
    reached = base_ori.T @ (scene.eef_pose()[:3, 3] - base_pos)
    goal = action[t, modality["abs_eef_pos"]["start"] : modality["abs_eef_pos"]["end"]]
    assert np.linalg.norm(goal - reached) < 0.05  # OSC's largest step is 5 cm


def test_lerobot_export_writes_the_relabeled_action_feature(lift_dataset, tmp_path):
    # In a process of its own, as a user runs it: relabeling builds envs, so the export must
    # install the robot repairs itself (an in-process main() may find them installed already)
    out = tmp_path / "lerobot"
    args = ["export", str(lift_dataset), "--to", "lerobot", str(out), "--actions", "abs_eef"]
    done = subprocess.run(
        [sys.executable, "-m", "demofactory.cli.main", *args], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["features"]["action"]["shape"] == [10]
    assert info["features"]["action"]["names"][:4] == [
        "abs_eef_pos_0",
        "abs_eef_pos_1",
        "abs_eef_pos_2",
        "abs_eef_rot6d_0",
    ]
    stats = json.loads((out / "meta" / "stats.json").read_text())
    assert len(stats["action"]["mean"]) == 10
    report = json.loads((out / "meta" / "action_spaces.json").read_text())
    assert list(report["spaces"]) == ["abs_eef"]
    assert report["spaces"]["abs_eef"]["replay"]["success_rate"] >= 0.95
