"""Seed demo files: the shipped robosuite recordings and robomimic files written here with h5py."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
from demofactory.errors import UserError
from demofactory.seeds.demos import load_seed_demos

DEMOS = Path(__file__).parents[2] / "scene_specs" / "demos"


@pytest.mark.parametrize(
    ("filename", "env_name", "lengths", "state_size"),
    [
        ("lift_panda_4demos_robosuite141.hdf5", "Lift", [226, 1143, 285, 296], 32),
        ("lift_panda_1demo_robosuite100.hdf5", "Lift", [412], 32),
        ("stack_panda_1demo_robosuite100.hdf5", "Stack", [532], 45),
        ("nut_assembly_panda_1demo_robosuite100.hdf5", "NutAssembly", [1036], 45),
        ("pick_place_panda_1demo_robosuite100.hdf5", "PickPlace", [1482], 71),
    ],
)
def test_shipped_robosuite_files_load(filename, env_name, lengths, state_size):
    path = DEMOS / filename
    demos = load_seed_demos(path)
    assert [d.name for d in demos] == [f"demo_{i}" for i in range(1, len(lengths) + 1)]
    assert [d.length for d in demos] == lengths
    for demo in demos:
        assert demo.env_name == env_name
        assert demo.source == path
        assert demo.label == f"{filename}:{demo.name}"
        assert demo.states.shape == (demo.length, state_size)
        assert demo.actions.shape == (demo.length, 7)
        assert demo.states.dtype == demo.actions.dtype == np.float64
        # OSC_POSE deltas are normalized to [-1, 1].
        assert np.abs(demo.actions).max() <= 1.0


def _write_robomimic(
    path: Path, demos: dict[str, tuple[np.ndarray, np.ndarray]], env_name="Lift"
) -> None:
    """A robomimic-format file: env_args JSON, data/demo_N/{states, actions, obs/*}, mask/."""
    with h5py.File(path, "w") as f:
        data = f.create_group("data")
        data.attrs["env_args"] = json.dumps({"env_name": env_name, "type": 1, "env_kwargs": {}})
        data.attrs["total"] = sum(len(a) for _, a in demos.values())
        for name, (states, actions) in demos.items():
            group = data.create_group(name)
            group.attrs["num_samples"] = len(actions)
            group.create_dataset("states", data=states)
            group.create_dataset("actions", data=actions)
            group.create_dataset("rewards", data=np.zeros(len(actions)))
            group.create_dataset("dones", data=np.zeros(len(actions), dtype=np.int64))
            obs = group.create_group("obs")
            obs.create_dataset("robot0_eef_pos", data=np.zeros((len(actions), 3), dtype=np.float32))
            obs.create_dataset(
                "agentview_image", data=np.zeros((len(actions), 4, 4, 3), dtype=np.uint8)
            )
        mask = f.create_group("mask")
        mask.create_dataset("train", data=np.array([n.encode() for n in demos]))


def _arrays(
    rng: np.random.Generator, steps: int, state_size: int = 32
) -> tuple[np.ndarray, np.ndarray]:
    return rng.normal(size=(steps, state_size)), rng.uniform(-1, 1, size=(steps, 7))


def test_robomimic_file_reads_back_exactly(tmp_path):
    rng = np.random.default_rng(0)
    written = {"demo_0": _arrays(rng, 5), "demo_1": _arrays(rng, 9)}
    path = tmp_path / "robomimic.hdf5"
    _write_robomimic(path, written)

    demos = load_seed_demos(path)

    assert [d.name for d in demos] == ["demo_0", "demo_1"]
    for demo in demos:
        states, actions = written[demo.name]
        assert demo.env_name == "Lift"
        assert demo.source == path
        np.testing.assert_array_equal(demo.states, states)
        np.testing.assert_array_equal(demo.actions, actions)


def test_float32_arrays_are_widened_to_float64(tmp_path):
    rng = np.random.default_rng(1)
    states, actions = (a.astype(np.float32) for a in _arrays(rng, 4))
    path = tmp_path / "f32.hdf5"
    _write_robomimic(path, {"demo_0": (states, actions)})
    (demo,) = load_seed_demos(path)
    assert demo.states.dtype == demo.actions.dtype == np.float64
    np.testing.assert_array_equal(demo.states, states.astype(np.float64))


def test_demos_come_in_numeric_order(tmp_path):
    rng = np.random.default_rng(2)
    names = ["demo_10", "demo_2", "demo_1", "demo_33", "demo_9"]
    written = {name: _arrays(rng, 3 + i) for i, name in enumerate(names)}
    path = tmp_path / "many.hdf5"
    _write_robomimic(path, written)

    demos = load_seed_demos(path)

    assert [d.name for d in demos] == ["demo_1", "demo_2", "demo_9", "demo_10", "demo_33"]
    for demo in demos:  # each name still carries its own data
        np.testing.assert_array_equal(demo.states, written[demo.name][0])


def test_env_name_is_empty_when_the_file_does_not_say(tmp_path):
    path = tmp_path / "bare.hdf5"
    with h5py.File(path, "w") as f:
        group = f.create_group("data/demo_0")
        group.create_dataset("states", data=np.zeros((3, 32)))
        group.create_dataset("actions", data=np.zeros((3, 7)))
    (demo,) = load_seed_demos(path)
    assert demo.env_name == ""


# --- files a user might point seed_demos at by mistake -------------------------------


def test_missing_file(tmp_path):
    path = tmp_path / "absent.hdf5"
    with pytest.raises(UserError, match="not found") as info:
        load_seed_demos(path)
    assert str(path) in str(info.value)


def test_not_hdf5(tmp_path):
    path = tmp_path / "demo.hdf5"
    path.write_text("this is a text file, not hdf5\n")
    with pytest.raises(UserError, match="not a readable hdf5 file") as info:
        load_seed_demos(path)
    assert str(info.value).startswith(f"{path}: ")


def test_no_data_group(tmp_path):
    path = tmp_path / "nodata.hdf5"
    with h5py.File(path, "w") as f:
        f.create_dataset("states", data=np.zeros((3, 32)))
    with pytest.raises(UserError, match="expected a group 'data'") as info:
        load_seed_demos(path)
    assert str(info.value).startswith(f"{path}: ")


def test_no_demo_groups(tmp_path):
    path = tmp_path / "empty.hdf5"
    with h5py.File(path, "w") as f:
        f.create_group("data")
    with pytest.raises(UserError, match="no demo_N groups") as info:
        load_seed_demos(path)
    assert str(info.value).startswith(f"{path}: ")


def test_missing_states(tmp_path):
    path = tmp_path / "nostates.hdf5"
    rng = np.random.default_rng(3)
    _write_robomimic(path, {"demo_0": _arrays(rng, 4)})
    with h5py.File(path, "a") as f:
        del f["data/demo_0/states"]
    with pytest.raises(UserError) as info:
        load_seed_demos(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert "data/demo_0" in message and "'states'" in message


def test_states_and_actions_of_different_lengths(tmp_path):
    path = tmp_path / "ragged.hdf5"
    rng = np.random.default_rng(4)
    states, actions = _arrays(rng, 6)
    _write_robomimic(path, {"demo_0": _arrays(rng, 4), "demo_1": (states, actions[:5])})
    with pytest.raises(UserError) as info:
        load_seed_demos(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert "data/demo_1" in message
    assert "(6, 32)" in message and "(5, 7)" in message


def test_non_finite_states(tmp_path):
    path = tmp_path / "nan.hdf5"
    rng = np.random.default_rng(5)
    states, actions = _arrays(rng, 4)
    states[2, 3] = np.nan
    _write_robomimic(path, {"demo_0": (states, actions)})
    with pytest.raises(UserError, match="NaN") as info:
        load_seed_demos(path)
    assert str(info.value).startswith(f"{path}: data/demo_0")
