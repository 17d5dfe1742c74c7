"""Automatic domain randomization (factory/robustness/adr.py): the schedule, its record, its
plot."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from demofactory.errors import SpecError
from demofactory.robustness.adr import plot_adr, run_adr, scaled_physics
from demofactory.simulation.physics import draw_physics, physics_rng
from demofactory.specs.spec import AdrSpec, PhysicsSpec, load_spec
from PIL import Image

from tests.conftest import SPECS

PHYSICS = PhysicsSpec(
    friction={"cube": (0.5, 1.5)},
    mass={"cube": (1.0, 3.0)},
    joint_damping={"arm": (0.0, 2.0)},
    kp=(0.6, 1.2),
    delay=(0, 3),
    gravity_tilt=0.04,
)


def test_scaled_ranges_run_from_nominal_to_the_written_ones():
    assert scaled_physics(PHYSICS, 1.0) == PHYSICS
    nominal = draw_physics(scaled_physics(PHYSICS, 0.0), physics_rng(7))
    assert nominal.friction == {"cube": 1.0} and nominal.mass == {"cube": 1.0}
    assert nominal.kp == 1.0 and nominal.delay == 0 and nominal.gravity is None
    half = scaled_physics(PHYSICS, 0.5)
    assert half.friction["cube"] == (0.75, 1.25) and half.mass["cube"] == (1.0, 2.0)
    assert half.joint_damping["arm"] == (0.5, 1.5) and half.kp == (0.8, 1.1)
    assert half.delay == (0, 2) and half.gravity_tilt == 0.02


def _oracle(widest_mass: float):
    """A generator that succeeds while the cube's drawn mass scale stays under `widest_mass`."""

    def attempt(seed: int, ranges: PhysicsSpec) -> bool:
        return draw_physics(ranges, physics_rng(seed)).mass["cube"] <= widest_mass

    return attempt


def test_ranges_widen_while_probes_pass_and_narrow_when_they_fail():
    adr = AdrSpec(probe_attempts=20, threshold=0.9, step=0.2, start=0.2, rounds=8)
    result = run_adr(adr, PHYSICS, 0, _oracle(2.0))  # mass [1, 3]: about half the way passes
    fractions = [h["fraction"] for h in result["history"]]
    assert fractions[:3] == [0.2, 0.4, 0.6]  # widened while the probes passed
    for before, after, entry in zip(fractions, fractions[1:], result["history"], strict=False):
        assert after == pytest.approx(before + (0.2 if entry["widen"] else -0.2))
        assert entry["widen"] == (entry["success_rate"] >= 0.9)
    assert not all(h["widen"] for h in result["history"])  # it found the edge and came back
    last_pass = [h["fraction"] for h in result["history"] if h["widen"]][-1]
    assert result["fraction"] == last_pass and 0.2 <= last_pass <= 0.6
    assert PhysicsSpec.model_validate(result["physics"]) == scaled_physics(PHYSICS, last_pass)
    assert run_adr(adr, PHYSICS, 0, _oracle(2.0)) == result  # from the spec seed alone
    json.dumps(result)  # generation.json holds it as is


def test_full_ranges_that_pass_stop_the_schedule():
    adr = AdrSpec(probe_attempts=5, threshold=0.8, step=0.5, start=0.5, rounds=10)
    result = run_adr(adr, PHYSICS, 3, _oracle(10.0))
    assert [h["fraction"] for h in result["history"]] == [0.5, 1.0]
    assert result["fraction"] == 1.0


def test_the_plot_is_a_png(tmp_path):
    adr = AdrSpec(probe_attempts=10, threshold=0.9, step=0.2, start=0.2, rounds=6)
    result = run_adr(adr, PHYSICS, 0, _oracle(2.0))
    path = plot_adr(result, tmp_path / "plots" / "adr.png")
    image = np.asarray(Image.open(path).convert("RGB"))
    assert image.shape == (240, 480, 3)
    blue = (image[..., 2] > 150) & (image[..., 0] < 80) & (image[..., 1] < 80)
    assert blue.sum() > 50  # the fraction's line and points


def _spec_file(tmp_path, generation_adr, physics=True):
    raw = {"extends": str(SPECS / "lift_lowdim.yaml"), "name": "lift_adr"}
    raw["generation"] = {"adr": generation_adr, "attempts": 2, "attempts_per_shard": 2}
    if physics:
        raw["physics"] = {"mass": {"cube": [0.8, 2.0]}, "delay": [0, 1]}
    path = tmp_path / "lift_adr.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_adr_without_physics_is_refused(tmp_path):
    with pytest.raises(SpecError) as err:
        load_spec(_spec_file(tmp_path, {"probe_attempts": 2}, physics=False))
    assert err.value.field == "generation.adr" and "physics:" in err.value.message


def test_adr_leaves_older_fingerprints_alone(tmp_path):
    lift = load_spec(SPECS / "lift_lowdim.yaml")
    off = lift.model_copy(update={"generation": lift.generation.model_copy(update={"adr": None})})
    assert off.fingerprint() == lift.fingerprint()
    on = load_spec(_spec_file(tmp_path, {"probe_attempts": 2}))
    assert on.fingerprint() != load_spec(_spec_file(tmp_path, {"probe_attempts": 3})).fingerprint()


@pytest.mark.sim
@pytest.mark.ray
@pytest.mark.slow  # a `factory run` (Ray) of two attempts after two probe rounds of one attempt
def test_a_run_records_the_schedule_and_generates_within_it(tmp_path, ray_cluster, capsys):
    # In this process on the session's Ray cluster: the same code as the `factory` command,
    # without a Python start and a Ray start of its own.
    from demofactory.cli.main import main

    spec = _spec_file(tmp_path, {"probe_attempts": 1, "rounds": 2, "start": 0.5, "step": 0.5})
    out = tmp_path / "out"

    run = main(["run", str(spec), "--out", str(out), "--workers", "1", "--no-progress"])
    assert run == 0, capsys.readouterr().err[-2000:]
    generation = json.loads((out / "generation.json").read_text())
    adr = generation["adr"]
    assert [h["fraction"] for h in adr["history"]][0] == 0.5 and len(adr["history"]) <= 2
    lo, hi = PhysicsSpec.model_validate(adr["physics"]).mass["cube"]
    assert generation["shards"]  # the recorder kept "adr" beside the shards
    for line in (out / "episodes.jsonl").read_text().splitlines():
        assert lo <= json.loads(line)["provenance"]["physics"]["mass"]["cube"] <= hi
    plot = main(["inspect", str(out), "--plot", str(tmp_path / "adr.png")])
    assert plot == 0, capsys.readouterr().err
    assert Image.open(tmp_path / "adr.png").size == (480, 240)


@pytest.mark.sim
def test_a_batch_stage_draws_from_the_datasets_adr_ranges(tmp_path):
    """A batch stage's actor generates a shard without run_shard (ShardWorker.generate): given
    the dataset, it takes the ranges ADR settled on there, as run_shard does, before drawing."""
    from demofactory.build.pipeline import ShardWorker
    from demofactory.build.records import ShardTask
    from demofactory.robots import repairs
    from demofactory.seeds.resolve import resolve_spec

    repairs.install()
    spec = load_spec(_spec_file(tmp_path, {"probe_attempts": 1}))
    resolved = resolve_spec(spec)
    settled = {"mass": {"cube": [1.9, 2.0]}, "delay": [1, 1]}  # inside the spec's, narrower
    out = tmp_path / "out"
    out.mkdir()
    (out / "generation.json").write_text(json.dumps({"shards": {}, "adr": {"physics": settled}}))
    worker = ShardWorker(spec, resolved.demos, resolved.scene)
    assert worker.physics.mass["cube"] == (0.8, 2.0)
    attempts = worker.generate(ShardTask(0, (0, 1)), out_dir=str(out))
    assert worker.physics.mass["cube"] == (1.9, 2.0)
    for attempt in attempts:
        drawn = attempt.provenance["physics"]
        assert 1.9 <= drawn["mass"]["cube"] <= 2.0 and drawn["delay"] == 1, drawn
