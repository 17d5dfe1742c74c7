"""`factory calibrate`: recordings of a Lift scene with hidden physics, written as robosuite hdf5,
fitted back through the real CLI; recordings of another model refused with one line, exit 2."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from demofactory.errors import UserError

from tests.conftest import DEMOS, SPECS

LIFT = SPECS / "lift.yaml"
# Three windows of the first Lift seed demo (demo_1 grasps at step 188): the arm moving free,
# closing on the cube, lifting it. Short: every residual replays all three.
WINDOWS = [(40, 52), (180, 192), (200, 212)]
HIDDEN = {"mass.cube": 1.6, "kp": 0.8}  # the delay search: benchmarks/bench_calibrate.py


@pytest.fixture(scope="module")
def lift_scene():
    from demofactory.simulation.scene import Scene
    from demofactory.specs.spec import load_spec

    return Scene(load_spec(LIFT))


@pytest.fixture(scope="module")
def recordings(lift_scene, tmp_path_factory) -> list:
    """Three hdf5 files, one window each, recorded in the scene with HIDDEN applied."""
    from demofactory.robustness.calibrate import record, save_recordings
    from demofactory.seeds.demos import load_seed_demos

    demo = load_seed_demos(DEMOS / "lift_panda_4demos_robosuite141.hdf5")[0]
    trajectories = record(
        lift_scene,
        [demo.states[a] for a, _ in WINDOWS],
        [demo.actions[a:b] for a, b in WINDOWS],
        HIDDEN,
    )
    folder = tmp_path_factory.mktemp("recordings")
    paths = []
    for i, trajectory in enumerate(trajectories):
        paths.append(folder / f"rec{i}.hdf5")
        save_recordings(paths[-1], "Lift", [trajectory])
    return paths


@pytest.mark.sim
def test_recorded_windows_see_the_hidden_values(lift_scene, recordings):
    """The hidden values change what was recorded (else the fit below proves nothing)."""
    from demofactory.robustness.calibrate import load_recordings, rollout, state_residual

    for rec in load_recordings(recordings, lift_scene, None):
        nominal = rollout(lift_scene, rec.states[0], rec.actions)
        assert np.abs(state_residual(lift_scene, nominal, rec.states)).max() > 0.02  # 0.2 mrad/mm


@pytest.mark.sim
def test_calibrate_recovers_hidden_parameters(recordings, tmp_path, capsys):
    from demofactory.cli.main import main
    from demofactory.specs.spec import load_spec

    out = tmp_path / "lift.calibrated.yaml"
    argv = ["calibrate", str(LIFT), "--recordings", *map(str, recordings), "--quiet"]
    argv += ["--params", "mass.cube=0.5,2", "kp=0.5,1.5", "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert '"fitted"' in printed
    spec = load_spec(out)  # a whole spec: lift.yaml extended with the fitted values, fixed
    assert spec.task.env == "Lift" and spec.physics.mass["cube"][0] == spec.physics.mass["cube"][1]
    fitted = {"mass.cube": spec.physics.mass["cube"][0], "kp": spec.physics.kp[0]}
    for name, truth in HIDDEN.items():
        assert abs(fitted[name] - truth) / truth < 0.05, (name, fitted[name])
    assert out.read_text().count("95 % CI [") == 2
    html = (tmp_path / "lift.calibrated.html").read_text()
    assert "mass.cube" in html and "Covariance" in html


def _refused(argv, capsys, *paths) -> str:
    from demofactory.cli.main import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ")
    for path in paths:
        assert not path.exists()
    return err


@pytest.mark.sim
def test_recording_of_another_env_is_refused(recordings, tmp_path, capsys):
    out = tmp_path / "frag.yaml"
    stack = DEMOS / "stack_panda_1demo_robosuite100.hdf5"
    argv = ["calibrate", str(LIFT), "--recordings", str(recordings[0]), str(stack)]
    err = _refused(
        [*argv, "--params", "kp", "--out", str(out)], capsys, out, out.with_suffix(".html")
    )
    assert str(stack) in err and "env" in err and "'Lift'" in err


@pytest.mark.sim
def test_recording_with_wrong_state_size_is_refused(recordings, tmp_path, capsys):
    from demofactory.robustness.calibrate import save_recordings

    with h5py.File(recordings[0]) as f:
        states, actions = f["data/demo_1/states"][()], f["data/demo_1/actions"][()]
    wide = tmp_path / "wide.hdf5"
    save_recordings(wide, "Lift", [(np.hstack([states, states[:, :5]]), actions)])
    out = tmp_path / "frag.yaml"
    argv = ["calibrate", str(LIFT), "--recordings", str(wide), "--params", "kp", "--out", str(out)]
    err = _refused(argv, capsys, out, out.with_suffix(".html"))
    assert f"{wide}: data/demo_1/states: 37 columns, expected 32" in err


@pytest.mark.sim
def test_lerobot_folder_and_bad_params_are_refused(recordings, tmp_path, capsys):
    out = tmp_path / "frag.yaml"
    argv = ["calibrate", str(LIFT), "--recordings", str(tmp_path), "--params", "kp"]
    err = _refused([*argv, "--out", str(out)], capsys, out)
    assert "LeRobot" in err and "data/demo_N/states" in err
    argv = ["calibrate", str(LIFT), "--recordings", str(recordings[0]), "--params"]
    err = _refused([*argv, "mass.plate", "--out", str(out)], capsys, out)
    assert "--params mass.plate" in err and "cube" in err


@pytest.mark.parametrize(
    "token, expected",
    [
        ("inertia.cube", "unknown parameter 'inertia'"),
        ("kp.arm", "kp takes no target"),
        ("mass", "mass takes a target"),
        ("kp=2,3", "expected 0 < LO <= 1 <= HI"),
        ("delay=1,x", "expected bounds LO,HI"),
    ],
)
def test_parse_params_names_the_token(token, expected):
    from demofactory.robustness.calibrate import parse_params

    with pytest.raises(UserError, match=expected):
        parse_params([token])


def test_delayed_actions_blend_neighbours():
    from demofactory.robustness.calibrate import delayed_actions

    actions = np.arange(1.0, 6.0)[:, None]  # before the first command arrives: zeros (hold)
    np.testing.assert_allclose(delayed_actions(actions, 0.0)[:, 0], [1, 2, 3, 4, 5])
    np.testing.assert_allclose(delayed_actions(actions, 1.0)[:, 0], [0, 1, 2, 3, 4])
    np.testing.assert_allclose(delayed_actions(actions, 0.5)[:, 0], [0.5, 1.5, 2.5, 3.5, 4.5])
    np.testing.assert_allclose(delayed_actions(actions, 2.5)[:, 0], [0, 0, 0.5, 1.5, 2.5])
