"""`factory seeds` and `factory train-eval` on a two-arm task (TwoArmLift, a Panda pair): both
arms' proprio and the pot's pose relative to each hand as the observation, 14-wide action chunks,
rollouts in a `TwoArmScene`. The dataset is a tiny real one, made by `factory run`."""

from __future__ import annotations

import json

import demofactory  # noqa: F401  (selects the GL backend before robosuite)
import numpy as np
import pytest
from demofactory.cli.main import main
from demofactory.shards import load_episodes
from demofactory.shards.verify import verify_dataset
from demofactory.train.core import TrainingData, eval_seed, idle_steps
from demofactory.train.policy import (
    ObsLayout,
    finalize_action,
    make_observation,
)

from tests.conftest import write_spec

# ---------------------------------------------------------------- pure: no env


def test_a_two_arm_observation_has_both_arms_and_the_object_relative_to_each_hand():
    layout = ObsLayout(("pot",), (4,), time_scale=0.01, arms=("right", "left"))
    proprio = np.arange(18, dtype=np.float64)  # right eef at (0, 1, 2), left eef at (9, 10, 11)
    state = np.zeros(1 + 11)
    state[5:8] = [1.0, 2.0, 3.0]  # the pot's free joint at qpos 4: position
    state[8:12] = [-1.0, 0.0, 0.0, 0.0]  # quaternion with w < 0: flipped to w >= 0
    obs = make_observation(proprio, state, layout, 50)
    assert obs.shape == (layout.dim,) == (18 + 3 + 4 + 3 + 3 + 1,)
    names = layout.names()
    assert len(names) == layout.dim and names[9] == "left.proprio[0]"
    np.testing.assert_allclose(obs[:18], proprio)
    np.testing.assert_allclose(obs[18:21], [1, 2, 3])
    np.testing.assert_allclose(obs[21:25], [1, 0, 0, 0])
    i = names.index("pot.rel_right_eef.x")
    np.testing.assert_allclose(obs[i : i + 3], [1 - 0, 2 - 1, 3 - 2])
    i = names.index("pot.rel_left_eef.x")
    np.testing.assert_allclose(obs[i : i + 3], [1 - 9, 2 - 10, 3 - 11])
    assert obs[-1] == pytest.approx(0.5) and names[-1] == "time"
    one_arm = ObsLayout(("pot",), (4,))  # unchanged: 9 + 10 per object
    assert one_arm.dim == 19 and "pot.rel_eef.x" in one_arm.names()


def test_each_arms_gripper_is_thresholded():
    raw = np.array([2.0, 0, 0, 0, 0, 0, 0.3, -2.0, 0, 0, 0, 0, 0.5, -0.2])
    out = finalize_action(raw)
    np.testing.assert_array_equal(out[[0, 6, 7, 12, 13]], [1.0, 1.0, -1.0, 0.5, -1.0])


def test_a_step_is_idle_only_when_both_arms_rest():
    # one episode of 20 steps: the right arm rests throughout, the left moves in steps 0..9
    n, obs = 20, np.zeros((20, 18), dtype=np.float32)
    obs[:10, 9] = np.linspace(0.0, 0.5, 10)
    obs[10:, 9] = 0.5
    chunks = -np.ones((n, 4, 14), dtype=np.float32)
    data = TrainingData(obs, chunks, np.ones((n, 4), bool), np.zeros(n, np.int64), (0,))
    idle = idle_steps(data, window=3, distance=0.005)
    assert not idle[:9].any() and idle[10:].all()
    chunks[12:, 0, 13] = 1.0  # the left hand closes at step 12: steps 9..11 see it change
    idle = idle_steps(TrainingData(obs, chunks, data.masks, data.episode, (0,)), 3, 0.005)
    assert not idle[9:12].any() and idle[12:].all()


# ---------------------------------------------------------------- through the CLI, on real data


@pytest.fixture(scope="module")
def two_arm_spec(tmp_path_factory):
    return write_spec(
        tmp_path_factory.mktemp("spec") / "two_arm_lift.yaml",
        base="two_arm_lift.yaml",
        generation={"attempts": 2, "attempts_per_shard": 1},
    )


@pytest.fixture(scope="module")
def two_arm_dataset(tmp_path_factory, two_arm_spec):
    out = tmp_path_factory.mktemp("data") / "two_arm_lift"
    assert (
        main(["run", str(two_arm_spec), "--out", str(out), "--workers", "1", "--no-progress"]) == 0
    )
    return out


@pytest.fixture(scope="module")
def two_arm_seeds(tmp_path_factory, two_arm_spec):
    """The 3 scripted seed demos as a dataset, through `factory seeds`; (path, its summary)."""
    import contextlib
    import io

    out = tmp_path_factory.mktemp("data") / "two_arm_lift-seeds"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["seeds", str(two_arm_spec), "--out", str(out)]) == 0
    return out, json.loads(printed.getvalue())


@pytest.mark.sim
def test_seeds_writes_the_two_arm_demos(two_arm_seeds):
    out, summary = two_arm_seeds
    assert summary["episodes"] == 3 and summary["steps"] == 3 * 145
    assert verify_dataset(out) == []
    info = json.loads((out / "dataset_info.json").read_text())
    assert info["source"] == "seed_demos" and info["state"]["dim"] == 18
    assert info["action"]["dim"] == 14 and info["embodiments"]["Panda"]["arms"] == ["right", "left"]


@pytest.mark.sim
@pytest.mark.ray
@pytest.mark.slow  # two generation attempts through a local Ray worker, then two rollouts
def test_train_eval_on_a_two_arm_dataset(
    two_arm_dataset, two_arm_spec, tmp_path, capsys, monkeypatch
):
    from demofactory.simulation.bimanual import TwoArmScene

    widths = []
    step = TwoArmScene.step

    def counted(self, action):  # every rollout step goes through the two-arm scene
        widths.append(np.asarray(action).shape[-1])
        return step(self, action)

    monkeypatch.setattr(TwoArmScene, "step", counted)
    out = tmp_path / "report.json"
    args = ["train-eval", str(two_arm_dataset), "--spec", str(two_arm_spec)]
    small = ["--steps", "20", "--rollouts", "2", "--eval-horizon", "40", "--hidden", "32"]
    assert main([*args, *small, "--quiet", "--out", str(out)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report == json.loads(out.read_text())
    assert report["env"] == "TwoArmLift" and report["arms"] == ["right", "left"]
    assert report["action_dim"] == 14 and report["dataset_source"] == "generated"
    assert report["observation"]["dim"] == 18 + 3 + 4 + 3 * 2 + 1  # proprio, pot, time
    assert report["observation"]["names"][9] == "left.proprio[0]"
    episodes = load_episodes(two_arm_dataset)
    assert report["episodes"] == len(episodes) >= 1
    assert report["steps"] == sum(e.length for e in episodes)
    assert report["rollouts"] == 2 and report["train_steps"] == 20
    seeds = [r["seed"] for r in report["per_rollout"]]
    spec_seed = json.loads((two_arm_dataset / "dataset_info.json").read_text())["spec"]["seed"]
    assert seeds == [eval_seed(spec_seed, i) for i in range(2)]
    assert report["eval_seeds_disjoint_from_dataset"] is True
    assert not {e.seed for e in episodes} & set(seeds)
    for rollout in report["per_rollout"]:
        assert 1 <= rollout["steps"] <= 40 and set(rollout["placement"]) == {"pot"}
        assert all(label.split(":")[0] in ("right", "left") for label in rollout["reached"])
    assert widths == [14] * sum(r["steps"] for r in report["per_rollout"])


@pytest.mark.sim
@pytest.mark.parametrize(
    "flag",
    [
        ["--camera", "agentview"],
        ["--policy", "vla"],
        ["--eval-physics", "{physics: {kp: 0.6}}"],
        ["--embodiment", "Panda"],
    ],
)
def test_flags_a_two_arm_task_does_not_take_are_one_line(flag, two_arm_spec, two_arm_seeds, capsys):
    seeds, _ = two_arm_seeds
    assert main(["train-eval", str(seeds), "--spec", str(two_arm_spec), *flag, "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag[0] in err[0] and "two-arm" in err[0], err


@pytest.mark.sim
def test_a_two_arm_dataset_with_a_one_arm_spec_is_one_line(two_arm_seeds, tmp_path, capsys):
    seeds, _ = two_arm_seeds
    one_arm = write_spec(tmp_path / "lift_lowdim.yaml", base="lift_lowdim.yaml")
    assert main(["train-eval", str(seeds), "--spec", str(one_arm), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--spec" in err[0] and "TwoArmLift" in err[0], err
