"""`factory annotate --suggest` beyond grasp-and-place, through the CLI: a door opened by its
latch (a human-like demo: no fixture poses recorded), a box pushed to a pad and a lever pushed
over (scripted here with `factory script`, then suggested from the demos alone)."""

from __future__ import annotations

import h5py
import pytest
import yaml
from demofactory.cli.main import main

from tests.conftest import DEMOS

pytestmark = pytest.mark.sim

LEVER_XML = """<mujoco model="lever"><worldbody><body>
  <body name="object">
    <geom name="base" type="box" size="0.04 0.04 0.02" group="0"/>
    <body name="arm" pos="0 0 0.02">
      <joint name="hinge" type="hinge" axis="1 0 0" range="-0.9 0.9" limited="true"
             damping="0.5" frictionloss="0.05"/>
      <geom name="stick" type="capsule" fromto="0 0 0 0 0 0.10" size="0.008" group="0"/>
      <geom name="knob" type="sphere" pos="0 0 0.11" size="0.018" group="0"/>
    </body>
  </body>
  <site size="0.005" pos="0 0 -0.02" name="bottom_site"/>
  <site size="0.005" pos="0 0 0.13" name="top_site"/>
  <site size="0.005" pos="0.04 0.04 0" name="horizontal_radius_site"/>
</body></worldbody></mujoco>"""
TABLE = {"size": [0.8, 0.8, 0.05], "height": 0.8}
CAMERA = {"name": "frontcam", "pos": [1.0, 0.0, 1.45], "look_at": [0.0, 0.0, 0.82], "fovy": 45}
CLOSED = "close"  # the hand pushes with its fingers shut


def _run_main(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def _scripted(tmp_path, capsys, name: str, raw: dict) -> object:
    """A scene spec with no objects:/subtasks: beyond what `factory script` needs; one demo."""
    spec = tmp_path / f"{name}.yaml"
    raw = {"name": name, "seed": 0, "seed_demos": [f"{name}.hdf5"], **raw}
    spec.write_text(yaml.safe_dump(raw, sort_keys=False))
    code, _, err = _run_main(capsys, "script", spec, "--out", tmp_path / f"{name}.hdf5", "--quiet")
    assert code == 0, err
    return spec


def _suggested(capsys, path) -> dict:
    code, text, err = _run_main(capsys, "annotate", "--suggest", path)
    assert code == 0, err  # 0: the spec with it pasted in annotates as suggested
    return yaml.safe_load(text)


def test_a_door_opened_by_its_latch(tmp_path, capsys):
    demo = tmp_path / "door_human_like.hdf5"
    with h5py.File(DEMOS / "door_scripted.hdf5", "r") as src, h5py.File(demo, "w") as dst:
        src.copy("data/demo_1", dst, name="data/demo_1")
        for key, value in src["data"].attrs.items():
            dst["data"].attrs[key] = value
        del dst["data/demo_1"].attrs["fixture_poses"]  # as a person's recording: not stored
    spec = _suggested(capsys, demo)  # a whole spec, from the file alone
    assert spec["task"]["env"] == "Door"
    assert spec["objects"] == {"latch": "Door_latch", "door": "Door_door"}
    assert spec["subtasks"] == [
        {"object": "latch", "ends_when": "grasped(latch)", "end_offset": [0, 3]},
        {"object": "door"},  # turned by its latch; ends at the task's success
    ]
    assert list(spec["placement"]["objects"]) == ["door"]  # one entry moves the fixture


def test_a_box_pushed_to_a_pad(tmp_path, capsys):
    box = {
        "kind": "box",
        "size": [0.025, 0.025, 0.025],
        "density": 300,
        "placement": {"x": [-0.05, -0.05], "y": [-0.1, -0.1]},
    }
    pad = {
        "kind": "box",
        "size": [0.03, 0.03, 0.002],
        "fixed": True,
        "placement": {"x": [-0.05, -0.05], "y": [0.12, 0.12]},
    }
    raw = {
        "task": {"robot": "Panda", "horizon": 300, "success": "near(box, pad, 0.08)"},
        "scene": {"table": TABLE, "objects": {"box": box, "pad": pad}, "cameras": [CAMERA]},
        "subtasks": [{"object": "box"}],
        "instructions": ["push the box onto the pad"],
        "script": {"demos": 1, "waypoints": [
            {"relative_to": "box", "pos": [0, -0.08, 0.1], "gripper": CLOSED, "steps": 35},
            {"relative_to": "box", "pos": [0, -0.07, 0.0], "gripper": CLOSED, "steps": 25},
            {"pos": [0, 0, 0], "gripper": CLOSED, "steps": 8},
            {"relative_to": "box", "pos": [0, 0.12, 0.0], "gripper": CLOSED, "steps": 60},
            {"pos": [0, 0, 0], "gripper": CLOSED, "steps": 10},  # success holds 5 steps
        ]},
    }  # fmt: skip
    fragment = _suggested(capsys, _scripted(tmp_path, capsys, "push", raw))
    assert fragment["subtasks"] == [
        {"object": "box", "ends_when": "touching(hand, box)", "end_offset": [0, 3]},
        {"object": "pad"},  # re-targeted to where it was pushed to
    ]
    assert fragment["placement"]["objects"]["box"]["yaw"] == [-0.1, 0.1]  # a pushed object


def test_a_lever_pushed_over(tmp_path, capsys):
    (tmp_path / "lever.xml").write_text(LEVER_XML)
    lever = {
        "kind": "mjcf",
        "file": "lever.xml",
        "fixed": True,
        "placement": {"x": [0.0, 0.0], "y": [0.0, 0.0]},
    }
    raw = {
        "task": {"robot": "Panda", "horizon": 200, "success": "opened(arm, 0.4)"},
        "scene": {"table": TABLE, "objects": {"lever": lever}, "cameras": [CAMERA]},
        "objects": {"lever": "lever_main", "arm": "lever_arm"},
        "subtasks": [{"object": "arm"}],
        "instructions": ["push the lever over"],
        "script": {"demos": 1, "waypoints": [
            {"relative_to": "arm", "pos": [0, -0.06, 0.1], "gripper": CLOSED, "steps": 40},
            {"relative_to": "arm", "pos": [0, -0.035, 0.08], "gripper": CLOSED, "steps": 25},
            {"relative_to": "arm", "pos": [0, 0.06, 0.06], "gripper": CLOSED, "steps": 40},
        ]},
    }  # fmt: skip
    spec = _scripted(tmp_path, capsys, "lever", raw)
    raw["objects"] = {"lever": "lever_main"}  # the arm is found by its hinge, and named
    spec.write_text(yaml.safe_dump({**yaml.safe_load(spec.read_text()), **raw}, sort_keys=False))
    fragment = _suggested(capsys, spec)
    assert fragment["objects"]["arm"] == "lever_arm"
    assert fragment["subtasks"] == [
        {"object": "arm", "ends_when": "touching(hand, arm)", "end_offset": [0, 3]},
        {"object": "arm"},
    ]
