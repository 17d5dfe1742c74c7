"""A hostile user's `scene:` sections, `extends:` chains and `--still` folders: each refused by
`factory validate` with one line naming the file and the field, exit 2, nothing written.

Each case here once passed silently (nonsense accepted), named the wrong field (`task: robosuite
cannot build ...`), or ended in a traceback. All but the last test fail in the spec's validation,
before any env is built.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from demofactory.cli.main import main

from tests.conftest import SPECS

CUBE_BOWL = SPECS / "cube_bowl.yaml"
THREE = SPECS / "three_cubes.yaml"
MUG = SPECS / "mug_coaster.yaml"


def _spec(tmp_path: Path, base: Path, edit) -> Path:
    """A copy of a shipped spec with `edit(raw)` applied, its demos and assets beside it."""
    raw = yaml.safe_load(base.read_text())
    edit(raw)
    for folder in ("demos", "assets"):
        if not (tmp_path / folder).exists():
            (tmp_path / folder).symlink_to(SPECS / folder)
    path = tmp_path / base.name
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _refused(capsys, argv: list[str], where: str, field: str, words: str) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert f"{where}: {field}: " in err and words in err, err
    assert "ok:" not in captured.out  # refused before the spec's summary line
    return err


def _set(dotted: str, value):
    def edit(raw):
        *keys, last = dotted.split(".")
        node = raw
        for key in keys:
            node = node[key]
        node[last] = value

    return edit


def _palette_of_two(raw):
    raw["scene"]["palettes"] = {"duo": ["red", "blue"]}
    for name in ("cubeA", "cubeB", "cubeC"):
        raw["scene"]["objects"][name]["color"] = {"palette": "duo"}


CUBE = "scene.objects.cube"
CAMERA = {"name": "frontcam", "pos": [1.0, 0.0, 1.45], "look_at": [0.0, 0.0, 0.82]}
CASES = [
    # (base spec, edit, field, words)
    (CUBE_BOWL, _set("scene.table.size", [1e30, 1e30, 1e30]), "scene.table.size", "<= 10.0 m"),
    (CUBE_BOWL, _set("scene.table.size", [0.8, 0.8, 5]), "scene.table", "thickness"),
    (CUBE_BOWL, _set("scene.table.color", "mauve"), "scene.table.color", "unknown colour"),
    (CUBE_BOWL, _set("scene.table.color", [5, -1, 0, 1]), "scene.table.color", "within 0 and 1"),
    (CUBE_BOWL, _set(f"{CUBE}.friction", [-1, 0, 0]), f"{CUBE}.friction", ">= 0"),
    (CUBE_BOWL, _set(f"{CUBE}.size", [0.02, 0.02, 1e6]), CUBE, "at most 1.0 m"),
    (CUBE_BOWL, _set(f"{CUBE}.size", [1e-12] * 3), CUBE, "at least"),
    (CUBE_BOWL, _set(f"{CUBE}.density", 1e300), f"{CUBE}.density", "less than or equal"),
    (CUBE_BOWL, _set(f"{CUBE}.color", [1, 0, 0]), f"{CUBE}.color", "[r, g, b, a]"),
    (CUBE_BOWL, _set(f"{CUBE}.noun", ""), f"{CUBE}.noun", "expected words"),
    (CUBE_BOWL, _set("scene.objects.bowl.size", [0.005, 0.025]), "scene.objects.bowl", "0.015"),
    (
        CUBE_BOWL,
        _set("scene.objects.bowl", {"kind": "bin", "size": [0.3, 0.3, 0.05], "fixed": True}),
        "scene.objects.bowl.size",
        "wider than the table",
    ),
    (
        CUBE_BOWL,
        lambda raw: (
            raw["scene"].update(palettes={"mine": []}),
            _set(f"{CUBE}.color", {"palette": "mine"})(raw),
        ),
        "scene.palettes.mine",
        "different colour names",
    ),
    (
        CUBE_BOWL,
        _set("scene.palettes", {"primary": ["red", "red"]}),
        "scene.palettes.primary",
        "different colour names",
    ),
    (THREE, _palette_of_two, "scene.objects.cubeC.color.palette", "3 objects"),
    (
        CUBE_BOWL,
        _set("scene.cameras", [{**CAMERA, "look_at": None, "quat": [0, 0, 0, 0]}]),
        "scene.cameras[0]",
        "not zero",
    ),
    (
        CUBE_BOWL,
        _set("scene.cameras", [{**CAMERA, "name": "robot0_eye_in_hand"}]),
        "scene.cameras[0]",
        "robots' own cameras",
    ),
    (
        CUBE_BOWL,
        _set("scene.cameras", [{**CAMERA, "pos": [1e9, 0, 1e9]}]),
        "scene.cameras[0]",
        "within 20.0 m",
    ),
    (CUBE_BOWL, _set("scene.robot", {"offset": [100, 0, 0]}), "scene.robot.offset", "within 2 m"),
    (CUBE_BOWL, _set("scene.objects", {}), "scene.objects", "at least 1 item"),
    (MUG, _set("scene.objects.mug.file", "folder.obj"), "scene.objects.mug.file", "is a directory"),
]


@pytest.mark.parametrize("base, edit, field, words", CASES)
def test_a_nonsense_scene_is_refused_naming_its_field(tmp_path, capsys, base, edit, field, words):
    (tmp_path / "folder.obj").mkdir()  # a mesh "file" that is a directory
    path = _spec(tmp_path, base, edit)
    still = tmp_path / "stills"
    _refused(capsys, ["validate", str(path), "--still", str(still)], str(path), field, words)
    assert not still.exists()  # nothing written


@pytest.mark.parametrize(
    "slot", ["{cube.name!r}", "{cube.name!z}", "{cube.name:>10}", "{cube.name:{bowl.name}}"]
)
def test_a_template_slot_with_a_conversion_or_format_spec(tmp_path, capsys, slot):
    # str.format would apply it (or raise) when each episode's instruction is filled in.
    path = _spec(tmp_path, CUBE_BOWL, _set("instructions", [f"put the {slot} in the bowl"]))
    err = _refused(capsys, ["validate", str(path)], str(path), "instructions[0]", "format spec")
    assert slot in err


def test_extends_through_a_symlink_loop_or_to_no_spec(tmp_path, capsys):
    (tmp_path / "loop.yaml").symlink_to(tmp_path / "loop.yaml")
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    (tmp_path / "folder").mkdir()
    cases = [("loop.yaml", "not found"), ("list.yaml", "got list"), ("folder", "is a directory")]
    for parent, words in cases:
        child = tmp_path / "child.yaml"
        child.write_text(f"extends: {parent}\nname: child\n")
        err = _refused(capsys, ["validate", str(child)], str(child), "extends", words)
        assert "Traceback" not in err


def test_still_into_a_file_or_under_one_is_refused_before_building(tmp_path, capsys):
    taken = tmp_path / "taken.png"
    taken.write_bytes(b"not a folder")
    for still in (taken, taken / "sub"):
        _refused(
            capsys,
            ["validate", str(CUBE_BOWL), "--still", str(still)],
            str(still),
            "--still",
            "directory",
        )
    assert taken.read_bytes() == b"not a folder"


@pytest.mark.sim
def test_a_mesh_in_a_folder_whose_name_xml_must_escape(tmp_path, capsys):
    # The generated MJCF quotes the mesh paths: & < " in a folder name once failed as
    # `task: robosuite cannot build SpecScene with Panda: not well-formed (invalid token)`.
    folder = tmp_path / 'my "meshes" & <parts>'
    folder.mkdir()
    for name in ("mug.obj", "mug_hull.obj"):
        os.symlink(SPECS / "assets" / name, folder / name)

    def edit(raw):
        mug = raw["scene"]["objects"]["mug"]
        mug["file"] = str(folder / "mug.obj")
        mug["collision"] = [str(folder / "mug_hull.obj")]

    path = _spec(tmp_path, MUG, edit)
    assert main(["validate", str(path)]) == 0, capsys.readouterr().err


def test_an_object_named_like_robosuites_robot_parts(tmp_path, capsys):
    # `robot0` once failed in MuJoCo as `task: ... repeated name 'robot0_g0_vis'`.
    box = {"kind": "box", "size": [0.02, 0.02, 0.02], "placement": {"x": [0.2, 0.2]}}
    path = _spec(tmp_path, CUBE_BOWL, _set("scene.objects.robot0", box))
    _refused(capsys, ["validate", str(path)], str(path), "scene.objects", "robosuite's own")


@pytest.mark.sim
def test_a_model_mujoco_refuses_names_the_object_not_the_task(tmp_path, capsys):
    # A density that passes validation (> 0) but leaves the body below MuJoCo's least mass.
    path = _spec(tmp_path, CUBE_BOWL, _set(f"{CUBE}.density", 1e-20))
    _refused(capsys, ["validate", str(path)], str(path), CUBE, "mjMINVAL")


def test_extends_from_another_folder_keeps_the_parents_mesh_files(tmp_path):
    # The parent's seed_demos were rewritten relative to the child, its mesh files were not:
    # `scene.objects.mug.file: file not found: <child folder>/assets/mug.obj`.
    from demofactory.specs.spec import load_spec

    parent = _spec(tmp_path, MUG, lambda raw: None)
    (tmp_path / "variants").mkdir()
    child = tmp_path / "variants" / "kid.yaml"
    child.write_text(f"extends: ../{parent.name}\nname: kid\n")
    spec = load_spec(child)
    mug = spec.scene.objects["mug"]
    assert spec.resolve_path(mug.file) == (SPECS / "assets" / "mug.obj").resolve()
    assert spec.resolve_path(mug.collision[0]) == (SPECS / "assets" / "mug_hull.obj").resolve()
