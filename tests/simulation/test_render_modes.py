"""Depth, segmentation and texture re-upload in the real renderer, and their trip through shards."""

from __future__ import annotations

import demofactory  # noqa: F401  (selects the GL backend before mujoco)
import numpy as np
import pytest
from demofactory.shards.format import encode_depth_png, encode_segmentation_png, segmentation_bits
from demofactory.simulation.render import FrameRenderer, encode_jpeg
from demofactory.simulation.scene import Scene
from demofactory.specs.spec import CameraSpec, RenderSpec, load_spec

from tests.conftest import SPECS

pytestmark = pytest.mark.sim

# One renderer for the module (GL contexts are slow to make under software GL): three 32x32
# cameras share one, one per segmentation mode, and a non-square wrist camera has another.
CAMERAS = [
    CameraSpec(name="agentview", width=32, height=32, depth=True, segmentation="object"),
    CameraSpec(name="robot0_robotview", width=32, height=32, depth=True, segmentation="body"),
    CameraSpec(name="frontview", width=32, height=32, depth=True, segmentation="geom"),
    CameraSpec(name="robot0_eye_in_hand", width=40, height=32, segmentation="geom"),
]


@pytest.fixture(scope="module")
def scene() -> Scene:
    """The Lift scene (cube = spec object 1) after reset."""
    return Scene(load_spec(SPECS / "lift.yaml"))


@pytest.fixture(scope="module")
def renderer(scene):
    """The module's renderer, encoding on a thread."""
    renderer = FrameRenderer(scene, CAMERAS, RenderSpec(), encode_threads=1)
    yield renderer
    renderer.close()


def test_upload_textures_changes_the_image(scene, renderer):
    model = scene.model
    saved = model.tex_data.copy()
    try:
        before = renderer.render_current()["agentview"].astype(np.int64)
        model.tex_data[:] = 0  # every texture black
        stale = renderer.render_current()["agentview"].astype(np.int64)
        assert np.array_equal(stale, before), "the GPU copy changes only on upload"
        renderer.upload_textures(range(model.ntex))
        after = renderer.render_current()["agentview"].astype(np.int64)
        changed = np.abs(after - before).max(axis=-1) > 30
        assert changed.mean() > 0.1, changed.mean()
    finally:
        model.tex_data[:] = saved
        renderer.upload_textures(range(model.ntex))
    assert np.array_equal(renderer.render_current()["agentview"], before)


def _cube_in_front(scene: Scene, dx: float = 0.2) -> np.ndarray:
    """The scene's state with the cube moved `dx` metres towards agentview (lower in its image)."""
    import mujoco

    state = scene.get_state()
    joint = scene.model.body_jntadr[scene.bodies["cube"]]
    qpos = 1 + scene.model.jnt_qposadr[joint]  # state = (time, qpos, qvel)
    state[qpos] += dx
    scene.set_state(state)
    mujoco.mj_forward(scene.model, scene.data)
    return scene.get_state()


def _project(
    scene: Scene, camera: str, point: np.ndarray, width: int, height: int
) -> tuple[int, int, float]:
    """(row, column) of `point` in an upright image of `camera`, and its depth along the optical
    axis (m)."""
    import mujoco

    cam = mujoco.mj_name2id(scene.model, mujoco.mjtObj.mjOBJ_CAMERA, camera)
    # columns: camera x (right), y (up), z (backwards)
    rotation = scene.data.cam_xmat[cam].reshape(3, 3)
    local = rotation.T @ (point - scene.data.cam_xpos[cam])
    focal = (height / 2) / np.tan(np.radians(scene.model.cam_fovy[cam]) / 2)
    column = width / 2 + focal * local[0] / -local[2]
    row = height / 2 - focal * local[1] / -local[2]
    return int(row), int(column), float(-local[2])


@pytest.mark.parametrize("cam", CAMERAS[:3], ids=lambda cam: cam.segmentation)
def test_depth_is_metric_and_upright_and_labels_mark_the_cube(scene, renderer, cam):
    start = scene.get_state()
    try:
        scene.set_state(_cube_in_front(scene))
        views = renderer.render_views()[cam.name]
        row, column, distance = _project(
            scene, cam.name, scene.data.xpos[scene.bodies["cube"]], 32, 32
        )
    finally:
        scene.set_state(start)
    depth, labels = views.depth, views.labels
    assert depth.shape == labels.shape == (32, 32) and depth.dtype == np.float32
    assert np.isfinite(depth).all() and 0.3 < depth.min() and depth.max() < 5.0
    # the near table fills the bottom of an upright image, the far wall its top
    if cam.name == "agentview":
        assert depth[-4:].mean() < depth[:4].mean()
        assert abs(depth[31 - row, column] - distance) > 0.1
    cube = {
        "object": [1],
        "body": [scene.bodies["cube"] + 1],
        "geom": np.flatnonzero(scene.model.geom_bodyid == scene.bodies["cube"]) + 1,
    }[cam.segmentation]
    assert row >= 20, "the moved cube should sit low in the image, far from its mirror row"
    assert labels[row, column] in cube and labels[31 - row, column] not in cube
    assert abs(depth[row, column] - distance) < 0.03  # its near face: within the cube's half size
    if cam.segmentation == "object":
        assert set(np.unique(labels)) == {0, 1}


@pytest.fixture(scope="module")
def rendered(scene, renderer):
    """Three states (the cube moving), their views, and their frames encoded on the pool thread."""
    start = scene.get_state()
    states = []
    for dx in (0.0, 0.1, 0.2):
        scene.set_state(start)
        states.append(_cube_in_front(scene, dx))
    states = np.stack(states)
    try:
        views = []
        for state in states:
            scene.set_state(state)
            views.append(renderer.render_views())
        frames = renderer.render_frames(states)
    finally:
        scene.set_state(start)
    return states, views, frames


def _write(root, scene, frames, states, depth=None):
    from demofactory.shards.dataset import write_dataset
    from demofactory.shards.format import Episode
    from demofactory.shards.metadata import camera_entry

    length = len(states)
    episode = Episode(
        index=0,
        shard=0,
        instruction="lift the red cube",
        seed=0,
        actions=np.zeros((length, 7)),
        states=np.zeros((length, 9)),
        sim_states=states,
        images=frames.images,
        depth=frames.depth if depth is None else depth,
        segmentation=frames.segmentation,
        provenance={},
    )
    cameras = [
        camera_entry(c.name, c.width, c.height, c.depth, c.segmentation, list(scene.bodies))
        for c in CAMERAS
    ]
    task = {
        "env": "Lift",
        "robot": "Panda",
        "controller": "OSC_POSE",
        "control_freq": 20,
        "horizon": 50,
    }
    write_dataset(
        root,
        [episode],
        {
            "name": "modes",
            "fps": 20,
            "env": "Lift",
            "robot": "Panda",
            "cameras": cameras,
            "state": {
                "dim": 9,
                "layout": [["eef_pos", 3], ["eef_quat_xyzw", 4], ["gripper_qpos", 2]],
            },
            "action": {
                "dim": 7,
                "layout": [["delta_pos", 3], ["delta_axis_angle", 3], ["gripper", 1]],
            },
            "sim_state": {"dim": states.shape[1], "layout": "time, qpos, qvel"},
            "spec": {"name": "modes", "task": task},
        },
    )


def test_frames_round_trip_through_shards_webdataset_verify_and_robomimic(
    scene, rendered, tmp_path
):
    import h5py
    import webdataset as wds
    from demofactory.shards.export_robomimic import export_robomimic
    from demofactory.shards.format import decode_member, shards_dir
    from demofactory.shards.metadata import load_dataset_info
    from demofactory.shards.verify import verify_dataset

    states, views, frames = rendered
    depth_cameras = [c.name for c in CAMERAS if c.depth]
    assert set(frames.depth) == set(depth_cameras) and set(frames.segmentation) == {
        c.name for c in CAMERAS
    }
    for t, view in enumerate(
        views
    ):  # encoded on the pool thread, in order, as inline encoding would; and render_frames
        # restores positions only (Scene.set_pose), render_views followed a whole set_state
        for cam in CAMERAS:
            assert frames.images[cam.name][t] == encode_jpeg(
                view[cam.name].rgb, RenderSpec().jpeg_quality
            )
            bits = segmentation_bits(cam.segmentation)
            assert frames.segmentation[cam.name][t] == encode_segmentation_png(
                view[cam.name].labels, bits
            )
            if cam.depth:
                assert frames.depth[cam.name][t] == encode_depth_png(view[cam.name].depth)
    _write(tmp_path / "ds", scene, frames, states)
    assert verify_dataset(tmp_path / "ds") == []
    info = load_dataset_info(tmp_path / "ds")["cameras"][0]
    assert info["depth"]["unit"] == "mm" and info["segmentation"]["objects"] == ["cube"]

    urls = [str(p) for p in sorted(shards_dir(tmp_path / "ds").glob("*.tar"))]
    samples = list(wds.WebDataset(urls, shardshuffle=False).decode(decode_member, "rgb8"))
    assert len(samples) == len(states)
    for sample, view in zip(samples, views, strict=True):
        depth = sample["agentview_depth.png"]
        assert depth.dtype == np.float32 and depth.shape == (32, 32)
        assert np.abs(depth - view["agentview"].depth).max() <= 0.0005 + 1e-6
        for cam in CAMERAS:
            assert np.array_equal(sample[f"{cam.name}_seg.png"], view[cam.name].labels)
            assert sample[f"{cam.name}.jpg"].shape == (cam.height, cam.width, 3)

    summary = export_robomimic(tmp_path / "ds", tmp_path / "out.hdf5")
    assert {"agentview_depth", "agentview_seg", "robot0_eye_in_hand_seg"} <= set(
        summary["obs_keys"]
    )
    with h5py.File(tmp_path / "out.hdf5") as f:
        obs = f["data/demo_0/obs"]
        assert (
            obs["agentview_depth"].shape == (3, 32, 32, 1)
            and obs["agentview_depth"].dtype == np.float32
        )
        assert np.allclose(obs["agentview_depth"][1, ..., 0], samples[1]["agentview_depth.png"])
        assert (
            obs["robot0_eye_in_hand_seg"].shape == (3, 32, 40, 1)
            and "robot0_eye_in_hand_depth" not in obs
        )
        assert np.array_equal(obs["agentview_seg"][2, ..., 0], views[2]["agentview"].labels)


def test_verify_reports_missing_and_malformed_depth(scene, rendered, tmp_path):
    from demofactory.shards.verify import verify_dataset

    states, _, frames = rendered
    _write(tmp_path / "missing", scene, frames, states, depth={})
    problems = verify_dataset(tmp_path / "missing")
    assert problems and all("agentview_depth.png" in p for p in problems)
    wrong = {
        **frames.depth,
        "agentview": [frames.segmentation["agentview"][0]] * len(states),
    }  # 8-bit labels
    _write(tmp_path / "wrong", scene, frames, states, depth=wrong)
    problems = verify_dataset(tmp_path / "wrong")
    assert len(problems) == len(states)
    assert all(
        "agentview_depth.png: 32x32, 8-bit, colour type 0; expected 32x32 16-bit" in p
        for p in problems
    )


def test_factory_run_writes_depth_and_segmentation(tmp_path, ray_cluster):
    """`factory run` with depth and object segmentation on: dataset_info lists them, verify
    passes, and webdataset reads them back through decode_member with the right shapes."""
    import json

    import webdataset as wds
    from demofactory.cli.main import main
    from demofactory.shards.format import decode_member

    from tests.conftest import write_spec

    spec = write_spec(
        tmp_path / "depth.yaml",
        name="depth_lift",
        task={"horizon": 300},
        generation={"attempts": 1, "attempts_per_shard": 1},
        cameras=[
            {
                "name": "agentview",
                "width": 32,
                "height": 24,
                "depth": True,
                "segmentation": "object",
            }
        ],
    )
    out = tmp_path / "out"
    assert main(["run", str(spec), "--out", str(out), "--workers", "1", "--no-progress"]) == 0
    assert main(["verify", str(out)]) == 0
    camera = json.loads((out / "dataset_info.json").read_text())["cameras"][0]
    assert camera["depth"]["unit"] == "mm" and camera["segmentation"]["objects"] == ["cube"]
    samples = list(
        wds.WebDataset(str(out / "shards" / "shard-000000.tar"), shardshuffle=False).decode(
            decode_member, "rgb8"
        )
    )
    assert samples, "the one attempt of tiny Lift succeeds"
    first = samples[0]
    depth, labels = first["agentview_depth.png"], first["agentview_seg.png"]
    assert first["agentview.jpg"].shape == (24, 32, 3)
    assert (
        depth.shape == (24, 32)
        and depth.dtype == np.float32
        and 0.2 < float(np.median(depth)) < 5.0
    )
    assert labels.shape == (24, 32) and set(np.unique(labels)) <= {0, 1} and (labels == 1).any()
