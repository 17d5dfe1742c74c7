"""Shared fixtures: a real local Ray cluster, tiny real specs, and one real dataset per session."""

from __future__ import annotations

import os
from pathlib import Path

import demofactory  # noqa: F401 - sets MUJOCO_GL's default (factory/_gl.py) before robosuite loads

# Ray 2.60 otherwise binds its local cluster to a non-loopback address in some containers.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import contextlib  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402
import yaml  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SPECS = REPO / "scene_specs"
DEMOS = SPECS / "demos"


def _mjwarp_missing() -> bool:
    from demofactory.simulation import mjwarp

    return not mjwarp.available()


# The tests of `generation.backend: mjwarp` need the gpu extra, which the default install (and
# CI) leaves out.
NEEDS_MJWARP = pytest.mark.skipif(
    _mjwarp_missing(), reason="MuJoCo Warp is not installed (pip install '.[gpu]')"
)


# --- markers ------------------------------------------------------------------------------------
# `sim`: builds a robosuite/MuJoCo env; `ray`: starts Ray; `slow`: over ~10 s on 2 cores (see
# pyproject.toml). `pytest -m "not sim and not ray and not slow"` runs the pure tests in seconds.
# A test that takes one of these fixtures is marked for it here, so new tests need no marks of
# their own for them; a test that builds an env or starts Ray in this process without its mark
# fails (below), so that the pure selection stays pure.
FIXTURE_MARKS = {
    "ray_cluster": ("ray", "sim"),  # the session cluster; every test on it runs a Ray worker
    "lift_dataset": ("ray", "sim"),  # a `factory run` on that cluster
    "small_lift_dataset": ("ray", "sim"),  # another, smaller one
    # Module fixtures that build a scene (their names mean that wherever they appear here):
    "lift": ("sim",),
    "noisy_lift": ("sim",),
    "stack": ("sim",),
    "scene": ("sim",),
    "resolved": ("sim",),
    "final_state": ("sim",),
    "variant_shard": ("sim",),
    "seeds_dataset": ("sim",),
    # ... or run `factory run` in a subprocess, which starts Ray there.
    "built": ("sim", "ray"),
    "failing_dataset": ("sim", "ray"),
    "two_nodes": ("sim", "ray", "slow"),
    # A tiny diffusers pipeline built with torch: ~8 s to make, seconds per use.
    "tiny_model": ("slow",),
    # moto's S3 server in a subprocess (tests/s3_server.py): a second or two to start.
    "s3_server": ("s3",),
    "s3_env": ("s3",),
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        for fixture, marks in FIXTURE_MARKS.items():
            if fixture in item.fixturenames:
                for mark in marks:
                    if item.get_closest_marker(mark) is None:
                        item.add_marker(mark)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    if item.get_closest_marker("sim") is not None:
        # As the CLI and the Ray workers do, once, before this process builds an env (and so
        # before the test's fixtures: a module-scoped one may build it).
        from demofactory.robots import repairs as robot_repairs

        robot_repairs.install()
    with _marks_enforced(item):  # fixtures too: a module-scoped one may build the env
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    with _marks_enforced(item):
        yield


@contextlib.contextmanager
def _marks_enforced(item):
    """Fail a test that builds a robosuite env without `sim`, or starts Ray without `ray`.

    Only what runs in this process is seen (a `factory` subprocess is not): mark those by hand.
    """
    marked = {m.name for m in item.iter_markers()}
    patched = []
    sim, ray = sys.modules.get("demofactory.simulation.scene"), sys.modules.get("ray")
    if "sim" not in marked and sim is not None:
        patched.append((sim, "make_env", _refuse("builds a robosuite env", "sim")))
    if "ray" not in marked and ray is not None and hasattr(ray, "init"):
        patched.append((ray, "init", _refuse("starts Ray", "ray")))
    saved = [(module, name, getattr(module, name)) for module, name, _ in patched]
    for module, name, value in patched:
        setattr(module, name, value)
    try:
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


def _refuse(what: str, mark: str):
    def refuse(*args, **kwargs):
        pytest.fail(
            f"this test {what} but is not marked `{mark}`: add `pytestmark = pytest.mark.{mark}` "
            f"to its module or `@pytest.mark.{mark}` to it (tests/conftest.py explains the marks)",
            pytrace=False,
        )

    return refuse


def write_spec(path: Path, base: str = "lift.yaml", **changes) -> Path:
    """A shipped spec with top-level sections replaced or merged, seed demos made absolute."""
    from demofactory.specs.spec import (
        load_raw_spec,  # resolves `extends:` (lift_lowdim.yaml extends lift)
    )

    data = load_raw_spec(SPECS / base)
    data["seed_demos"] = [str((SPECS / p).resolve()) for p in data["seed_demos"]]
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def ray_cluster():
    """A real local Ray cluster (Ray 2.60 has no local mode)."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """A real S3-compatible server (moto) on loopback, behind a gate the test can close."""
    from tests.s3_server import start_s3_server

    server = start_s3_server(tmp_path_factory.mktemp("s3") / "moto.log")
    yield server
    server.stop()


@pytest.fixture
def s3_env(s3_server, monkeypatch, tmp_path):
    """This test's environment pointed at the loopback S3 server (endpoint, keys), with its own
    cache of stored datasets' local copies; the server itself, returned."""
    import fsspec

    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("DEMOFACTORY_CACHE", str(tmp_path / "cache"))
    fsspec.filesystem("s3").clear_instance_cache()  # a new endpoint or key: a new client
    return s3_server


@pytest.fixture(scope="session")
def tiny_lift_spec(tmp_path_factory) -> Path:
    """Lift from the four human demos, short horizon, two small cameras (one not square)."""
    path = tmp_path_factory.mktemp("spec") / "tiny_lift.yaml"
    return write_spec(
        path,
        name="tiny_lift",
        task={"horizon": 400},  # demo_2 (1143 steps) cannot fit: those attempts fail by horizon
        generation={"attempts": 4, "attempts_per_shard": 2},
        cameras=[
            {"name": "agentview", "width": 48, "height": 48},
            {"name": "robot0_eye_in_hand", "width": 40, "height": 32},
        ],
    )


@pytest.fixture(scope="session")
def small_lift_spec(tmp_path_factory) -> Path:
    """Tiny Lift cut further for tests that make shards again (resume, repair, extend, store):
    two shards of one attempt, one 32x32 camera. Rendering is what a shard costs (~40 ms a frame
    and camera under software GL, whatever the size), so a shard here costs a quarter of one of
    `tiny_lift_spec`'s (two attempts, two cameras)."""
    path = tmp_path_factory.mktemp("spec") / "small_lift.yaml"
    return write_spec(
        path,
        name="small_lift",
        task={"horizon": 400},
        generation={"attempts": 2, "attempts_per_shard": 1},
        cameras=[{"name": "agentview", "width": 32, "height": 32}],
    )


@pytest.fixture(scope="session")
def small_lift_dataset(tmp_path_factory, small_lift_spec, ray_cluster) -> Path:
    """`factory run` on the small Lift spec, two Ray workers, once per session: tests that
    change it work on copies."""
    from demofactory.cli.main import main
    from demofactory.shards import load_manifest

    out = tmp_path_factory.mktemp("datasets") / "small_lift"
    run = ["run", str(small_lift_spec), "--out", str(out), "--workers", "2", "--no-progress"]
    assert main(run) == 0
    assert load_manifest(out).total_samples > 0  # images to read back (both attempts succeed)
    return out


@pytest.fixture(scope="session")
def lift_dataset(tmp_path_factory, tiny_lift_spec, ray_cluster) -> Path:
    """`factory run` on the tiny Lift spec, two Ray workers, once per session."""
    from demofactory.cli.main import main

    out = tmp_path_factory.mktemp("datasets") / "lift"
    assert (
        main(["run", str(tiny_lift_spec), "--out", str(out), "--workers", "2", "--no-progress"])
        == 0
    )
    return out


def device_reading(dpos, drot, grasp: int) -> dict:
    """A scripted robosuite Device's `get_controller_state`: `dpos` and `drot` the normalized
    deltas a key press gives, `grasp` the grasp toggle; the rotation handed over as robosuite's
    raw (roll, pitch, yaw), which `input2action` reorders as [1, 0, 2] with z negated."""
    import numpy as np

    return dict(
        dpos=np.asarray(dpos, dtype=np.float64),
        rotation=np.eye(3),
        raw_drotation=np.array([drot[1], drot[0], -drot[2]]),
        grasp=grasp,
        reset=False,
        base_mode=0,
    )


def collect_one(spec, out: Path, driver):
    """One demo of `spec` through `factory collect`'s own loop into `out`, driven by the
    scripted Device `driver(env)` makes, no viewer, one try; the device, for its record."""
    from demofactory.robots import repairs as robot_repairs
    from demofactory.seeds.collect import collect

    robot_repairs.install()
    devices, lines = [], []

    def factory(env):
        devices.append(driver(env))
        return devices[0]

    lengths = collect(spec, out, 1, factory, viewer=False, log=lines.append, max_tries=1)
    assert lines == ["demo 1: kept"] and len(lengths) == 1
    return devices[0]
