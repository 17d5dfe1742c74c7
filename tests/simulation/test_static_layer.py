"""The static layer (render.detail other than full): a camera that never moves draws the static
geoms once and only the moving ones per frame, and every picture is the one MuJoCo draws whole,
bit for bit."""

from __future__ import annotations

import demofactory  # noqa: F401  (selects the GL backend before mujoco)
import mujoco
import numpy as np
import pytest
from demofactory.simulation.render import FrameRenderer
from demofactory.simulation.scene_geoms import geom_view
from demofactory.simulation.static_layer import camera_is_fixed, static_geoms
from demofactory.specs.spec import CameraSpec, RenderSpec, load_spec

from tests.conftest import SPECS
from tests.simulation.xml_scene import XmlScene

pytestmark = pytest.mark.sim  # renders with MuJoCo's GL context

# Visual geoms (group 1). 'top' looks down from z = 2 at a textured floor, a static post and a
# box that moves (a free body); 'chase' rides on the box; 'ghost' sits on a mocap body (static
# for a recorded state); 'glass' is see-through, static or moving as the test asks, under the
# floor or above it; 'hidden' has alpha 0 (drawn by MuJoCo with no weight, as robosuite's sites).
XML = """
<mujoco>
  <visual><global offwidth="64" offheight="64"/></visual>
  <asset>
    <texture name="grid" type="2d" builtin="checker" width="32" height="32"
             rgb1="0.2 0.3 0.4" rgb2="0.8 0.8 0.7"/>
    <material name="grid" texture="grid" texrepeat="4 4"/>
  </asset>
  <default><geom group="1"/></default>
  <worldbody>
    <light name="sun" pos="0 0 3" dir="0 0 -1" castshadow="{castshadow}"/>
    <camera name="top" pos="0.1 -0.3 2" xyaxes="1 0 0 0 0.99 0.15" fovy="45"/>
    <geom name="floor" type="plane" size="3 3 0.1" material="grid"/>
    <geom name="post" type="box" size="0.08 0.08 0.3" pos="0.35 0.2 0.3" rgba="0.9 0.6 0.2 1"/>
    <geom name="glass_static" type="box" size="0.2 0.2 0.05" pos="{glass_pos}"
          rgba="0.2 0.9 0.9 {glass_alpha}"/>
    <body name="mover" pos="0 0 0.1">
      <freejoint/>
      <geom name="box" type="box" size="0.1 0.1 0.1" rgba="1 0 0 1"/>
      <geom name="glass_moving" type="sphere" size="0.05" pos="0.17 0 0"
            rgba="0 0 1 {moving_alpha}"/>
      <geom name="hidden" type="sphere" size="0.15" pos="0 0 0.1" rgba="1 1 0 0"/>
      <camera name="chase" pos="0 0 0.5" xyaxes="1 0 0 0 1 0" fovy="60"/>
    </body>
    <body name="ghost" mocap="true" pos="-0.4 0.1 0.05">
      <geom name="ghost" type="sphere" size="0.05" rgba="0.5 0.2 0.8 1"/>
    </body>
  </worldbody>
</mujoco>
"""


class LayerScene(XmlScene):
    def __init__(
        self,
        castshadow: bool = False,
        glass_pos: str = "0 0 -0.5",  # under the floor: never seen
        glass_alpha: float = 0.5,
        moving_alpha: float = 1.0,
    ):
        xml = XML.format(
            castshadow=str(castshadow).lower(),
            glass_pos=glass_pos,
            glass_alpha=glass_alpha,
            moving_alpha=moving_alpha,
        )
        super().__init__(xml)


def states(scene: LayerScene) -> list[np.ndarray]:
    """The box in view, in front of the post, resting on the floor, out of view, back in."""
    out = []
    for x, y, z in (
        (0.0, 0.0, 0.4),
        (0.3, 0.05, 0.7),
        (-0.2, -0.1, 0.1),
        (3.5, 0, 0.1),
        (0.1, 0.3, 0.2),
    ):
        q = scene.model.qpos0.copy()
        q[:3] = x, y, z
        out.append(q)
    return out


def pictures(scene, detail, camera: str = "top", **render) -> tuple[list, FrameRenderer]:
    cam = CameraSpec(name=camera, width=48, height=40)
    renderer = FrameRenderer(scene, [cam], RenderSpec(detail=detail, **render))
    out = []
    for state in states(scene):
        scene.set_state(state)
        out.append(renderer.render_current()[camera])
    return out, renderer


def same_pictures(scene, camera: str = "top", **render) -> dict:
    """Renders every state whole (`full`) and with `auto`; asserts the pictures are identical
    and returns the layer's frame counts."""
    whole, full = pictures(scene, "full", camera, **render)
    layered, auto = pictures(scene, "auto", camera, **render)
    try:
        for a, b in zip(whole, layered, strict=True):
            assert np.array_equal(a, b)
        return auto.static_layer_frames
    finally:
        full.close()
        auto.close()


def test_moving_geoms_drawn_over_the_kept_static_picture_give_mujocos_picture():
    scene = LayerScene()
    counts = same_pictures(scene)
    # drawn once, then kept: the box moved, nothing static did
    assert counts == {"top": {"kept": 4, "redrawn": 1, "whole": 0}}


def test_the_geom_view_reads_and_writes_the_scenes_geoms():
    scene = LayerScene()
    scene.set_state(states(scene)[0])
    scn = mujoco.MjvScene(scene.model, 50)
    option, camera = mujoco.MjvOption(), mujoco.MjvCamera()
    mujoco.mjv_updateScene(
        scene.model, scene.data, option, None, camera, mujoco.mjtCatBit.mjCAT_ALL, scn
    )
    view = geom_view(scn)
    assert view is not None and len(view) == scn.ngeom > 5
    for i in range(scn.ngeom):
        geom = scn.geoms[i]
        assert (view["type"][i], view["objtype"][i], view["objid"][i]) == (
            geom.type,
            geom.objtype,
            geom.objid,
        )
        assert np.array_equal(view["pos"][i], geom.pos)
        assert np.array_equal(view["rgba"][i], geom.rgba)
        assert view["label"][i].decode() == geom.label
    view["type"][2] = mujoco.mjtGeom.mjGEOM_NONE  # writes go to the scene
    assert scn.geoms[2].type == mujoco.mjtGeom.mjGEOM_NONE


def test_which_geoms_and_cameras_count_as_static():
    model = LayerScene().model
    names = {mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_GEOM, g) for g in range(model.ngeom)}
    static = {
        mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_GEOM, g)
        for g in np.flatnonzero(static_geoms(model))
    }
    assert static == {"floor", "post", "glass_static", "ghost"}
    assert names - static == {"box", "glass_moving", "hidden"}
    top = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, "top")
    chase = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, "chase")
    assert camera_is_fixed(model, top) and not camera_is_fixed(model, chase)


def test_a_camera_that_moves_is_drawn_whole():
    counts = same_pictures(LayerScene(), camera="chase")
    assert counts == {}  # no layer made for it


def test_the_static_picture_is_drawn_again_when_what_it_shows_changes():
    scene = LayerScene()
    cam = CameraSpec(name="top", width=48, height=40)
    full = FrameRenderer(scene, [cam], RenderSpec(detail="full"))
    auto = FrameRenderer(scene, [cam], RenderSpec(detail="auto"))
    model, data = scene.model, scene.data
    post = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, "post")
    changes = [
        lambda: None,  # the first frame draws it
        lambda: None,  # unchanged: kept
        lambda: model.geom_rgba.__setitem__(post, (0.1, 0.9, 0.1, 1)),  # a static colour
        lambda: model.light_diffuse.__setitem__(0, (0.3, 0.3, 0.3)),  # a light
        lambda: data.mocap_pos.__setitem__(0, (-0.2, -0.2, 0.3)),  # a mocap body moves
        lambda: None,
    ]
    try:
        for change, state in zip(changes, states(scene) + states(scene), strict=False):
            change()
            scene.set_state(state)
            a, b = full.render_current()["top"], auto.render_current()["top"]
            assert np.array_equal(a, b)
        # a texture changed in the model and uploaded: the kept picture showed the old one
        tex = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_TEXTURE, "grid")
        start = model.tex_adr[tex]
        size = model.tex_width[tex] * model.tex_height[tex] * model.tex_nchannel[tex]
        model.tex_data[start : start + size] = 255 - model.tex_data[start : start + size]
        full.upload_textures([tex])
        auto.upload_textures([tex])
        a, b = full.render_current()["top"], auto.render_current()["top"]
        assert np.array_equal(a, b)
        assert auto.static_layer_frames == {"top": {"kept": 2, "redrawn": 5, "whole": 0}}
    finally:
        full.close()
        auto.close()


def test_see_through_geoms_that_could_blend_with_moving_ones_are_drawn_whole():
    # a moving see-through geom: every frame whole but the one where view culling drops it
    counts = same_pictures(LayerScene(moving_alpha=0.5))
    assert counts["top"] == {"kept": 0, "redrawn": 1, "whole": 4}
    # a static see-through geom in view: whole
    counts = same_pictures(LayerScene(glass_pos="-0.3 -0.3 0.4"))
    assert counts["top"]["whole"] == 5
    # ... under the floor (robosuite's IK targets at z = -1), and an alpha-0 geom on the mover:
    # composited (the first test's scene has both)


def test_no_layer_where_it_could_not_be_exact():
    # a light that casts shadows (a moving geom shadows the static ones), or anti-aliasing
    # (an edge pixel mixes static and moving geoms): drawn whole, and still the same pictures
    assert same_pictures(LayerScene(castshadow=True), shadows=True) == {}
    assert same_pictures(LayerScene(), multisamples=4) == {}


@pytest.fixture(scope="module")
def resolved():
    from demofactory.robots.repairs import install
    from demofactory.seeds.resolve import resolve_spec

    install()
    return resolve_spec(load_spec(SPECS / "stack.yaml"))


def test_stack_agentview_with_the_layer_is_the_picture_without_it(resolved, monkeypatch):
    """A real robosuite scene (robosuite's IK targets under the floor, sites of alpha < 0, the
    cubes resting on the table): `auto` with the layer against `auto` drawn whole."""
    scene = resolved.scene
    demo = resolved.demos[0].demo.states
    picks = demo[np.linspace(0, len(demo) - 1, 12).round().astype(int)]
    cams = [CameraSpec(name=n, width=64, height=64) for n in ("agentview", "robot0_eye_in_hand")]
    settings = resolved.spec.render.model_copy(update={"detail": "auto"})
    layered = FrameRenderer(scene, cams, settings)
    monkeypatch.setattr(
        "demofactory.simulation.render.camera_is_fixed", lambda model, camera: False
    )
    whole = FrameRenderer(scene, cams, settings)
    try:
        for state in picks:
            scene.set_state(state)
            a, b = whole.render_current(), layered.render_current()
            for name in a:
                assert np.array_equal(a[name], b[name]), name
        assert whole.static_layer_frames == {}
        # the wrist camera moves: no layer; agentview drew its static picture once
        assert layered.static_layer_frames == {
            "agentview": {"kept": len(picks) - 1, "redrawn": 1, "whole": 0}
        }
    finally:
        whole.close()
        layered.close()
