"""View culling (render.detail other than full): geoms wholly outside a camera's view are not
drawn, and every picture stays the same bit for bit."""

from __future__ import annotations

import demofactory  # noqa: F401  (selects the GL backend before mujoco)
import mujoco
import numpy as np
import pytest
from demofactory.simulation.render import FrameRenderer, keep_freed_heap
from demofactory.simulation.view_cull import cull_outside_view, culling_is_exact
from demofactory.specs.spec import CameraSpec, RenderSpec

from tests.simulation.xml_scene import XmlScene

pytestmark = pytest.mark.sim  # renders with MuJoCo's GL context

# Visual geoms (group 1: the factory does not draw group 0). A camera at z = 2 looking down -z
# (45 degree fovy, 48x40 px: at the floor, z = 0, it sees |x| < 0.99, |y| < 0.83); 'edge', at
# x = 1.1 with radius 0.2, straddles the side plane; 'rod', a thin bar beside the view, reaches
# into it with its bounding sphere (radius 1.2) but not with its box.
XML = """
<mujoco>
  <visual><global offwidth="64" offheight="64"/></visual>
  <asset><mesh name="tetra" vertex="0 0 0  0.2 0 0  0 0.2 0  0 0 0.2"/></asset>
  <default><geom group="1"/></default>
  <worldbody>
    <light name="sun" pos="0 0 3" dir="0 0 -1" castshadow="{castshadow}"/>
    <camera name="top" pos="0 0 2" fovy="45"/>
    <geom name="floor" type="plane" size="3 3 0.1" rgba="0.8 0.8 0.8 1"/>
    <body name="mover" pos="0 0 0.2">
      <freejoint/>
      <geom name="seen" type="box" size="0.1 0.1 0.1" rgba="1 0 0 1"/>
    </body>
    <geom name="edge" type="sphere" size="0.2" pos="1.1 0 0" rgba="0 1 0 1"/>
    <geom name="aside" type="box" size="0.1 0.1 0.1" pos="2.5 0 0.1" rgba="0 0 1 1"/>
    <geom name="behind" type="sphere" size="0.1" pos="0 0 2.5" rgba="1 1 0 1"/>
    <geom name="mesh_aside" type="mesh" mesh="tetra" pos="-2.5 0 0.1" rgba="0 1 1 1"/>
    <geom name="rod" type="box" size="0.02 1.2 0.02" pos="1.3 0 0.05" rgba="1 0 1 1"/>
  </worldbody>
</mujoco>
"""


class CullScene(XmlScene):
    def __init__(self, castshadow: bool = False):
        super().__init__(XML.format(castshadow=str(castshadow).lower()))


def states(scene: CullScene) -> list[np.ndarray]:
    """The box in view, then moved out to the side, then back in."""
    out = []
    for x in (0.0, 3.0, 0.4):
        q = scene.model.qpos0.copy()
        q[0] = x
        out.append(q)
    return out


def geom_id(model, name: str) -> int:
    return mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, name)


def render_all(scene: CullScene, detail, shadows: bool = False):
    cam = CameraSpec(name="top", width=48, height=40, depth=True, segmentation="geom")
    renderer = FrameRenderer(scene, [cam], RenderSpec(detail=detail, shadows=shadows))
    views = []
    try:
        for state in states(scene):
            scene.set_state(state)
            views.append(renderer.render_views()["top"])
        return views, renderer.culled
    finally:
        renderer.close()


def test_culled_geoms_change_no_pixel_of_rgb_depth_or_labels():
    scene = CullScene()
    full, none_culled = render_all(scene, "full")
    culled_views, culled = render_all(scene, 500)
    assert none_culled == {}  # full draws every geom, as MuJoCo does
    for a, b in zip(full, culled_views, strict=True):
        assert np.array_equal(a.rgb, b.rgb)
        assert np.array_equal(a.depth, b.depth)
        assert np.array_equal(a.labels, b.labels)
    frames, geoms, faces = culled["top"]
    # 'aside', 'behind', 'mesh_aside' and 'rod' (by its box) in all three frames, the box in
    # the one it moved out
    assert (frames, geoms) == (3, 13)
    assert faces == 3 * int(scene.model.mesh_facenum[0])  # the tetrahedron's 4 faces, thrice
    labels = np.concatenate([v.labels.ravel() for v in full])
    assert geom_id(scene.model, "edge") + 1 in labels  # straddles the frustum: kept and seen
    assert geom_id(scene.model, "aside") + 1 not in labels
    assert geom_id(scene.model, "rod") + 1 not in labels


def test_a_geom_is_culled_by_its_box_where_its_sphere_reaches_into_view():
    scene = CullScene()
    scene.set_state(states(scene)[0])
    renderer = FrameRenderer(
        scene, [CameraSpec(name="top", width=48, height=40)], RenderSpec(detail=500)
    )
    try:
        rod = geom_id(scene.model, "rod")
        boxes = renderer._cull_boxes["top"]
        assert np.allclose(boxes[rod, 3:], np.array([0.02, 1.2, 0.02]) * 1.01 + 1e-3)
        gl = renderer._renderer(renderer.cameras[0])
        gl.update_scene(scene.data, camera="top", scene_option=renderer._option)
        assert rod not in cull_outside_view(gl.scene, renderer._cull_radii["top"], 48 / 40)
        gl.update_scene(scene.data, camera="top", scene_option=renderer._option)
        assert rod in cull_outside_view(gl.scene, renderer._cull_radii["top"], 48 / 40, boxes)
    finally:
        renderer.close()


def test_culling_is_off_where_an_unseen_geom_could_cast_a_shadow_into_view():
    scene = CullScene(castshadow=True)
    assert not culling_is_exact(scene.model, shadows=True, reflections=False)
    assert culling_is_exact(scene.model, shadows=False, reflections=False)
    _, culled = render_all(scene, 500, shadows=True)
    assert culled == {}


def test_the_heap_is_kept_once_per_process():
    assert keep_freed_heap() is keep_freed_heap()


# Occlusion: a camera at z = 2 looking down (45 degrees: |x|, |y| < 0.83 at z = 0), a heavy mesh
# 'blob' (a sphere's hull of 1,196 faces, radius 0.1) under an opaque box 'lid' at z = 1, over
# a floor 1 m wide with the sky around it.
# The lid moves (a free joint) unless `lid_static`; the floor is static. With `camera_moves` the
# camera is on a slide joint (left at 0): no static layer, so the static geoms are tested too.
def _sphere_points(n: int = 600, radius: float = 0.1) -> str:
    i = np.arange(n) + 0.5
    z = 1 - 2 * i / n
    phi = np.pi * (1 + 5**0.5) * i
    r = np.sqrt(1 - z * z)
    pts = radius * np.stack([r * np.cos(phi), r * np.sin(phi), z], 1)
    return " ".join(f"{v:.6f}" for v in pts.ravel())


OCCLUSION_XML = """
<mujoco>
  <visual><global offwidth="64" offheight="64"/><map zfar="{zfar}"/></visual>
  <asset>
    <mesh name="ball" vertex="{ball}"/>
    <texture type="skybox" builtin="gradient" rgb1="0.3 0.5 0.7" rgb2="0 0 0" width="32"
             height="32"/>
  </asset>
  <default><geom group="1"/></default>
  <worldbody>
    <light name="sun" pos="0 0 3" dir="0 0 -1" castshadow="false"/>
    <geom name="floor" type="plane" size="0.5 0.5 0.1" rgba="0.8 0.8 0.8 1"/>
    <body name="blob" pos="0 0 0.3">
      <freejoint/>
      <geom name="blob" type="mesh" mesh="ball" rgba="1 0 0 1"/>
    </body>
    <body name="lid" pos="0 0 1">
      {lid_joint}
      <geom name="lid" type="box" size="{half} {half} 0.02" rgba="0 0 1 {alpha}"/>
    </body>
    {extra}
    {camera}
  </worldbody>
</mujoco>
"""
# `see_through`: a light see-through sphere under the lid, and beside it, in view, a site of
# alpha -1: MuJoCo leaves out an element of alpha 0 but draws a negative one, and robosuite hides
# its sites with negative alphas
SEE_THROUGH = """
    <geom name="ghost" type="sphere" size="0.05" pos="0.1 0 0.5" rgba="0 1 0 0.5"/>
    <site name="mark" type="sphere" size="0.05" pos="0.45 0.3 0.5" rgba="1 1 0 -1"/>
"""


class OcclusionScene(XmlScene):
    def __init__(
        self,
        half: float = 0.3,
        alpha: float = 1.0,
        lid_static: bool = False,
        camera_moves: bool = False,
        zfar: float = 50.0,
        see_through: bool = False,
    ):
        joint = "" if lid_static else "<freejoint/>"
        camera = '<camera name="top" fovy="45"/>'
        if camera_moves:  # on a body of its own, after the others: qpos keeps blob, lid first
            inertial = '<inertial pos="0 0 0" mass="0.1" diaginertia="1e-3 1e-3 1e-3"/>'
            camera = f'<body name="eye" pos="0 0 2"><joint type="slide"/>{inertial}{camera}</body>'
        else:
            camera = camera.replace("/>", ' pos="0 0 2"/>')
        xml = OCCLUSION_XML.format(
            ball=_sphere_points(),
            half=half,
            alpha=alpha,
            lid_joint=joint,
            camera=camera,
            zfar=zfar,
            extra=SEE_THROUGH if see_through else "",
        )
        super().__init__(xml, bodies={"blob": 1})

    def at(self, blob_x: float, lid_x: float = 0.0) -> np.ndarray:
        q = self.model.qpos0.copy()
        q[0] = blob_x
        if self.model.nq > 7:
            q[7] = lid_x
        return q


def culled_per_frame(scene: XmlScene, states: list[np.ndarray]) -> tuple[list, list, list]:
    """Per state: the geoms culled by `render.detail: 500` (culling only: no XML to decimate),
    the labels seen, and whether the sky was left out; the views of full and culled rendering
    must match bit for bit."""
    cam = CameraSpec(name="top", width=48, height=40, depth=True, segmentation="geom")
    full = FrameRenderer(scene, [cam], RenderSpec(detail="full"))
    culling = FrameRenderer(scene, [cam], RenderSpec(detail=500))
    culled, labels, skies = [], [], []
    seen: list[int] = []
    culling._count_culled = lambda camera, geoms: seen.extend([-1, *geoms])
    try:
        for state in states:
            scene.set_state(state)
            a, b = full.render_views()["top"], culling.render_views()["top"]
            assert np.array_equal(a.rgb, b.rgb)
            assert np.array_equal(a.depth, b.depth)
            assert np.array_equal(a.labels, b.labels)
            culled.append({mujoco.mj_id2name(scene.model, mujoco.mjtObj.mjOBJ_GEOM, g)
                           for g in seen[seen.index(-1) + 1 :]})  # fmt: skip
            seen.clear()
            labels.append(set(np.unique(a.labels).tolist()))
            skies.append(culling._occlusion["top"].sky_hidden)
    finally:
        full.close()
        culling.close()
    return culled, labels, skies


def test_a_heavy_mesh_hidden_behind_an_opaque_box_is_culled_and_no_pixel_changes():
    scene = OcclusionScene()
    blob = geom_id(scene.model, "blob") + 1  # segmentation labels are geom id + 1
    # under the lid (its shadow at the blob's height reaches |x| < 0.51); half out of it, where
    # it shows; with the lid moved out of view
    culled, labels, _ = culled_per_frame(scene, [scene.at(0.0), scene.at(0.5), scene.at(0.0, 3.0)])
    assert "blob" in culled[0] and blob not in labels[0]
    assert "blob" not in culled[1] and blob in labels[1]
    assert "blob" not in culled[2] and blob in labels[2]
    assert "lid" in culled[2]  # out of view
    assert "floor" not in set().union(*culled)  # only partly hidden, and by a box that moves


def test_a_see_through_box_hides_nothing():
    scene = OcclusionScene(alpha=0.5)
    culled, labels, _ = culled_per_frame(scene, [scene.at(0.0)])
    assert "blob" not in culled[0]


def test_a_static_geom_is_culled_only_behind_a_static_box():
    # a lid half 0.6 wide hides the whole view of the floor (its shadow at z = 0: |x| < 1.2)
    moving = OcclusionScene(half=0.6, camera_moves=True)
    culled, _, _ = culled_per_frame(moving, [moving.at(0.0)])
    assert culled[0] == {"blob"}  # the floor stays: a fixed camera keeps it in its static picture
    fixed = OcclusionScene(half=0.6, lid_static=True, camera_moves=True)
    culled, labels, _ = culled_per_frame(fixed, [fixed.at(0.0)])
    assert culled[0] == {"blob", "floor"}
    assert labels[0] == {geom_id(fixed.model, "lid") + 1}
    # a fixed camera draws its static geoms once, into its kept picture: they are not tested
    kept = OcclusionScene(half=0.6, lid_static=True)
    culled, _, _ = culled_per_frame(kept, [kept.at(0.0)])
    assert culled[0] == {"blob"}


def test_a_see_through_geom_behind_a_box_is_culled_whatever_its_faces():
    # the ghost is a sphere (not a heavy mesh): MuJoCo draws see-through geoms in a second,
    # blended pass, so they are tested too; static, so only behind the static lid
    scene = OcclusionScene(lid_static=True, camera_moves=True, see_through=True)
    ghost = geom_id(scene.model, "ghost") + 1
    culled, labels, _ = culled_per_frame(scene, [scene.at(0.0)])
    assert "ghost" in culled[0] and ghost not in labels[0]
    moving = OcclusionScene(camera_moves=True, see_through=True)  # a lid that moves hides none
    culled, _, _ = culled_per_frame(moving, [moving.at(0.0)])
    assert "ghost" not in culled[0]


def _rgb_pass_types(scene: XmlScene, state: np.ndarray) -> tuple[list, dict]:
    """The element types the RGB pass drew with (scene order), and the views of full and
    culled rendering (compared bit for bit by culled_per_frame's rules)."""
    cam = CameraSpec(name="top", width=48, height=40, depth=True, segmentation="geom")
    full = FrameRenderer(scene, [cam], RenderSpec(detail="full"))
    culling = FrameRenderer(scene, [cam], RenderSpec(detail=500))
    scene.set_state(state)
    gl = culling._renderer(cam)
    drawn: list = []
    render = gl.render

    def spy():
        if not drawn:  # the first call: the RGB pass (depth and labels follow)
            drawn.append([int(g.type) for g in gl.scene.geoms[: gl.scene.ngeom]])
        return render()

    gl.render = spy
    try:
        a, b = full.render_views()["top"], culling.render_views()["top"]
        assert np.array_equal(a.rgb, b.rgb)
        assert np.array_equal(a.depth, b.depth)  # the depth pass still has the site
        assert np.array_equal(a.labels, b.labels)
        mark = [i for i in range(gl.scene.ngeom) if gl.scene.geoms[i].objtype == 6]
        return [drawn[0][i] for i in mark], {"full": a, "culled": b}
    finally:
        full.close()
        culling.close()


def test_invisible_elements_are_left_out_of_the_rgb_pass_only():
    none = int(mujoco.mjtGeom.mjGEOM_NONE)
    # the ghost hidden (a static lid, a camera that moves): nothing see-through is drawn, so the
    # invisible site is left out of the RGB pass; the picture, depth and labels are MuJoCo's
    hidden = OcclusionScene(lid_static=True, camera_moves=True, see_through=True)
    site_types, _ = _rgb_pass_types(hidden, hidden.at(0.0))
    assert site_types == [none]
    # the ghost drawn (the lid moved away): the site's depth could hide it, so the site is kept
    shown = OcclusionScene(camera_moves=True, see_through=True)
    site_types, _ = _rgb_pass_types(shown, shown.at(0.0, 3.0))
    assert site_types == [int(mujoco.mjtGeom.mjGEOM_SPHERE)]


def test_the_sky_is_left_out_where_one_opaque_box_fills_the_picture():
    scene = OcclusionScene(half=0.6, camera_moves=True)
    # the lid (0.6 wide, its shrunk edge at |x| < 0.59) over the view at z = 1 (|x| < 0.41); moved
    # aside by 0.5 it leaves the floor's edge and the sky in view
    culled, labels, skies = culled_per_frame(scene, [scene.at(0.0), scene.at(0.0, 0.5)])
    assert skies == [True, False]
    assert labels[0] == {geom_id(scene.model, "lid") + 1}
    assert 0 in labels[1]  # the sky (no geom) shows: it had to be drawn
    fixed = OcclusionScene(half=0.6)  # a fixed camera draws its sky once, in its static picture
    _, _, skies = culled_per_frame(fixed, [fixed.at(0.0)])
    assert skies == [False]
    # MuJoCo draws the sky about the camera at 0.7 of the far distance, not at the far plane:
    # with the far plane at 0.55 x the extent (1.13 m) the sky is in front of the lid (0.98 m
    # away), covers the picture, and must be drawn
    near_sky = OcclusionScene(half=0.6, camera_moves=True, zfar=0.55)
    _, labels, skies = culled_per_frame(near_sky, [near_sky.at(0.0)])
    assert skies == [False]


def test_a_frame_restores_positions_only_unless_a_rangefinder_is_drawn():
    """render_frames restores what a picture shows (forward_positions): the poses, not the
    contacts; a model with a rangefinder, whose ray MuJoCo draws from the sensor data, gets a
    whole mj_forward."""
    from demofactory.simulation.scene import forward_positions

    xml = """
    <mujoco>
      <worldbody>
        <geom name="floor" type="plane" size="1 1 0.1"/>
        <body name="ball" pos="0 0 0.5"><freejoint/><geom type="sphere" size="0.1"/>
          <site name="eye" pos="0 0 -0.1" zaxis="0 0 -1"/></body>
      </worldbody>
      {sensor}
    </mujoco>"""
    for sensor in ("", '<sensor><rangefinder site="eye"/></sensor>'):
        model = mujoco.MjModel.from_xml_string(xml.format(sensor=sensor))
        data = mujoco.MjData(model)
        mujoco.mj_forward(model, data)  # the ball 0.4 m above the floor: no contact
        data.qpos[2] = 0.05  # into the floor
        forward_positions(model, data)
        assert data.xpos[1][2] == pytest.approx(0.05)  # the pose a picture needs
        if sensor:
            # the site now under the floor sees nothing (-1); stale, it would read 0.4
            assert data.ncon > 0 and data.sensordata[0] == pytest.approx(-1.0)
        else:
            assert data.ncon == 0  # collision not run: contacts as they were
