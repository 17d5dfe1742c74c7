"""A generated two-arm dataset (TwoArmLift, three cameras: a front view and both wrist cameras)
exported by the real LeRobot and GR00T exporters: per-arm names, both wrist cameras, and GR00T's
right/left arm and hand parts covering every dimension once, with the right `absolute` flags;
and one of arms without grippers (TwoArmPegInHole): arm parts only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from demofactory.cli.main import main
from demofactory.shards.export_gr00t import export_gr00t
from demofactory.shards.export_lerobot import export_lerobot

# One real attempt with cameras on a local Ray cluster, then two exports.
pytestmark = [pytest.mark.sim, pytest.mark.ray, pytest.mark.slow]

SPEC = Path(__file__).parents[2] / "scene_specs" / "two_arm_lift_img.yaml"
WRISTS = ("robot0_eye_in_hand", "robot1_eye_in_hand")  # the right arm's, the left arm's


@pytest.fixture(scope="module")
def two_arm_dataset(tmp_path_factory, ray_cluster) -> Path:
    out = tmp_path_factory.mktemp("datasets") / "two_arm"
    small = [f"--set=cameras.{i}.{side}=32" for i in range(3) for side in ("width", "height")]
    args = ["run", str(SPEC), "--out", str(out), "--attempts", "1", "--workers", "1"]
    assert main([*args, "--no-progress", *small]) == 0
    cameras = json.loads((out / "dataset_info.json").read_text())["cameras"]
    assert [(c["name"], c["width"], c["height"]) for c in cameras][1:] == [
        (w, 32, 32) for w in WRISTS
    ]
    return out


def test_lerobot_names_each_dimension_by_arm_and_keeps_both_wrist_cameras(
    two_arm_dataset, tmp_path
):
    summary = export_lerobot(two_arm_dataset, tmp_path / "lerobot")
    assert summary["episodes"] == 1  # the one attempt succeeded
    features = json.loads((tmp_path / "lerobot/meta/info.json").read_text())["features"]
    state, action = features["observation.state"], features["action"]
    assert state["shape"] == [18] and action["shape"] == [14]
    for names, per_arm in ((state["names"], 9), (action["names"], 7)):
        assert all(n.startswith("right_") for n in names[:per_arm])
        assert all(n.startswith("left_") for n in names[per_arm:])
    for camera in WRISTS:
        assert features[f"observation.images.{camera}"]["shape"] == [32, 32, 3]


def test_gr00t_splits_state_and_action_into_arm_and_hand_parts(two_arm_dataset, tmp_path):
    export_gr00t(two_arm_dataset, tmp_path / "gr00t")
    modality = json.loads((tmp_path / "gr00t/meta/modality.json").read_text())
    for key, width in (("state", 18), ("action", 14)):
        parts = modality[key]
        assert set(parts) == {"right_arm", "right_hand", "left_arm", "left_hand"}
        covered = sorted(i for p in parts.values() for i in range(p["start"], p["end"]))
        assert covered == list(range(width))  # every dimension once
    action = modality["action"]
    assert [action[f"{arm}_arm"]["absolute"] for arm in ("right", "left")] == [False, False]
    assert [action[f"{arm}_hand"]["absolute"] for arm in ("right", "left")] == [True, True]
    assert set(WRISTS) <= set(modality["video"])


def test_preview_labels_each_wrist_camera_by_its_arm(two_arm_dataset, tmp_path):
    from demofactory.build.preview import _load_dataset, write_contact_sheet

    cameras = json.loads((two_arm_dataset / "dataset_info.json").read_text())["cameras"]
    assert [c.get("mount") for c in cameras] == [
        None,
        {"robot": 0, "arm": "right", "wrist": True},
        {"robot": 1, "arm": "left", "wrist": True},
    ]
    titles = [camera.title for camera in _load_dataset(two_arm_dataset).cameras]
    assert titles == [
        "agentview",
        "robot0_eye_in_hand (right wrist)",
        "robot1_eye_in_hand (left wrist)",
    ]
    assert write_contact_sheet(two_arm_dataset, tmp_path / "sheet.png").exists()


PEG = Path(__file__).parents[2] / "scene_specs" / "two_arm_peg_in_hole.yaml"


def test_inspect_names_each_subtask_and_its_arm(two_arm_dataset):
    from demofactory.build.report import format_summary, summarize

    summary = summarize(two_arm_dataset)
    assert [(row["arm"], row["name"]) for row in summary["subtasks"]] == [
        ("right", "right_grasp"),
        ("left", "left_grasp"),
        ("right", "right_lift"),
        ("left", "left_lift"),
    ]
    lines = [line for line in format_summary(summary).splitlines() if line.startswith("subtask")]
    assert lines[0].split()[:5] == ["subtask", "0", "right", "right_grasp", "grasped(pot)"]
    assert lines[3].split()[:4] == ["subtask", "3", "left", "left_lift"]


def test_arms_without_grippers_export_arm_parts_only(ray_cluster, tmp_path):
    """TwoArmPegInHole's bare wrists: per-arm names of 7 state and 6 action columns, and GR00T's
    right_arm / left_arm parts covering every dimension once (no hand parts)."""
    out = tmp_path / "peg"
    args = ["run", str(PEG), "--out", str(out), "--attempts", "1", "--workers", "1"]
    assert main([*args, "--no-progress"]) == 0
    assert export_lerobot(out, tmp_path / "lerobot")["episodes"] == 1
    features = json.loads((tmp_path / "lerobot/meta/info.json").read_text())["features"]
    state, action = features["observation.state"], features["action"]
    assert state["shape"] == [14] and action["shape"] == [12]
    assert state["names"][7] == "left_eef_pos_0" and action["names"][6] == "left_delta_pos_0"
    export_gr00t(out, tmp_path / "gr00t")
    modality = json.loads((tmp_path / "gr00t/meta/modality.json").read_text())
    for key, width in (("state", 14), ("action", 12)):
        parts = modality[key]
        assert set(parts) == {"right_arm", "left_arm"}
        covered = sorted(i for p in parts.values() for i in range(p["start"], p["end"]))
        assert covered == list(range(width))  # every dimension once


GR1 = Path(__file__).parents[2] / "scene_specs" / "gr1_pick_place.yaml"
GR1_WRISTS = ("robot0_eye_in_right_hand", "robot0_eye_in_left_hand")


def test_gr1_exports_arm_and_hand_parts_under_gr00ts_gr1_tag(ray_cluster, tmp_path):
    """One robot with two dexterous hands (GR1ArmsOnly): per arm 7 + 11 state and 6 + 6 action
    columns; GR00T's four parts, the hands' six joint targets absolute, tagged gr1 by default;
    both hand cameras labelled by their arm in the preview."""
    from demofactory.build.preview import _load_dataset

    out = tmp_path / "gr1"
    small = [f"--set=cameras.{i}.{side}=32" for i in range(3) for side in ("width", "height")]
    args = ["run", str(GR1), "--out", str(out), "--attempts", "1", "--workers", "1"]
    assert main([*args, "--no-progress", *small]) == 0
    cameras = json.loads((out / "dataset_info.json").read_text())["cameras"]
    assert [c.get("mount") for c in cameras] == [
        None,
        {"robot": 0, "arm": "right", "wrist": True},
        {"robot": 0, "arm": "left", "wrist": True},
    ]
    titles = [camera.title for camera in _load_dataset(out).cameras]
    assert titles[1:] == [f"{GR1_WRISTS[0]} (right wrist)", f"{GR1_WRISTS[1]} (left wrist)"]
    summary = export_gr00t(out, tmp_path / "gr00t")
    assert summary["episodes"] == 1 and summary["embodiment"] == "gr1"
    info = json.loads((tmp_path / "gr00t/meta/info.json").read_text())
    assert info["embodiment_tag"] == "gr1"
    modality = json.loads((tmp_path / "gr00t/meta/modality.json").read_text())
    widths = {"state": {"arm": 7, "hand": 11}, "action": {"arm": 6, "hand": 6}}
    for key, per_part in widths.items():
        parts = modality[key]
        assert set(parts) == {"right_arm", "right_hand", "left_arm", "left_hand"}
        for name, part in parts.items():
            assert part["end"] - part["start"] == per_part[name.split("_")[1]], (key, name)
        covered = sorted(i for p in parts.values() for i in range(p["start"], p["end"]))
        assert covered == list(range(2 * sum(per_part.values())))  # every dimension once
    assert modality["action"]["right_hand"]["absolute"] is True
    assert set(GR1_WRISTS) <= set(modality["video"])
    export_lerobot(out, tmp_path / "lerobot")
    features = json.loads((tmp_path / "lerobot/meta/info.json").read_text())["features"]
    assert features["action"]["names"][6:12] == [f"right_gripper_{i}" for i in range(6)]
    assert features["observation.state"]["shape"] == [36]
