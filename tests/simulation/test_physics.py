"""Physics randomization (factory/simulation/physics.py): draws from the seed, exact undo,
re-simulation.

The scene tests run a real Lift env (no cameras) under a spec that extends lift_lowdim.yaml with
a `physics:` section.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import mujoco
import numpy as np
import pytest
import yaml
from demofactory.build.pipeline import ShardWorker
from demofactory.build.records import ShardTask
from demofactory.generators.mimicgen import attempt_seed, sample_placement
from demofactory.generators.scene_api import Placement
from demofactory.simulation.physics import PhysicsDraw, draw_physics, physics_rng
from demofactory.simulation.resimulate import resimulate
from demofactory.specs.adapters import placement_params
from demofactory.specs.spec import load_spec

from tests.conftest import REPO, SPECS

PHYSICS = {
    "friction": {"cube": [0.8, 1.2], "gripper": [0.9, 1.1]},
    "mass": {"cube": [0.8, 1.5]},
    "size": {"cube": [0.95, 1.05]},
    "joint_damping": {"arm": [0.8, 1.2]},
    "joint_armature": {"arm": [0.8, 1.2]},
    "kp": [0.8, 1.2],
    "damping_ratio": [0.8, 1.2],
    "delay": [1, 2],
    "gravity_tilt": 0.02,
}


def physics_spec_file(directory, physics=None, name="lift_physics.yaml"):
    path = directory / name
    raw = {"extends": str(SPECS / "lift_lowdim.yaml"), "name": "lift_physics"}
    raw["physics"] = PHYSICS if physics is None else physics
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_draws_come_from_the_seed_within_the_ranges(tmp_path):
    spec = load_spec(physics_spec_file(tmp_path)).physics
    draws = [draw_physics(spec, physics_rng(seed)) for seed in range(20)]
    assert draws[3] == draw_physics(spec, physics_rng(3))
    assert len({json.dumps(d.to_json()) for d in draws}) == 20
    for draw in draws:
        for field in ("friction", "mass", "size", "joint_damping", "joint_armature"):
            for target, (lo, hi) in PHYSICS[field].items():
                assert lo <= getattr(draw, field)[target] <= hi
        assert 0.8 <= draw.kp <= 1.2 and 0.8 <= draw.damping_ratio <= 1.2
        assert draw.delay in (1, 2)
        gravity = np.array(draw.gravity)
        assert np.linalg.norm(gravity) == pytest.approx(9.81)
        assert math.acos(-gravity[2] / 9.81) <= 0.02 + 1e-12
    assert {d.delay for d in draws} == {1, 2}
    # JSON (provenance) keeps every bit
    assert all(PhysicsDraw.from_json(json.loads(json.dumps(d.to_json()))) == d for d in draws)


def test_a_fixed_value_draws_itself(tmp_path):
    spec = load_spec(physics_spec_file(tmp_path, {"mass": {"cube": 1.7}, "delay": 2})).physics
    draw = draw_physics(spec, physics_rng(0))
    assert draw.mass == {"cube": 1.7} and draw.delay == 2 and draw.gravity is None


@pytest.mark.parametrize(
    ("physics", "field", "expected"),
    [
        ({"mass": {"cube": [2.0, 1.0]}}, "physics.mass.cube", "lo <= hi"),
        ({"mass": {"cube": [-1.0, 1.0]}}, "physics.mass.cube", "scales > 0"),
        ({"friction": {"cube": 0}}, "physics.friction.cube", "scales > 0"),
        ({"joint_damping": {"arm": [-0.5, 1]}}, "physics.joint_damping.arm", ">= 0"),
        ({"delay": [2, 1]}, "physics.delay", "whole control steps"),
        ({"gravity_tilt": 2.0}, "physics.gravity_tilt", "less than or equal to 0.5"),
        ({"gravty_tilt": 0.1}, "physics.gravty_tilt", "gravity_tilt"),
    ],
)
def test_bad_ranges_name_the_field(tmp_path, physics, field, expected):
    from demofactory.errors import SpecError

    with pytest.raises(SpecError) as err:
        load_spec(physics_spec_file(tmp_path, physics))
    assert err.value.field == field and expected in err.value.message, str(err.value)


# --- in a real scene -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    from demofactory.seeds.resolve import resolve_spec

    return resolve_spec(load_spec(physics_spec_file(tmp_path_factory.mktemp("physics"))))


def _model_arrays(model: mujoco.MjModel) -> dict[str, np.ndarray]:
    out = {}
    for owner, prefix in ((model, ""), (model.opt, "opt."), (model.stat, "stat.")):
        for name in dir(owner):
            value = getattr(owner, name) if not name.startswith("_") else None
            if isinstance(value, np.ndarray | float | int) and not isinstance(value, bool):
                out[prefix + name] = np.array(value, copy=True)
    return out


@pytest.mark.sim
def test_apply_then_restore_leaves_the_model_bit_identical(scene):
    sc = scene.scene
    sc.set_physics(None)
    sc.reset()
    before, gains = (
        _model_arrays(sc.model),
        [(h.kp.copy(), h.kd.copy()) for h in sc._gain_holders()],
    )
    draw = PhysicsDraw(
        friction={"cube": 1.3, "gripper": 0.7, "table": 1.1, "cube_main": 0.9},  # overlapping
        mass={"cube": 1.7, "robot0_link7": 1.1},
        size={"cube": 1.05},
        joint_damping={"arm": 0.8},
        joint_armature={"arm": 1.2, "robot0_joint1": 1.1},
        kp=1.2,
        damping_ratio=0.9,
        delay=2,
        gravity=(0.1, 0.05, -9.8),
    )
    sc.set_physics(draw)
    changed = _model_arrays(sc.model)
    touched = {k for k in before if not np.array_equal(before[k], changed[k])}
    assert {"geom_friction", "body_mass", "geom_size", "dof_damping", "opt.gravity"} <= touched
    assert sc._gain_holders()[0].kp[0] == pytest.approx(gains[0][0][0] * 1.2)
    sc.reset()  # a reset re-applies the draw the scene holds
    assert sc.model.opt.gravity[0] == 0.1 and sc._gain_holders()[0].kp[0] != gains[0][0][0]
    sc.set_physics(None)
    after = _model_arrays(sc.model)
    assert [k for k in before if not np.array_equal(before[k], after[k])] == []
    sc.reset()
    for holder, (kp, kd) in zip(sc._gain_holders(), gains, strict=True):
        assert np.array_equal(holder.kp, kp) and np.array_equal(holder.kd, kd)


@pytest.mark.sim
@pytest.mark.slow  # one Lift attempt and two re-simulations of it: ~13 s on 2 shared cores
def test_an_attempt_resimulates_bit_for_bit_from_its_provenance(scene):
    short = [d for d in scene.demos if d.demo.length < 400]  # the 1143-step demo: too slow here
    assert short[0] is scene.demos[0]  # every attempt starts from the first demo's start
    worker = ShardWorker(scene.spec, short, scene.scene)
    first = worker.run_attempt(ShardTask(0, (0,)), 0)
    recorded = json.loads(json.dumps(first.provenance))  # as episodes.jsonl holds it
    assert recorded["physics"]["delay"] >= 1 and recorded["physics"]["gravity"] is not None
    # another draw in between, which a reset must undo
    scene.scene.set_physics(PhysicsDraw(mass={"cube": 2.0}, kp=0.8, delay=2))
    scene.scene.reset_to(short[0].demo.states[0], Placement({}))
    for action in first.actions[:20]:
        scene.scene.step(action)
    states = resimulate(scene.scene, short[0], recorded, first.actions)
    assert first.length > 10 and np.array_equal(states, first.states)
    # the physics stream is apart from the placement draws: placements as without physics
    start_xy = {name: poses[0][:2, 3] for name, poses in short[0].object_poses.items()}
    rng = np.random.default_rng(attempt_seed(scene.spec.seed, 0, 0))
    placement = sample_placement(placement_params(scene.spec.placement), start_xy, rng)
    assert placement.to_json() == recorded["placement"]
    # a heavier cube follows another trajectory under the same actions
    heavy = resimulate(
        scene.scene, short[0], recorded, first.actions, draw=PhysicsDraw(mass={"cube": 3.0})
    )
    cube = slice(1 + 9, 1 + 12)  # qpos: 7 arm, 2 finger joints, then the cube's free joint
    assert np.abs(heavy[:, cube] - first.states[:, cube]).max() > 1e-4


def _cube_pos(sc) -> np.ndarray:
    return sc.data.xpos[sc.bodies["cube"]].copy()


@pytest.mark.sim
def test_gravity_tilt_and_size_change_what_happens(scene):
    sc, start = scene.scene, scene.demos[0].demo.states[0]
    hold = np.array([0, 0, 0, 0, 0, 0, -1.0])
    ends = {}
    for label, draw in {
        "nominal": None,
        "tilted": PhysicsDraw(gravity=(3.0, 0.0, -9.34)),
        "bigger": PhysicsDraw(size={"cube": 1.2}),
    }.items():
        sc.set_physics(draw)
        sc.reset_to(start, Placement({}))
        rest = _cube_pos(sc)
        adr = sc.model.jnt_qposadr[sc.model.body_jntadr[sc.bodies["cube"]]]
        sc.data.qpos[adr + 2] += 0.04  # drop it from 4 cm
        mujoco.mj_forward(sc.model, sc.data)
        for _ in range(6):
            sc.step(hold)
        ends[label] = (rest, _cube_pos(sc))
    sc.set_physics(None)
    half = sc.model.geom_size[next(iter(sc._geoms["cube"]))][2]
    # a bigger cube lands higher on the table (its contacts scaled with it)
    assert ends["bigger"][1][2] - ends["nominal"][1][2] == pytest.approx(0.2 * half, abs=5e-4)
    # under a tilted gravity the falling cube drifts along +x; straight down it does not
    drift = {k: ends[k][1][0] - ends[k][0][0] for k in ("nominal", "tilted")}
    assert abs(drift["nominal"]) < 1e-3 and drift["tilted"] > 5e-3, drift


@pytest.mark.sim
def test_a_delay_shifts_the_response_by_n_steps(scene):
    sc, start = scene.scene, scene.demos[0].demo.states[0]
    push = np.array([1.0, 0, 0, 0, 0, 0, -1.0])  # full speed along +x
    paths = {}
    for delay in (0, 2):
        sc.set_physics(PhysicsDraw(delay=delay))
        sc.reset_to(start, Placement({}))
        eef = [sc.eef_pose()[:3, 3].copy()]
        for _ in range(8):
            sc.step(push)
            eef.append(sc.eef_pose()[:3, 3].copy())
        paths[delay] = np.array(eef)[:, 0] - eef[0][0]
    sc.set_physics(None)
    moved = 1e-3
    assert paths[0][1] > moved  # at once without a delay
    assert np.all(np.abs(paths[2][:3]) < moved / 5) and paths[2][3] > moved  # two steps later
    np.testing.assert_allclose(paths[2][2:], paths[0][:-2], atol=moved / 2)


def test_validate_refuses_a_bad_range_in_one_line(tmp_path):
    spec = physics_spec_file(tmp_path, {"mass": {"cube": [-0.5, 1.2]}})
    before = sorted(p.name for p in tmp_path.iterdir())
    result = subprocess.run(
        [sys.executable, "-m", "demofactory.cli.main", "validate", str(spec)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert str(spec) in lines[0] and "physics.mass.cube" in lines[0] and "> 0" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.sim
@pytest.mark.parametrize(
    ("physics", "field", "expected"),
    [
        ({"mass": {"lid": [0.9, 1.1]}}, "physics.mass.lid", "cube_main"),
        ({"friction": {"lid": 1.0}}, "physics.friction.lid", '"gripper"'),
        ({"joint_damping": {"elbow": 1.0}}, "physics.joint_damping.elbow", "robot0_joint1"),
        ({"size": {"robot0_link7": 1.1}}, "physics.size.robot0_link7", "meshes"),
    ],
)
def test_unknown_targets_name_the_field_and_the_choices(scene, physics, field, expected):
    from demofactory.errors import SpecError
    from demofactory.specs.spec import PhysicsSpec

    with pytest.raises(SpecError) as err:
        scene.scene.physics.model_physics.targets.check(PhysicsSpec(**physics))
    assert err.value.field == field and expected in err.value.message, str(err.value)
    assert err.value.where == str(scene.spec.path)
