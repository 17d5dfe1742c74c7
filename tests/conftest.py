"""Shared fixtures: a real local Ray cluster, tiny real specs, and one real dataset per session."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")  # before anything imports robosuite
# Ray 2.60 otherwise binds its local cluster to a non-loopback address in some containers.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import pytest  # noqa: E402
import yaml  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SPECS = REPO / "scene_specs"
DEMOS = SPECS / "demos"


def write_spec(path: Path, base: str = "lift.yaml", **changes) -> Path:
    """A shipped spec with top-level sections replaced or merged, seed demos made absolute."""
    data = yaml.safe_load((SPECS / base).read_text())
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
def lift_dataset(tmp_path_factory, tiny_lift_spec, ray_cluster) -> Path:
    """`factory run` on the tiny Lift spec, two Ray workers, once per session."""
    from factory.cli import main

    out = tmp_path_factory.mktemp("datasets") / "lift"
    assert (
        main(["run", str(tiny_lift_spec), "--out", str(out), "--workers", "2", "--no-progress"])
        == 0
    )
    return out
