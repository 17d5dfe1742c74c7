"""lift_colour.yaml, the language benchmark's scene: the instruction names the target cube by its
drawn colour, positions say nothing about which cube is named, and success needs the named cube
up (and only it).
"""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
from demofactory.generators.mimicgen import sample_placement
from demofactory.specs.language import episode_language
from demofactory.specs.scene import PALETTES
from demofactory.specs.spec import load_spec

from tests.conftest import SPECS

LIFT_COLOUR = SPECS / "lift_colour.yaml"
CUBES = ("target", "distA", "distB")


def test_the_instruction_names_the_targets_drawn_colour_and_no_other():
    spec = load_spec(LIFT_COLOUR)
    named, templates = set(), set()
    for seed in range(40):
        language = episode_language(spec, seed)
        colours = {cube: language.attributes[cube]["color"] for cube in CUBES}
        assert len(set(colours.values())) == 3  # three different colours
        named.add(colours["target"])
        templates.add(seed % len(spec.instructions))
        for text in (language.instruction, *language.paraphrases):
            words = text.split()
            assert colours["target"] in words, text
            assert colours["distA"] not in words and colours["distB"] not in words, text
    assert named == set(PALETTES["primary"])  # every colour of the palette gets named
    assert templates == set(range(len(spec.instructions)))


def test_positions_say_nothing_about_which_cube_is_named():
    spec = load_spec(LIFT_COLOUR)
    regions = set()
    for cube in CUBES:
        nominal = spec.scene.objects[cube].placement  # the base layout: its ranges' middles
        offsets = spec.placement.objects[cube]
        region = []
        for axis in ("x", "y"):
            middle = sum(getattr(nominal, axis)) / 2
            region.append(tuple(round(middle + v, 6) for v in getattr(offsets, axis)))
        regions.add(tuple(region))
    assert len(regions) == 1, regions  # one region of the table for all three cubes
    # And the draws generation makes: the target is left, middle or right equally often.
    from demofactory.specs.adapters import placement_params

    params = placement_params(spec.placement)
    start = {cube: np.array([sum(spec.scene.objects[cube].placement.x) / 2, 0.0]) for cube in CUBES}
    for cube in CUBES:
        start[cube][1] = sum(spec.scene.objects[cube].placement.y) / 2
    rng = np.random.default_rng(0)
    ranks = np.zeros(3)
    draws = 900
    for _ in range(draws):
        offsets = sample_placement(params, start, rng).offsets
        y = {cube: start[cube][1] + offsets[cube][1] for cube in CUBES}
        ranks[sorted(CUBES, key=y.get).index("target")] += 1
    assert np.all(np.abs(ranks / draws - 1 / 3) < 0.06), ranks  # 1/3 each, +- 4 standard errors


@pytest.mark.sim
def test_success_needs_the_named_cube_up_and_only_it():
    from demofactory.seeds.script import make_scene
    from demofactory.simulation.scene import Placement

    scene = make_scene(load_spec(LIFT_COLOUR))
    scene.reset_to(None, Placement({}))
    base = scene.get_state()

    def success_with(raised: dict[str, float]) -> bool:
        scene.set_state(base)
        for cube, dz in raised.items():
            joint = scene.model.body_jntadr[scene.bodies[cube]]
            scene.data.qpos[scene.model.jnt_qposadr[joint] + 2] += dz
        mujoco.mj_forward(scene.model, scene.data)
        return scene.success()

    assert not success_with({})
    assert success_with({"target": 0.1})
    assert not success_with({"distA": 0.1})  # the wrong cube
    assert not success_with({"distB": 0.1})
    assert not success_with({"target": 0.1, "distA": 0.1})  # the named one, and another too
