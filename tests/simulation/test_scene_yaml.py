"""Scenes described in YAML (`scene:`): built with robosuite's classes, refused with one line when
they cannot work, pictured by `validate --still`, teleoperated by `collect`, and language whose
colours are the rendered ones.

The shipped scenes (cube_bowl, three_cubes, mug_coaster) are also built, annotated and generated
from by tests/simulation/test_scene_registry.py, which runs every spec in scene_specs/.
"""

from __future__ import annotations

import os

os.environ.setdefault("PYNPUT_BACKEND", "dummy")  # robosuite.devices imports pynput: no display

import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml
from demofactory.cli.main import main
from demofactory.errors import SpecError
from demofactory.specs.language import draw_colors, episode_language, paint_objects
from demofactory.specs.scene import COLORS, SCENE_ENV
from demofactory.specs.spec import load_spec

from tests.conftest import SPECS

pytestmark = pytest.mark.sim

CUBE_BOWL = SPECS / "cube_bowl.yaml"
MUG = SPECS / "mug_coaster.yaml"


def _write_spec(tmp_path: Path, base: Path, edit) -> Path:
    """A copy of a shipped spec with `edit(raw)` applied, its files (demos, assets) beside it."""
    raw = yaml.safe_load(base.read_text())
    edit(raw)
    for folder in ("demos", "assets"):
        target = tmp_path / folder
        if not target.exists():
            target.symlink_to(SPECS / folder)
    path = tmp_path / base.name
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _refused(capsys, path: Path, field: str, words: str, still: Path | None = None) -> str:
    argv = ["validate", str(path)] + (["--still", str(still)] if still else [])
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert str(path) in err and f": {field}: " in err and words in err, err
    if still is not None:
        assert not still.exists()  # nothing written
    return err


# --- the section as pure data -------------------------------------------------------------------


def test_a_scene_fills_env_objects_and_placement():
    spec = load_spec(CUBE_BOWL)
    assert spec.task.env == SCENE_ENV
    assert spec.objects == {"cube": "cube_main", "bowl": "bowl_root"}
    cube = spec.placement.objects["cube"]
    assert cube.x == pytest.approx((-0.06, 0.06)) and cube.yaw == pytest.approx((-0.78, 0.78))
    assert "bowl" in spec.placement.objects  # a fixture moves too (its model pose)
    assert spec.placement.min_separation > 0.07 + 0.028


def test_env_and_scene_together_are_refused(tmp_path, capsys):
    path = _write_spec(tmp_path, CUBE_BOWL, lambda raw: raw["task"].update(env="Lift"))
    _refused(capsys, path, "task.env", "not both")


def test_a_scene_needs_a_success_predicate(tmp_path, capsys):
    path = _write_spec(tmp_path, CUBE_BOWL, lambda raw: raw["task"].pop("success"))
    _refused(capsys, path, "task.success", "inside(cube, bowl)")


# --- bad input: one line, file and field, exit 2, nothing written --------------------------------


def test_missing_mesh_file(tmp_path, capsys):
    def edit(raw):
        raw["scene"]["objects"]["mug"]["file"] = "assets/no_such_mug.obj"

    path = _write_spec(tmp_path, MUG, edit)
    _refused(capsys, path, "scene.objects.mug.file", "file not found", tmp_path / "stills")


def test_a_mesh_mujoco_cannot_load(tmp_path, capsys):
    (tmp_path / "bad.stl").write_bytes(b"solid nothing\nthis is no mesh\n")

    def edit(raw):
        raw["scene"]["objects"]["mug"]["collision"] = ["bad.stl"]

    path = _write_spec(tmp_path, MUG, edit)
    _refused(capsys, path, "scene.objects.mug.collision[0]", "MuJoCo cannot load bad.stl")


def test_an_object_that_does_not_fit_on_the_table(tmp_path, capsys):
    def edit(raw):
        raw["scene"]["objects"]["cube"]["placement"]["y"] = [-0.45, -0.1]

    path = _write_spec(tmp_path, CUBE_BOWL, edit)
    _refused(capsys, path, "scene.objects.cube.placement.y", "off the table")


def test_fixed_placements_that_always_overlap(tmp_path, capsys):
    def edit(raw):
        objects = raw["scene"]["objects"]
        objects["cube"]["placement"] = {"x": [0.0, 0.0], "y": [0.05, 0.05]}
        objects["bowl"]["placement"] = {"x": [0.0, 0.0], "y": [0.1, 0.1]}

    path = _write_spec(tmp_path, CUBE_BOWL, edit)
    _refused(capsys, path, "scene.objects.bowl.placement", "always overlap")


def test_a_template_slot_naming_no_attribute(tmp_path, capsys):
    path = _write_spec(
        tmp_path, CUBE_BOWL, lambda raw: raw.update(instructions=["put the {cube.size} cube away"])
    )
    _refused(capsys, path, "instructions[0]", "{cube.size} names no attribute")
    path = _write_spec(
        tmp_path, CUBE_BOWL, lambda raw: raw.update(instructions=["put the {bowl.color} cube"])
    )
    assert main(["validate", str(path)]) == 0  # the bowl is white: it has a colour
    capsys.readouterr()
    path = _write_spec(
        tmp_path, CUBE_BOWL, lambda raw: raw.update(instructions=["lift the {mug.name}"])
    )
    _refused(capsys, path, "instructions[0]", "names no object")


def test_a_camera_looking_at_nothing(tmp_path, capsys):
    def edit(raw):
        raw["scene"]["cameras"][0]["look_at"] = [1.5, 0.0, 1.6]  # up, away from the table

    path = _write_spec(tmp_path, CUBE_BOWL, edit)
    _refused(capsys, path, "scene.cameras[0]", "looks at nothing", tmp_path / "stills")


def test_an_unknown_key_inside_the_scene_is_named(tmp_path, capsys):
    path = _write_spec(
        tmp_path, CUBE_BOWL, lambda raw: raw["scene"]["table"].update(colour=[1, 0, 0, 1])
    )
    _refused(capsys, path, "scene.table.colour", "unknown key")


# --- building and picturing ---------------------------------------------------------------------


@pytest.mark.slow
def test_validate_renders_one_still_per_camera(tmp_path, capsys):
    still = tmp_path / "stills"
    assert main(["validate", str(CUBE_BOWL), "--still", str(still)]) == 0
    from PIL import Image

    images = {p.name: np.asarray(Image.open(p)) for p in sorted(still.iterdir())}
    assert set(images) == {"frontcam.png", "robot0_eye_in_hand.png"}
    assert images["frontcam.png"].shape == (84, 84, 3)
    assert images["frontcam.png"].std() > 10  # a picture, not a blank frame


@pytest.mark.slow
def test_a_user_mesh_builds_with_its_mass_and_hull():
    from demofactory.simulation.scene import Scene

    scene = Scene(load_spec(MUG, {"cameras": []}))
    model = scene.model
    mug = scene.bodies["mug"]
    assert model.body_mass[mug] == pytest.approx(0.2, abs=1e-3)
    geoms = np.flatnonzero(model.geom_bodyid == mug)
    groups = sorted(int(model.geom_group[g]) for g in geoms)
    assert groups == [0, 1]  # one collision hull, one visual mesh (no visual copy of the hull)
    assert not scene._is_free(scene.bodies["coaster"])  # a fixture
    scene.reset_to(None, scene_placement())
    assert abs(scene.object_pose("mug")[2, 3] - (0.8 + 0.04)) < 0.005  # resting on the table
    # a placed fixture moves by its offset from its own pose, not from the last attempt's
    from demofactory.simulation.scene import Placement

    nominal = scene.object_pose("coaster")[:3, 3].copy()
    for _ in range(2):
        scene.reset_to(None, Placement({"coaster": (0.03, -0.02, 0.0)}))
        np.testing.assert_allclose(
            scene.object_pose("coaster")[:3, 3], nominal + [0.03, -0.02, 0.0], atol=1e-9
        )


def scene_placement():
    from demofactory.simulation.scene import Placement

    return Placement({})


# --- language that matches the pixels -------------------------------------------------------------


def test_palette_colours_are_drawn_per_seed_and_distinct():
    spec = load_spec(SPECS / "three_cubes.yaml")
    draws = [draw_colors(spec.scene, seed) for seed in range(40)]
    assert all(len(set(d.values())) == 3 for d in draws)  # one palette, three different colours
    assert len({tuple(d.values()) for d in draws}) > 5
    assert draws[3] == draw_colors(spec.scene, 3)  # from the seed alone
    language = episode_language(spec, 3)
    colours = {name: attrs["color"] for name, attrs in language.attributes.items()}
    assert colours == draws[3]
    assert f"the {colours['cubeB']} " in language.instruction
    assert "{" not in language.instruction


def test_specs_without_a_scene_keep_their_instructions():
    spec = load_spec(SPECS / "stack.yaml")
    for seed in range(5):
        language = episode_language(spec, seed)
        assert language.instruction == spec.instructions[seed % 3]
        # the spec's other phrasings are the episode's paraphrases, in spec order
        assert list(language.paraphrases) == [
            t for i, t in enumerate(spec.instructions) if i != seed % 3
        ]


def test_paraphrases_are_the_other_templates_filled_with_the_same_colours():
    spec = load_spec(CUBE_BOWL)
    assert len(spec.instructions) == 2
    for seed in range(6):
        language = episode_language(spec, seed)
        colour = language.attributes["cube"]["color"]
        (other,) = language.paraphrases
        assert other != language.instruction
        assert colour in language.instruction and colour in other
        templates = [t.replace("{cube.color}", colour) for t in spec.instructions]
        filled = {
            t.replace("{cube.name}", "cube").replace("{bowl.name}", "bowl") for t in templates
        }
        assert {language.instruction, other} == filled


@pytest.mark.slow
def test_the_rendered_colour_is_the_one_the_instruction_names():
    from demofactory.build.pipeline import ShardWorker
    from demofactory.build.records import ShardTask
    from demofactory.seeds.resolve import resolve_spec

    cameras = [{"name": "frontcam", "width": 64, "height": 64, "segmentation": "object"}]
    resolved = resolve_spec(load_spec(CUBE_BOWL, {"cameras": cameras}))
    worker = ShardWorker(resolved.spec, resolved.demos, resolved.scene)
    attempt = worker.run_attempt(ShardTask(0, (0,)), 0)
    assert attempt.success, attempt.reason
    before = resolved.scene.model.geom_rgba.copy()
    episode = worker.make_episode(attempt)
    assert np.array_equal(resolved.scene.model.geom_rgba, before)  # the colours were put back
    drawn = episode.provenance["language"]["attributes"]["cube"]["color"]
    assert f"the {drawn} " in episode.instruction
    (paraphrase,) = episode.provenance["paraphrases"]  # cube_bowl gives two phrasings
    assert f"the {drawn} " in paraphrase and paraphrase != episode.instruction
    import io

    from demofactory.shards.format import decode_segmentation_png
    from PIL import Image

    last = -1  # the cube in the bowl, at rest
    rgb = np.asarray(Image.open(io.BytesIO(episode.images["frontcam"][last])).convert("RGB"))
    labels = decode_segmentation_png(episode.segmentation["frontcam"][last])
    pixels = rgb[labels == 1].astype(float)  # object 1: the cube
    assert len(pixels) > 5
    expected = np.asarray(COLORS[drawn][:3]) * 255
    others = [c for c in ("red", "green", "blue", "yellow") if c != drawn]
    mean = pixels.mean(axis=0)
    # Lit and shaded, the cube's pixels are nearer its drawn colour than any other of the palette.
    assert all(
        np.linalg.norm(mean / np.linalg.norm(mean) - expected / np.linalg.norm(expected))
        < np.linalg.norm(
            mean / np.linalg.norm(mean)
            - np.asarray(COLORS[o][:3]) * 255 / np.linalg.norm(np.asarray(COLORS[o][:3]) * 255)
        )
        for o in others
    )


def test_paint_and_undo():
    class _Scene:
        def __init__(self):
            import mujoco

            self.model = mujoco.MjModel.from_xml_string(
                "<mujoco><worldbody><body name='a'><geom size='0.1'/><geom size='0.1'/></body>"
                "</worldbody></mujoco>"
            )
            self.bodies = {"a": 1}

    scene = _Scene()
    before = scene.model.geom_rgba.copy()
    undo = paint_objects(scene, {"a": COLORS["blue"]})
    assert np.allclose(scene.model.geom_rgba, COLORS["blue"])
    undo()
    assert np.array_equal(scene.model.geom_rgba, before)


# --- teleoperation --------------------------------------------------------------------------------


def _scripted_device(env, drop_first: bool = True):
    """A robosuite Device that drives the hand like a person at a keyboard would: over the cube,
    down, close, up, over the bowl, open. Its first demo it gives up (the reset key)."""
    from robosuite.devices.device import Device

    class Scripted(Device):
        def __init__(self, env):
            super().__init__(env)
            self.episode = 0

        def start_control(self):
            self._reset_internal_state()
            self.episode += 1
            self.t, self.phase, self.wait, self.target = 0, 0, 0, None

        def _body(self, name):
            return self.env.sim.data.body_xpos[self.env.sim.model.body_name2id(name)].copy()

        def get_controller_state(self):
            self.t += 1
            site = self.env.robots[0].eef_site_id["right"]
            eef = self.env.sim.data.site_xpos[site].copy()
            cube, bowl = self._body("cube_main"), self._body("bowl_root")
            plan = [cube + [0, 0, 0.1], cube, None, cube + [0, 0, 0.15]]
            plan += [bowl + [0, 0, 0.15], bowl + [0, 0, 0.08], None, bowl + [0, 0, 0.2]]
            grasp = [0, 0, 1, 1, 1, 1, 0, 0][self.phase]
            if self.target is None or self.target[0] != self.phase:
                self.target = (self.phase, plan[self.phase])  # latched when the phase starts
            goal, dpos = self.target[1], np.zeros(3)
            if goal is None:
                self.wait += 1
                if self.wait > 10:
                    self.phase, self.wait = self.phase + 1, 0
            else:
                dpos = np.clip((goal - eef) * 8, -1, 1)
                if np.linalg.norm(goal - eef) < 0.01 and self.phase < 7:
                    self.phase += 1
            reset = drop_first and self.episode == 1 and self.t > 5
            return dict(
                dpos=dpos,
                rotation=np.eye(3),
                raw_drotation=np.zeros(3),
                grasp=grasp,
                reset=reset,
                base_mode=0,
            )

        def _postprocess_device_outputs(self, dpos, drotation):
            return dpos, drotation

    return Scripted(env)


@pytest.mark.slow
def test_collect_writes_robosuite_hdf5_that_seeds_generation(tmp_path):
    from demofactory.seeds.collect import collect
    from demofactory.seeds.demos import load_seed_demos

    # Cubes at no yaw: the scripted hand does not turn its wrist.
    spec = load_spec(CUBE_BOWL, {"scene.objects.cube.placement.yaw": [0, 0]})
    out = tmp_path / "demo.hdf5"
    lines = []
    lengths = collect(spec, out, 1, _scripted_device, viewer=False, log=lines.append, max_tries=3)
    assert lines[0].endswith("dropped") and lines[-1].endswith("kept")  # the reset key drops one
    assert len(lengths) == 1 and 50 < lengths[0] < spec.task.horizon
    with h5py.File(out) as f:
        assert f["data"].attrs["env"] == SCENE_ENV
        demo = f["data/demo_1"]
        assert demo["actions"].shape == (lengths[0], 7)
        assert "model_file" in demo.attrs
    demos = load_seed_demos(out)
    assert len(demos) == 1 and demos[0].states.shape[0] == lengths[0]
    assert not list(tmp_path.glob(".*tmp*"))


def test_collect_refuses_an_existing_file_before_building_anything(tmp_path):
    from demofactory.errors import UserError

    out = tmp_path / "demo.hdf5"
    out.write_bytes(b"")
    with pytest.raises(UserError, match="exists"):
        from demofactory.seeds.collect import collect

        collect(load_spec(CUBE_BOWL), out, 1, _scripted_device, viewer=False)


def test_scene_files_are_checked_through_load_and_build(tmp_path):
    from demofactory.simulation.scene_build import check_scene_files

    spec = load_spec(MUG)
    check_scene_files(spec.scene, spec.path)  # the shipped mug loads
    (tmp_path / "assets").mkdir()
    shutil.copy(SPECS / "assets" / "mug.obj", tmp_path / "assets" / "mug.obj")  # not the hull
    (tmp_path / "mug_coaster.yaml").write_text(MUG.read_text())
    moved = load_spec(tmp_path / "mug_coaster.yaml")
    with pytest.raises(SpecError, match=r"collision\[0\]: file not found"):
        check_scene_files(moved.scene, moved.path)


def test_placements_robosuite_cannot_make_are_named(tmp_path, capsys):
    def edit(raw):  # the cube's range reaches past the bowl, but its middle is in it
        raw["scene"]["objects"]["cube"]["placement"] = {"x": [-0.05, 0.05], "y": [0.02, 0.18]}

    path = _write_spec(tmp_path, CUBE_BOWL, edit)
    _refused(capsys, path, "scene.objects.bowl.placement", "without overlapping", tmp_path / "s")


THING_XML = """<mujoco model="thing"><worldbody><body>
  <body name="object"><geom type="box" size="0.02 0.03 0.015" group="0"/></body>
  <site size="0.005" pos="0 0 -0.015" name="bottom_site"/>
  <site size="0.005" pos="0 0 0.015" name="top_site"/>
  <site size="0.005" pos="0.036 0.036 0" name="horizontal_radius_site"/>
</body></worldbody></mujoco>"""


@pytest.mark.slow
def test_every_kind_of_object_builds_where_its_placement_says(tmp_path):
    from demofactory.simulation.scene import Placement, Scene

    (tmp_path / "thing.xml").write_text(THING_XML)
    scene_section = {
        "robot": {"offset": [0.05, 0, 0], "yaw": 0.1},
        "objects": {
            "ball": {"kind": "ball", "size": [0.025], "color": "orange",
                     "placement": {"x": [-0.1, -0.1], "y": [0.2, 0.2]}},
            "pill": {"kind": "capsule", "size": [0.015, 0.03],
                     "placement": {"x": [0.1, 0.1], "y": [-0.2, -0.2]}},
            "can": {"kind": "cylinder", "size": [0.03, 0.05], "fixed": True,
                    "placement": {"x": [0.15, 0.15], "y": [0.15, 0.15]}},
            "milk": {"kind": "robosuite", "model": "milk",
                     "placement": {"relative_to": "can", "x": [-0.15, -0.15]}},
            "nut": {"kind": "robosuite", "model": "square_nut", "fixed": True,
                    "placement": {"x": [-0.1, -0.1], "y": [-0.15, -0.15]}},
            "thing": {"kind": "mjcf", "file": "thing.xml",
                      "placement": {"relative_to": "can", "on_top": True}},
            "tray": {"kind": "bin", "size": [0.08, 0.08, 0.03], "fixed": True, "color": "white",
                     "placement": {"x": [0.12, 0.12], "y": [-0.02, -0.02]}},
        },
        "cameras": [{"name": "q", "pos": [1.2, 0, 1.3], "quat": [0.6, 0.37, 0.37, 0.6]}],
    }  # fmt: skip
    raw = {
        "name": "kinds",
        "task": {"robot": "Panda", "horizon": 50, "success": "near(ball, milk, 0.05)"},
        "scene": scene_section,
        "subtasks": [{"object": "ball"}],
        "instructions": ["touch the {ball.color} {ball.name}"],
    }
    path = tmp_path / "kinds.yaml"
    path.write_text(yaml.safe_dump(raw))
    scene = Scene(load_spec(path))
    scene.reset_to(None, Placement({}))
    xyz = {name: scene.object_pose(name)[:3, 3] for name in scene.bodies}
    assert np.allclose(xyz["ball"], [-0.1, 0.2, 0.8 + 0.025], atol=0.003)
    assert np.allclose(xyz["pill"], [0.1, -0.2, 0.8 + 0.045], atol=0.003)  # upright capsule
    assert np.allclose(xyz["milk"][:2], [0.0, 0.15], atol=0.003)  # beside the can
    assert xyz["thing"][2] == pytest.approx(0.8 + 0.1 + 0.015, abs=0.005)  # on the can's top
    assert not scene._is_free(scene.bodies["can"]) and not scene._is_free(scene.bodies["nut"])
    assert not scene._is_free(scene.bodies["tray"])
    assert np.allclose(xyz["tray"][:2], [0.12, -0.02], atol=1e-6)
    assert scene._inside(xyz["tray"] + [0, 0, 0.0], "tray")  # its cavity is found (`inside`)
    assert "q" in scene.camera_names()


def test_an_mjcf_file_outside_robosuites_object_layout(tmp_path, capsys):
    (tmp_path / "thing.xml").write_text(THING_XML.replace('name="top_site"', 'name="top"'))

    def edit(raw):
        raw["scene"]["objects"]["cube"] = {"kind": "mjcf", "file": "thing.xml"}
        raw["instructions"] = ["put the {cube.name} in the {bowl.name}"]

    path = _write_spec(tmp_path, CUBE_BOWL, edit)
    _refused(capsys, path, "scene.objects.cube.file", "missing: top_site", tmp_path / "s")


def test_a_relative_object_moves_with_its_reference():
    from demofactory.specs.scene import SceneSection, composed_offsets

    scene = SceneSection.model_validate(
        {
            "objects": {
                "plate": {"kind": "cylinder", "size": [0.06, 0.01]},
                "cup": {
                    "kind": "cylinder",
                    "size": [0.03, 0.04],
                    "placement": {"relative_to": "plate", "on_top": True},
                },
                "spoon": {
                    "kind": "box",
                    "size": [0.05, 0.01, 0.005],
                    "placement": {"relative_to": "cup", "x": [0.05, 0.1]},
                },
            }
        }
    )
    offsets = {"plate": (0.02, -0.01, 0.3), "spoon": (0.01, 0.0, 0.1)}
    composed = composed_offsets(scene, offsets)
    assert composed["plate"] == (0.02, -0.01, 0.3)
    assert composed["cup"] == pytest.approx((0.02, -0.01, 0.0))  # the plate's move, not its turn
    assert composed["spoon"] == pytest.approx((0.03, -0.01, 0.1))


def test_an_appearance_variant_may_not_recolour_a_named_colour(tmp_path, capsys):
    def edit(raw):
        raw["appearance"] = {"textures": {"surfaces": ["table", "cube"]}}

    path = _write_spec(tmp_path, CUBE_BOWL, edit)
    _refused(capsys, path, "appearance.textures.surfaces[1]", "must not re-colour")
