"""render.detail: decimated visual meshes drawn in place of the full ones; physics untouched."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import demofactory  # noqa: F401  (selects the GL backend before mujoco)
import numpy as np
import pytest
from demofactory.simulation import mesh_detail
from demofactory.simulation.mesh_detail import DetailReport, decimate_mesh, simplify
from demofactory.specs.spec import CameraSpec, load_spec

from tests.conftest import REPO, SPECS, write_spec


def sphere_soup(rings: int = 24, sectors: int = 48) -> tuple[np.ndarray, np.ndarray]:
    """A unit UV sphere as an OBJ export writes it: three vertices of its own per face."""
    theta = np.linspace(0, np.pi, rings + 1)
    phi = np.linspace(0, 2 * np.pi, sectors + 1)
    grid = np.stack(
        [
            np.outer(np.sin(theta), np.cos(phi)),
            np.outer(np.sin(theta), np.sin(phi)),
            np.outer(np.cos(theta), np.ones_like(phi)),
        ],
        axis=-1,
    )
    tris = []
    for i in range(rings):
        for j in range(sectors):
            a, b, c, d = grid[i, j], grid[i + 1, j], grid[i + 1, j + 1], grid[i, j + 1]
            if i > 0:
                tris.append([a, b, d])
            if i < rings - 1:
                tris.append([b, c, d])
    verts = np.asarray(tris).reshape(-1, 3)
    return verts, np.arange(len(verts)).reshape(-1, 3)


# --- decimation, pure ---------------------------------------------------------------------


def test_a_sphere_decimates_to_its_budget_and_stays_on_its_surface():
    verts, faces = sphere_soup()
    result = simplify(verts, faces, 200)
    assert not result.failed
    assert MIN_FACES <= len(result.faces) <= 200 < len(faces)
    radius = np.linalg.norm(result.vertices, axis=1)
    assert np.abs(radius - 1).max() < 0.05  # quadric collapses keep the surface
    normals = result.normals.reshape(-1, 3)
    assert np.allclose(np.linalg.norm(normals, axis=1), 1, atol=1e-6)
    corners = result.vertices[result.faces].reshape(-1, 3)
    outward = np.einsum("ij,ij->i", normals, corners / np.linalg.norm(corners, axis=1)[:, None])
    assert outward.min() > 0.9  # borrowed from the full sphere: still pointing out


MIN_FACES = mesh_detail.MIN_RESULT_FACES


def test_degenerate_and_collapsing_meshes_are_refused_with_a_reason():
    line = np.array([[0, 0, 0], [1, 0, 0], [2, 0, 0], [3, 0, 0]], float)
    flat = simplify(line, np.array([[0, 1, 2], [1, 2, 3]]), 1)
    assert flat.failed.startswith("degenerate") and flat.vertices is None
    tetra = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]], float)
    faces = np.array([[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]])
    collapsed = simplify(tetra, faces, 1)
    assert collapsed.failed == "too few faces after decimation"


def test_the_cache_returns_the_same_mesh_and_leaves_no_partial_file(tmp_path):
    verts, faces = sphere_soup(12, 24)
    first = decimate_mesh(verts, faces, 100, tmp_path)
    files = sorted(tmp_path.iterdir())
    assert len(files) == 1 and files[0].suffix == ".npz"  # no temporary file left behind
    stamp = files[0].stat().st_mtime_ns
    again = decimate_mesh(verts, faces, 100, tmp_path)
    assert files[0].stat().st_mtime_ns == stamp  # read, not written again
    for a, b in ((first.vertices, again.vertices), (first.faces, again.faces)):
        assert np.array_equal(a, b)
    other = decimate_mesh(verts, faces, 60, tmp_path)  # another budget: another entry
    assert len(list(tmp_path.iterdir())) == 2 and len(other.faces) < len(first.faces)
    files[0].write_bytes(b"not a zip")  # a damaged entry is decimated again
    healed = decimate_mesh(verts, faces, 100, tmp_path)
    assert np.array_equal(healed.faces, first.faces)
    failed = decimate_mesh(np.zeros((3, 3)), np.array([[0, 1, 2]]), 1, tmp_path)
    assert failed.failed and decimate_mesh(np.zeros((3, 3)), np.array([[0, 1, 2]]), 1, tmp_path)


# --- the spec field ----------------------------------------------------------------------


@pytest.mark.parametrize("value", ["full", "auto", 500])
def test_good_detail_values_load(tmp_path, value):
    spec = load_spec(write_spec(tmp_path / "s.yaml", render={"detail": value}))
    assert spec.render.detail == value


@pytest.mark.parametrize("value", [0, -3, 1.5, "high", True, "500"])
def test_a_detail_that_is_no_positive_integer_is_one_line_exit_2(tmp_path, value):
    path = write_spec(tmp_path / "s.yaml", render={"detail": value})
    result = subprocess.run(
        [sys.executable, "-m", "demofactory.cli.main", "validate", str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert "render.detail" in lines[0] and "positive number of faces" in lines[0]


def _mesh_xml(name: str, verts: np.ndarray, faces: np.ndarray) -> str:
    v = " ".join(f"{x:.6f}" for x in verts.ravel())
    f = " ".join(str(i) for i in faces.ravel())
    return f'<mesh name="{name}" vertex="{v}" face="{f}"/>'


def test_auto_gives_a_mesh_faces_by_its_mean_projected_area():
    """A ball and a thin square plate of the same bounding radius, side by side in view: the
    ball shows its whole disc on average, the plate (Cauchy: its surface / 4) under a third of
    it, and `auto` gives each 8 faces a pixel of that area, the pixels at 0.7x the distance."""
    import math

    import mujoco

    ball_v, ball_f = sphere_soup(8, 16)
    ball_v = ball_v * 0.1
    # a box 0.14 x 0.14 x 0.002 m: two faces of 0.0196 m^2 and thin edges
    plate_v = np.array(
        [[x, y, z] for x in (-0.07, 0.07) for y in (-0.07, 0.07) for z in (-0.001, 0.001)]
    )
    plate_f = np.array(
        [[0, 2, 3], [0, 3, 1], [4, 5, 7], [4, 7, 6], [0, 1, 5], [0, 5, 4],
         [2, 6, 7], [2, 7, 3], [0, 4, 6], [0, 6, 2], [1, 3, 7], [1, 7, 5]]
    )  # fmt: skip
    xml = f"""
    <mujoco>
      <asset>{_mesh_xml("ball", ball_v, ball_f)}{_mesh_xml("plate", plate_v, plate_f)}</asset>
      <worldbody>
        <camera name="eye" pos="0 0 2" fovy="45"/>
        <geom name="ball" type="mesh" mesh="ball" pos="-0.2 0 0" group="1"/>
        <geom name="plate" type="mesh" mesh="plate" pos="0.2 0 0" group="1"/>
      </worldbody>
    </mujoco>"""
    model = mujoco.MjModel.from_xml_string(xml)
    data = mujoco.MjData(model)
    budgets = mesh_detail.auto_budgets(model, data, [("eye", 84, 84)])
    focal = 84 / (2 * math.tan(math.radians(45) / 2))
    for name in ("ball", "plate"):
        mesh = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_MESH, name)
        geom = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, name)
        radius = float(model.geom_rbound[geom])
        dist = np.linalg.norm(data.geom_xpos[geom] - data.cam_xpos[0])
        dist *= mesh_detail.AUTO_NEAR_FACTOR
        area = min(mesh_detail.mesh_surface(model, mesh) / 4, math.pi * radius**2)
        expected = math.ceil(mesh_detail.AUTO_FACES_PER_PIXEL * area * (focal / dist) ** 2)
        assert budgets[mesh] == max(expected, mesh_detail.AUTO_MIN_FACES)
    ball = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_MESH, "ball")
    plate = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_MESH, "plate")
    # the plate: 2 x 0.0196 + 4 x 0.14 x 0.002 m^2, a quarter of it against its disc's ~0.031
    assert mesh_detail.mesh_surface(model, plate) == pytest.approx(0.04032, rel=1e-6)
    assert budgets[plate] < budgets[ball] / 2.5
    # a quarter of the pixels across: a sixteenth of the area
    small = mesh_detail.auto_budgets(model, data, [("eye", 21, 21)])
    assert budgets[ball] > 16 * mesh_detail.AUTO_MIN_FACES
    assert abs(small[ball] - budgets[ball] / 16) <= 1


# --- the renderer, real scene ------------------------------------------------------------


@pytest.fixture(scope="module")
def scene():
    from demofactory.simulation.scene import Scene

    return Scene(load_spec(SPECS / "lift.yaml"))


def _model_digest(model) -> str:
    h = hashlib.sha256()
    for name in ("mesh_vert", "mesh_face", "mesh_normal", "geom_dataid", "geom_size", "tex_data"):
        h.update(np.ascontiguousarray(getattr(model, name)).tobytes())
    return h.hexdigest()


@pytest.mark.sim
def test_decimated_meshes_are_drawn_where_the_full_ones_are(scene, tmp_path, monkeypatch):
    from demofactory.simulation.render import FrameRenderer

    monkeypatch.setenv("DEMOFACTORY_CACHE", str(tmp_path))
    cam = CameraSpec(name="agentview", width=64, height=64, segmentation="geom")
    before = _model_digest(scene.model)
    full = FrameRenderer(scene, [cam], scene.spec.render)
    low = FrameRenderer(scene, [cam], scene.spec.render.model_copy(update={"detail": 300}))
    try:
        report = low.detail
        assert report.decimated > 0 and report.faces_drawn < report.faces_full / 3
        assert report.meshes == report.decimated + report.within_budget + sum(
            report.kept_full.values()
        )
        assert list((tmp_path / "meshes").glob("*.npz"))  # the decimations were cached
        render = low._render_models["agentview"]
        assert render.nmesh == scene.model.nmesh and render.ngeom == scene.model.ngeom
        drawn = render.mesh_facenum < scene.model.mesh_facenum
        assert drawn.sum() == report.decimated
        over = render.mesh_facenum[drawn] > 300 * mesh_detail.BUDGET_SLACK
        assert over.sum() == report.short_of_budget < report.decimated / 4
        a, b = full.render_views()["agentview"], low.render_views()["agentview"]
        assert not np.array_equal(a.rgb, b.rgb)  # other meshes were drawn ...
        robot = (a.labels > 0) & (a.rgb.sum(-1) > 0)
        same = np.mean(a.labels[robot] == b.labels[robot])
        assert same > 0.97  # ... in the same place: geom by geom, pixels agree
    finally:
        full.close()
        low.close()
    assert _model_digest(scene.model) == before  # the physics model is never touched


@pytest.mark.sim
def test_meshes_that_cannot_decimate_are_drawn_full_and_counted(scene, tmp_path, monkeypatch):
    from demofactory.simulation.render import FrameRenderer

    monkeypatch.setenv("DEMOFACTORY_CACHE", str(tmp_path))
    cam = CameraSpec(name="agentview", width=32, height=32)
    one = FrameRenderer(scene, [cam], scene.spec.render.model_copy(update={"detail": 1}))
    try:
        report = one.detail
        kept = report.kept_full["too few faces after decimation"]
        assert kept > 0 and report.meshes == report.decimated + report.within_budget + kept
        drawn = list(mesh_detail.drawn_meshes(scene.model))
        render = one._render_models["agentview"]
        full = render.mesh_facenum[drawn] == scene.model.mesh_facenum[drawn]
        assert full.sum() == report.within_budget + kept  # kept meshes: drawn at full detail
        assert one.render_current()["agentview"].shape == (32, 32, 3)
    finally:
        one.close()
    shard = {"render_detail": report.to_json()}
    from demofactory.build.report import _detail_table

    table = _detail_table([shard, shard])["render_detail"]
    assert table["kept_full"] == {"too few faces after decimation": kept}
    assert json.loads(json.dumps(table)) == table


@pytest.mark.sim
@pytest.mark.slow
def test_states_and_success_are_bit_identical_with_and_without_auto(tmp_path, monkeypatch):
    """Two workers, one spec but render.detail: full and auto; attempts and renders interleaved as
    in a shard: every attempt's states, actions and success are the same bit for bit."""
    from demofactory.build.pipeline import ShardWorker
    from demofactory.build.records import ShardTask
    from demofactory.seeds.resolve import prepare_demos

    monkeypatch.setenv("DEMOFACTORY_CACHE", str(tmp_path))
    path = write_spec(
        tmp_path / "lift.yaml",
        task={"horizon": 400},
        cameras=[{"name": "agentview", "width": 32, "height": 32}],
    )
    spec_full = load_spec(path)
    spec_auto = spec_full.model_copy(
        update={"render": spec_full.render.model_copy(update={"detail": "auto"})}
    )
    runs = {}
    for name, spec in (("full", spec_full), ("auto", spec_auto)):
        worker = ShardWorker(spec, [])
        worker.demos = [d for d in prepare_demos(spec, worker.scene) if d.demo.length < 400]
        task = ShardTask(0, (0, 1))
        attempts, images = [], []
        for attempt_id in task.attempt_ids:
            attempt = worker.run_attempt(task, attempt_id)
            attempts.append(attempt)
            if attempt.success:
                images.append(worker.make_episode(attempt).images["agentview"])
        runs[name] = (attempts, images, worker.renderer.detail)
        worker.close()
    (full, full_images, _), (auto, auto_images, report) = runs["full"], runs["auto"]
    assert report.decimated > 0
    for a, b in zip(full, auto, strict=True):
        assert a.success == b.success and a.reason == b.reason
        assert np.array_equal(a.states, b.states) and np.array_equal(a.actions, b.actions)
    assert len(full_images) == len(auto_images)


def test_a_report_without_meshes_is_empty_in_inspect():
    from demofactory.build.report import _detail_table

    assert _detail_table([{"render_detail": DetailReport("full").to_json()}]) == {}
    assert _detail_table([{}]) == {}


@pytest.mark.slow
def test_inspect_counts_the_meshes_kept_full(tmp_path, ray_cluster, capsys, monkeypatch):
    """`factory run` with a budget most meshes collapse under, then `factory inspect`: the meshes
    drawn at full detail are counted, per reason, in its JSON and its text."""
    from demofactory.cli.main import main

    monkeypatch.setenv("DEMOFACTORY_CACHE", str(tmp_path / "cache"))
    spec = write_spec(
        tmp_path / "lift.yaml",
        name="lift_detail",
        task={"horizon": 400},
        generation={"attempts": 1, "attempts_per_shard": 1},
        cameras=[{"name": "agentview", "width": 32, "height": 32}],
        render={"detail": 1},
    )
    out = tmp_path / "out"
    assert main(["run", str(spec), "--out", str(out), "--workers", "1", "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["inspect", str(out), "--json"]) == 0
    detail = json.loads(capsys.readouterr().out)["render_detail"]
    kept = detail["kept_full"]["too few faces after decimation"]
    assert detail["detail"] == "1" and kept > 0
    assert detail["meshes"] == detail["decimated"] + detail["within_budget"] + kept
    assert main(["inspect", str(out)]) == 0
    row = [line for line in capsys.readouterr().out.splitlines() if "render detail" in line]
    assert len(row) == 1 and f"too few faces after decimation: {kept}" in row[0]
