"""`factory train-eval --eval-physics`: rollouts under a shifted physics, the scene nominal after,
bad ranges refused in one line before anything runs (real Lift scene, a tiny seed dataset)."""

from __future__ import annotations

import importlib.util
import json

import demofactory  # noqa: F401  (selects the GL backend before robosuite)
import numpy as np
import pytest
from demofactory.build.seed_dataset import write_seed_dataset
from demofactory.cli.main import main
from demofactory.errors import SpecError, UserError
from demofactory.robustness.eval_physics import load_eval_physics, parse_eval_physics
from demofactory.seeds.resolve import Resolved, resolve_spec
from demofactory.specs.spec import load_spec
from demofactory.train.config import TrainEvalConfig
from demofactory.train.core import eval_seed as rollout_seed
from demofactory.train.core import evaluate
from demofactory.train.policy import make_obs_layout
from demofactory.train.train_eval import train_eval

from tests.conftest import REPO, SPECS, write_spec

SHIFTED = SPECS / "physics" / "shifted.yaml"
FIXED_DRAW = {
    "friction": {"cube": 0.5},
    "mass": {"cube": 2.0},
    "size": {},
    "joint_damping": {},
    "joint_armature": {},
    "kp": 0.6,
    "damping_ratio": 1.0,
    "delay": 2,
    "gravity": None,
}
TINY = dict(horizon=4, execute=4, steps=5, batch_size=16, hidden=16, layers=1, eval_horizon=3)


@pytest.fixture(scope="module")
def lift(tmp_path_factory):
    """The Lift low-dim spec, resolved with its first seed demo only, and that demo as a
    dataset (226 steps)."""
    root = tmp_path_factory.mktemp("eval_physics")
    spec_path = write_spec(root / "lift_lowdim.yaml", base="lift_lowdim.yaml")
    full = resolve_spec(load_spec(spec_path))
    resolved = Resolved(full.spec, full.scene, full.demos[:1])
    write_seed_dataset(resolved, root / "seeds")
    return resolved, spec_path, root / "seeds"


class _Still:
    """A policy that commands no motion: the rollouts here test the physics, not the policy."""

    def act(self, obs, image=None):
        return np.zeros((TINY["horizon"], 7))


def _model_arrays(scene) -> dict[str, np.ndarray]:
    m = scene.model
    return {
        "mass": m.body_mass.copy(),
        "friction": m.geom_friction.copy(),
        "gravity": m.opt.gravity.copy(),
        "kp": np.array(scene._gain_holders()[0].kp, dtype=np.float64),
    }


@pytest.mark.sim
def test_rollouts_run_under_the_shift_and_the_scene_is_nominal_after(lift):
    resolved, _, _ = lift
    scene = resolved.scene
    cube = scene.bodies["cube"]
    cube_geom = int(np.flatnonzero(scene.model.geom_bodyid == cube)[0])
    config = TrainEvalConfig(**TINY, rollouts=2)
    physics = load_eval_physics(str(SHIFTED), scene)
    scene.reset()
    nominal = _model_arrays(scene)
    seen = []

    def during(result: dict) -> None:  # called inside the evaluation, after each rollout
        now = _model_arrays(scene)
        seen.append((result, now, len(scene.physics.pending)))

    layout = make_obs_layout(scene.model, scene.bodies)
    results = evaluate(resolved, _Still(), layout, config, on_rollout=during, physics=physics)
    assert [r["seed"] for r in results] == [rollout_seed(resolved.spec.seed, i) for i in (0, 1)]
    for result, now, pending in seen:
        assert result["physics"] == FIXED_DRAW  # a fixed shift draws itself every rollout
        assert now["mass"][cube] == pytest.approx(2.0 * nominal["mass"][cube], rel=1e-12)
        assert now["friction"][cube_geom, 0] == pytest.approx(
            0.5 * nominal["friction"][cube_geom, 0], rel=1e-12
        )
        np.testing.assert_allclose(now["kp"], 0.6 * nominal["kp"], rtol=1e-12)
        assert pending == 2  # two actions held back: the delay
    scene.reset()
    after = _model_arrays(scene)
    assert scene.physics.draw is None
    for name, value in nominal.items():
        np.testing.assert_array_equal(after[name], value, err_msg=name)


@pytest.mark.sim
def test_ranges_draw_per_rollout_from_the_eval_seed(lift):
    resolved, _, _ = lift
    ranges = load_eval_physics("{physics: {kp: [0.5, 0.7], delay: [0, 3]}}", resolved.scene)
    config = TrainEvalConfig(**TINY, rollouts=3)
    layout = make_obs_layout(resolved.scene.model, resolved.scene.bodies)
    runs = [evaluate(resolved, _Still(), layout, config, physics=ranges) for _ in range(2)]
    draws = [r["physics"] for r in runs[0]]
    assert draws == [r["physics"] for r in runs[1]]  # from the seeds: the same every time
    assert all(0.5 <= d["kp"] <= 0.7 and 0 <= d["delay"] <= 3 for d in draws)
    assert len({d["kp"] for d in draws}) == 3 and ranges.source == "--eval-physics"


@pytest.mark.sim
def test_train_eval_reports_the_eval_physics(lift):
    resolved, _, seeds = lift
    config = TrainEvalConfig(**TINY, rollouts=1, eval_physics=str(SHIFTED))
    report = train_eval(seeds, resolved, config)
    assert report["eval_physics"] == {
        "source": str(SHIFTED),
        "physics": {
            "friction": {"cube": [0.5, 0.5]},
            "mass": {"cube": [2.0, 2.0]},
            "kp": [0.6, 0.6],
            "delay": [2, 2],
        },
    }
    assert report["per_rollout"][0]["physics"] == FIXED_DRAW
    assert resolved.scene.physics.draw is None
    json.dumps(report)


@pytest.mark.sim
def test_a_bad_target_fails_in_one_line_and_writes_nothing(lift, tmp_path, capsys):
    _, spec_path, seeds = lift
    bad = tmp_path / "bad.yaml"
    bad.write_text("physics:\n  mass: {cubee: 2.0}\n")
    out = tmp_path / "report.json"
    args = ["train-eval", str(seeds), "--spec", str(spec_path), "--eval-physics", str(bad)]
    assert main([*args, "--steps", "5", "--quiet", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{bad}: physics.mass.cubee: unknown target" in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("physics:\n  kp: -0.6\n", "physics.kp"),  # the spec section's schema
        ("physics:\n  delay: 1.5\n", "physics.delay[0]"),
        ("physics:\n  kpp: 0.6\n", "physics.kpp"),
        ("physics:\n  kp: 0.6\nkp: 0.6\n", "kp"),  # only physics: at the top
        ("kp: 0.6\n", "physics"),
    ],
)
def test_bad_ranges_name_the_file_and_field(tmp_path, text, field):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(SpecError) as err:
        parse_eval_physics(str(bad))
    assert str(err.value).startswith(f"{bad}: {field}: ") and "\n" not in str(err.value)
    with pytest.raises(UserError, match="no such file"):
        parse_eval_physics(str(tmp_path / "no-such-file.yaml"))


def _covered(value: tuple, ranges: tuple | None, nominal: float) -> bool:
    lo, hi = ranges if ranges is not None else (nominal, nominal)
    return lo <= value[0] and value[1] <= hi


def _transfer_benchmark():
    """benchmarks/bench_physics_transfer.py as a module (its SPECS and SHIFTS)."""
    path = REPO / "benchmarks" / "bench_physics_transfer.py"
    spec = importlib.util.spec_from_file_location("bench_physics_transfer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.sim
@pytest.mark.parametrize("task", ["lift", "stack"])
def test_the_transfer_shifts_load_and_the_randomized_ranges_cover_them(task):
    """The transfer benchmark's default shifts name real targets of the task's scene and lie
    inside the ranges its randomized data was drawn from: the benchmark asks whether
    randomizing over a shift helps under it, so a shift outside them would measure
    extrapolation instead."""
    bench = _transfer_benchmark()
    nominal_spec, randomized_spec = bench.SPECS[task]
    resolved = resolve_spec(load_spec(nominal_spec))
    ranges = load_spec(randomized_spec).physics
    assert ranges is not None and len(bench.SHIFTS[task]) == 2
    for path in bench.SHIFTS[task]:
        name = path.name
        shift = load_eval_physics(str(path), resolved.scene).ranges
        for field in ("friction", "mass", "size", "joint_damping", "joint_armature"):
            for target, value in getattr(shift, field).items():
                assert _covered(value, getattr(ranges, field).get(target), 1.0), (name, target)
        assert _covered(shift.kp or (1.0, 1.0), ranges.kp, 1.0), name
        assert _covered(shift.damping_ratio or (1.0, 1.0), ranges.damping_ratio, 1.0), name
        assert _covered(shift.delay or (0, 0), ranges.delay, 0), name
        assert shift.gravity_tilt <= ranges.gravity_tilt, name
