"""generation.backend: the spec field, the one-line refusals, and the backend a dataset records.

The refusals that need MuJoCo Warp absent run the real CLI in a subprocess with the package
blocked (`sys.modules["mujoco_warp"] = None`, Python's own way to make an import fail), so they
run whether or not the gpu extra is installed here.
"""

from __future__ import annotations

import json
import subprocess
import sys

import mujoco
import pytest
from demofactory.build.output_dir import check_output_dir
from demofactory.errors import SpecError, UserError
from demofactory.simulation import mjwarp
from demofactory.specs.spec import load_spec

from tests.conftest import NEEDS_MJWARP, REPO, write_spec

needs_mjwarp = NEEDS_MJWARP

BLOCKED = (
    "import runpy, sys; sys.modules['mujoco_warp'] = None; sys.argv = ['factory', *sys.argv[1:]]; "
    "runpy.run_module('demofactory.cli.main', run_name='__main__')"
)


def factory(cwd, *args, block=False):
    code = ["-c", BLOCKED] if block else ["-m", "demofactory.cli.main"]
    return subprocess.run(
        [sys.executable, *code, *map(str, args)], cwd=cwd, capture_output=True, text=True
    )


def mjwarp_spec(tmp_path, name="stack_mjwarp.yaml"):
    return write_spec(tmp_path / name, "stack.yaml", generation={"backend": "mjwarp"})


def test_backend_defaults_to_cpu_and_mjwarp_is_another_dataset(tmp_path):
    cpu = load_spec(write_spec(tmp_path / "cpu.yaml", "stack.yaml"))
    same = load_spec(
        write_spec(tmp_path / "cpu2.yaml", "stack.yaml", generation={"backend": "cpu"})
    )
    warp = load_spec(mjwarp_spec(tmp_path))
    assert cpu.generation.backend == "cpu" and warp.generation.backend == "mjwarp"
    assert cpu.fingerprint() == same.fingerprint()  # cpu, written or not: old datasets resume
    assert warp.fingerprint() != cpu.fingerprint()
    with pytest.raises(SpecError, match="generation.backend"):
        load_spec(write_spec(tmp_path / "bad.yaml", "stack.yaml", generation={"backend": "gpu"}))


@pytest.mark.parametrize("verb", ["validate", "run"])
def test_without_the_extra_one_line_says_how_to_install_it(tmp_path, verb):
    spec = mjwarp_spec(tmp_path)
    args = [verb, spec] + (["--out", tmp_path / "out"] if verb == "run" else [])
    result = factory(tmp_path, *args, block=True)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {spec}: generation.backend: mjwarp needs MuJoCo Warp")
    assert "pip install 'demofactory[gpu]'" in lines[0]
    assert "set generation.backend: cpu" in lines[0]
    assert not (tmp_path / "out").exists()


@needs_mjwarp
@pytest.mark.slow  # ~10 s: `factory run` imports Ray and warp
def test_run_refuses_what_the_batched_loop_does_not_batch(tmp_path):
    spec = write_spec(
        tmp_path / "rebalance.yaml",
        "stack.yaml",
        generation={"backend": "mjwarp", "rebalance": True},
    )
    result = factory(tmp_path, "run", spec, "--out", tmp_path / "out")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "mjwarp does not batch generation.rebalance yet" in lines[0]
    assert lines[0].endswith("set generation.backend: cpu")
    assert not (tmp_path / "out").exists()


@needs_mjwarp
def test_a_feature_mujoco_warp_lacks_is_named_with_the_fallback():
    # A real MuJoCo model with the noslip solver on: MuJoCo Warp 3.9 does not implement it.
    xml = """<mujoco><option noslip_iterations="3"/><worldbody>
      <body><freejoint/><geom type="box" size=".05 .05 .05"/></body></worldbody></mujoco>"""
    model = mujoco.MjModel.from_xml_string(xml)
    with pytest.raises(SpecError) as err:
        mjwarp.check_model(model, "scene.yaml")
    line = str(err.value)
    assert "\n" not in line
    assert line.startswith("scene.yaml: generation.backend: MuJoCo Warp cannot run this model")
    assert "noslip" in line and "set generation.backend: cpu" in line
    model.opt.noslip_iterations = 0  # the same model without it is taken
    assert mjwarp.refusal(model) is None


def _dataset(tmp_path, spec, backend: dict | None):
    """A dataset folder as `factory run` leaves it, its dataset_info.json written by the
    driver's own function (`backend` replaced, or removed: a dataset older than the field)."""
    from demofactory.build.run import dataset_info
    from demofactory.shards.metadata import save_dataset_info

    out = tmp_path / "out"
    out.mkdir()
    info = dataset_info(spec, 45)
    if backend is None:
        del info["backend"]
    else:
        info["backend"] = backend
    save_dataset_info(out, info)
    (out / "generation.json").write_text(json.dumps({"shards": {}}))
    return out


def test_the_dataset_records_its_backend(tmp_path):
    from demofactory.build.run import dataset_info

    spec = load_spec(write_spec(tmp_path / "cpu.yaml", "stack.yaml"))
    assert dataset_info(spec, 45)["backend"] == {"name": "cpu"}


def test_resuming_with_the_other_backend_is_refused(tmp_path):
    cpu = load_spec(write_spec(tmp_path / "cpu.yaml", "stack.yaml"))
    warp = load_spec(mjwarp_spec(tmp_path))
    out = _dataset(tmp_path, cpu, {"name": "cpu"})
    assert check_output_dir(out, cpu) is True  # the same backend resumes
    with pytest.raises(UserError) as err:
        check_output_dir(out, warp)
    line = str(err.value)
    assert "\n" not in line
    assert "made with backend cpu" in line and "resume it with mjwarp" in line
    assert "set generation.backend: cpu" in line


def test_a_dataset_made_on_mjwarp_is_not_resumed_on_the_cpu(tmp_path):
    cpu = load_spec(write_spec(tmp_path / "cpu.yaml", "stack.yaml"))
    out = _dataset(tmp_path, cpu, {"name": "mjwarp", "mujoco_warp": "3.9.0.1"})
    with pytest.raises(UserError, match="made with backend mjwarp.*resume it with cpu"):
        check_output_dir(out, cpu)


def test_a_dataset_older_than_the_field_counts_as_cpu(tmp_path):
    cpu = load_spec(write_spec(tmp_path / "cpu.yaml", "stack.yaml"))
    out = _dataset(tmp_path, cpu, None)
    assert check_output_dir(out, cpu) is True
    with pytest.raises(UserError, match="made with backend cpu"):
        check_output_dir(out, load_spec(mjwarp_spec(tmp_path)))


@needs_mjwarp
@pytest.mark.sim
@pytest.mark.slow
def test_validate_checks_the_stack_model_against_mujoco_warp(tmp_path):
    spec = mjwarp_spec(tmp_path)
    result = factory(REPO, "validate", spec)
    assert result.returncode == 0, result.stderr
    assert "backend: mjwarp (MuJoCo Warp 3.9.0.1" in result.stdout
    assert "the model is supported" in result.stdout


@needs_mjwarp
@pytest.mark.sim
@pytest.mark.slow
def test_validate_refuses_mjwarp_where_the_fast_loop_is_off(tmp_path):
    spec = write_spec(
        tmp_path / "slow_loop.yaml",
        "stack.yaml",
        generation={"backend": "mjwarp"},
        task={"fast_control": False},
    )
    result = factory(REPO, "validate", spec)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "generation.backend: mjwarp runs the factory's own OSC loop" in lines[0]
    assert "(task.fast_control: false); set generation.backend: cpu" in lines[0]
