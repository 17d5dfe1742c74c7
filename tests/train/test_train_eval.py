"""`factory seeds` and `factory train-eval` on real data: the Lift seed demos written as a dataset,
read back through the streaming loader, a few training steps, one short real rollout."""

from __future__ import annotations

import json

import demofactory  # noqa: F401  (selects the GL backend before robosuite)
import numpy as np
import pytest
import torch
from demofactory.build.seed_dataset import write_seed_dataset
from demofactory.cli.main import main
from demofactory.errors import UserError
from demofactory.generators.mimicgen import attempt_seed
from demofactory.seeds.resolve import Resolved, resolve_spec
from demofactory.shards import load_episodes, load_manifest
from demofactory.shards.loader import make_loader
from demofactory.shards.verify import verify_dataset
from demofactory.specs.spec import load_spec
from demofactory.train.config import TrainEvalConfig
from demofactory.train.core import eval_seed, idle_steps, load_training_data
from demofactory.train.policy import (
    ChunkPolicy,
    ensemble,
    finalize_action,
    make_obs_layout,
    make_observation,
    masked_l1,
)
from demofactory.train.train_eval import train_eval

from tests.conftest import SPECS, write_spec


@pytest.fixture(scope="module")
def lowdim_spec(tmp_path_factory):
    return write_spec(tmp_path_factory.mktemp("spec") / "lift_lowdim.yaml", base="lift_lowdim.yaml")


@pytest.fixture(scope="module")
def resolved(lowdim_spec):
    return resolve_spec(load_spec(lowdim_spec))


@pytest.fixture(scope="module")
def seeds_dataset(tmp_path_factory, lowdim_spec):
    out = tmp_path_factory.mktemp("data") / "lift_seeds"
    assert main(["seeds", str(lowdim_spec), "--out", str(out)]) == 0
    return out


def test_seeds_dataset_holds_the_demos_and_verifies(seeds_dataset, resolved):
    assert verify_dataset(seeds_dataset) == []
    records = load_episodes(seeds_dataset)
    assert [r.length for r in records] == [d.demo.length for d in resolved.demos]
    assert load_manifest(seeds_dataset).total_samples == sum(d.demo.length for d in resolved.demos)
    # Through the loader: the extra key holds the recorded MuJoCo states, the actions the human's.
    items = list(
        make_loader(seeds_dataset, action_horizon=4, normalization="none", extra_keys=["sim_state"])
    )
    first = resolved.demos[0].demo
    steps = [it for it in items if it["episode"] == 0]
    assert len(steps) == first.length
    assert steps[5]["sim_state"].dtype == torch.float64 and steps[5]["sim_state"].shape == (
        resolved.scene.state_size,
    )
    np.testing.assert_allclose(steps[5]["sim_state"].numpy()[1:], first.states[5][1:], atol=1e-12)
    np.testing.assert_allclose(steps[5]["action_chunk"][0].numpy(), first.actions[5], atol=1e-6)


def test_seeds_refuses_a_directory_holding_something_else(lowdim_spec, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    assert main(["seeds", str(lowdim_spec), "--out", str(tmp_path)]) == 2


@pytest.mark.parametrize(
    "extra, field",
    [
        ("task:\n  robots: [{robot: Panda, share: 1}, {robot: Sawyer, share: 1}]\n", "task.robots"),
        ("task:\n  robot: Sawyer\n", "task.robot"),  # the demos were recorded by the Panda
    ],
)
def test_seeds_refuses_another_robot_than_the_recording_one(extra, field, tmp_path, capsys):
    spec = tmp_path / "other_robot.yaml"
    spec.write_text(f"extends: {SPECS / 'lift_lowdim.yaml'}\nname: other_robot\n{extra}")
    assert main(["seeds", str(spec), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{field}:" in err[0] and "as recorded" in err[0], err
    assert not (tmp_path / "out").exists()  # nothing written


def test_seeds_refuses_demos_of_several_robots_and_says_so_first(tmp_path, capsys):
    """Demo files of two robots: no task.robot fits them all, and the message says why; it
    comes before the output folder is looked at (here one holding something else)."""
    import shutil

    import h5py

    panda = SPECS / "demos" / "lift_panda_4demos_robosuite141.hdf5"
    sawyer = tmp_path / "sawyer.hdf5"
    shutil.copy(panda, sawyer)
    with h5py.File(sawyer, "r+") as f:
        f["data"].attrs["env_info"] = json.dumps({"robots": "Sawyer"})
    spec = tmp_path / "two_robots.yaml"
    spec.write_text(
        f"extends: {SPECS / 'lift_lowdim.yaml'}\nname: two_robots\n"
        f"seed_demos: [{panda}, {sawyer}]\n"
    )
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("kept")
    assert main(["seeds", str(spec), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "seed_demos:" in err[0] and "Panda, Sawyer" in err[0], err
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["mine.txt"]


def test_loader_refuses_extra_keys_that_clash():
    with pytest.raises(ValueError, match="clash"):
        from demofactory.shards.loader import LoaderConfig

        LoaderConfig(cameras=None, extra_keys=("state",))


def test_observation_matches_the_scene(resolved):
    scene = resolved.scene
    layout = make_obs_layout(scene.model, scene.bodies)
    scene.set_state(resolved.demos[0].demo.states[40])
    obs = make_observation(scene.proprio(), scene.get_state(), layout)
    assert obs.shape == (layout.dim,) == (19,) and len(layout.names()) == layout.dim
    cube = scene.object_pose("cube")
    np.testing.assert_allclose(obs[9:12], cube[:3, 3], atol=1e-6)
    np.testing.assert_allclose(obs[16:19], cube[:3, 3] - scene.eef_pose()[:3, 3], atol=1e-6)
    assert obs[12] >= 0  # quaternion sign fixed: w >= 0
    batch = make_observation(
        np.stack([scene.proprio()] * 3), np.stack([scene.get_state()] * 3), layout
    )
    assert batch.shape == (3, layout.dim)
    timed = make_obs_layout(scene.model, scene.bodies, time_scale=0.01)
    with_time = make_observation(
        np.stack([scene.proprio()] * 2), np.stack([scene.get_state()] * 2), timed, np.array([0, 50])
    )
    assert timed.dim == 20 and timed.names()[-1] == "time"
    np.testing.assert_allclose(with_time[:, -1], [0.0, 0.5])
    np.testing.assert_array_equal(with_time[:, :-1], batch[:2])
    with pytest.raises(ValueError, match="step"):
        make_observation(scene.proprio(), scene.get_state(), timed)


def test_eval_seeds_are_their_own_namespace():
    seeds = [eval_seed(0, i) for i in range(200)]
    assert seeds == [eval_seed(0, i) for i in range(200)] and len(set(seeds)) == 200
    generation = {
        attempt_seed(0, shard, a) for shard in range(20) for a in range(shard * 10, shard * 10 + 10)
    }
    assert not generation & set(seeds)
    assert eval_seed(1, 0) != eval_seed(0, 0)


def test_action_post_processing():
    out = finalize_action(np.array([2.0, -3.0, 0.1, 0, 0, 0, 0.2]))
    np.testing.assert_array_equal(out, [1.0, -1.0, 0.1, 0, 0, 0, 1.0])
    assert finalize_action(np.array([0, 0, 0, 0, 0, 0, -0.01]))[-1] == -1.0
    old, new = np.zeros((4, 7)), np.ones((4, 7))
    mixed = ensemble([(0, old), (2, new)], t=3, decay=0.0)  # both cover step 3: equal weights
    np.testing.assert_allclose(mixed, 0.5)
    # only the first covers it
    np.testing.assert_allclose(ensemble([(0, old), (2, new)], t=1, decay=0.0), 0.0)


def test_training_data_shapes_and_masked_loss(seeds_dataset, resolved):
    scene = resolved.scene
    layout = make_obs_layout(scene.model, scene.bodies)
    data = load_training_data(seeds_dataset, layout, horizon=8)
    total = sum(d.demo.length for d in resolved.demos)
    assert data.obs.shape == (total, layout.dim) and data.chunks.shape == (total, 8, 7)
    assert data.masks.shape == (total, 8) and data.masks[:, 0].all() and not data.masks.all()
    assert len(data.episodes) == len(resolved.demos)
    assert (np.diff(data.episode) != 0).sum() == len(
        resolved.demos
    ) - 1  # each episode's steps adjacent
    idle = idle_steps(data, window=8, distance=0.005)
    # Lift's demo_2 waits ~900 steps before it moves: those steps are idle, the moving ones are not.
    demo2 = data.episode == data.episodes[1]
    assert idle[demo2][:800].mean() > 0.9 and idle.mean() < 0.9
    moving = np.linalg.norm(data.obs[8:, :3] - data.obs[:-8, :3], axis=1) > 0.02
    assert not (idle[:-8] & moving & (data.episode[8:] == data.episode[:-8])).any()
    policy = ChunkPolicy(layout.dim, horizon=8, hidden=32, layers=2)
    pred = policy(torch.zeros(5, layout.dim))
    assert pred.shape == (5, 8, 7)
    target, mask = pred.detach() + 1.0, torch.zeros(5, 8, dtype=torch.bool)
    mask[:, 0] = True
    assert masked_l1(pred, target, mask).item() == pytest.approx(1.0)


def test_train_eval_smoke(seeds_dataset, resolved, tmp_path):
    config = TrainEvalConfig(
        horizon=8,
        execute=4,
        steps=80,
        batch_size=64,
        hidden=64,
        layers=2,
        rollouts=1,
        eval_horizon=30,
        lr=3e-3,
    )
    report = train_eval(seeds_dataset, resolved, config, save=tmp_path / "policy.pt")
    assert report["episodes"] == len(resolved.demos) and report["steps"] == sum(
        d.demo.length for d in resolved.demos
    )
    assert report["final_loss"] < report["first_loss"]  # it learns
    assert len(report["loss_curve"]) == 20 and report["loss_curve"][-1][0] == 80
    assert report["rollouts"] == 1 and len(report["per_rollout"]) == 1
    rollout = report["per_rollout"][0]
    assert rollout["seed"] == eval_seed(resolved.spec.seed, 0) and 1 <= rollout["steps"] <= 30
    assert (
        report["success_rate"] == float(rollout["success"])
        and report["eval_seeds_disjoint_from_dataset"]
    )
    assert (
        report["observation"]["dim"] == 20 and report["observation"]["names"][-1] == "time"
    )  # time_feature
    assert report["train_time_s"] > 0 and report["eval_time_s"] > 0
    assert report["steps_trained_on"] + report["idle_steps_dropped"] == report["steps"]
    assert report["idle_steps_dropped"] > 800  # demo_2's long wait
    json.dumps(report)  # the report is JSON as it stands
    saved = torch.load(tmp_path / "policy.pt")
    assert saved["config"]["horizon"] == 8


def test_cli_train_eval_reports_json_and_refuses_bad_flags(
    seeds_dataset, lowdim_spec, resolved, tmp_path, capsys
):
    out = tmp_path / "report.json"
    args = [
        "train-eval",
        str(seeds_dataset),
        "--spec",
        str(lowdim_spec),
        "--steps",
        "5",
        "--rollouts",
        "1",
        "--eval-horizon",
        "3",
        "--hidden",
        "16",
        "--quiet",
        "--out",
        str(out),
    ]
    assert main(args) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out.read_text()) and printed["train_steps"] == 5
    assert (
        main(args[:-2] + ["--temporal-ensemble", "0.1", "--no-time-feature"]) == 0
    )  # predict every step, average
    printed = json.loads(capsys.readouterr().out)
    assert printed["policy"]["temporal_ensemble"] == 0.1 and printed["observation"]["dim"] == 19
    assert main(args[:-2] + ["--execute", "99"]) == 2  # more than --horizon
    assert main(["train-eval", str(tmp_path), "--spec", str(lowdim_spec)]) == 2  # not a dataset
    assert "not a dataset" in capsys.readouterr().err
    with pytest.raises(UserError, match="execute"):
        train_eval(seeds_dataset, resolved, TrainEvalConfig(horizon=2, execute=3))


@pytest.mark.sim
def test_train_eval_with_a_camera(tmp_path):
    """Images as an option: frames from the dataset through the loader, a CNN, rendered frames in
    rollouts."""
    spec_path = write_spec(
        tmp_path / "lift_cam.yaml",
        base="lift_lowdim.yaml",
        cameras=[{"name": "agentview", "width": 32, "height": 24}],
    )
    resolved = resolve_spec(load_spec(spec_path))
    # demo_1 only: 226 frames to render
    resolved = Resolved(resolved.spec, resolved.scene, resolved.demos[:1])
    out = tmp_path / "seeds"
    write_seed_dataset(resolved, out)
    config = TrainEvalConfig(
        horizon=4,
        execute=4,
        steps=80,
        batch_size=64,
        hidden=64,
        layers=2,
        rollouts=1,
        eval_horizon=6,
        camera="agentview",
        lr=3e-3,
    )
    report = train_eval(out, resolved, config)
    assert report["observation"]["kind"] == "low_dim+agentview" and report["observation"][
        "image_shape"
    ] == [3, 24, 32]
    assert report["final_loss"] < report["first_loss"] and report["per_rollout"][0]["steps"] <= 6
    with pytest.raises(UserError, match="no such camera"):
        train_eval(out, resolved, config.model_copy(update={"camera": "birdview"}))


def test_training_data_with_sensor_noise(seeds_dataset, resolved):
    # --sensor-noise reaches the loader: with latency 3 each observation is the one 3 steps
    # earlier in its episode (clamped at the start), the action chunks those of step t.
    layout = make_obs_layout(resolved.scene.model, resolved.scene.bodies)
    plain = load_training_data(seeds_dataset, layout, horizon=4)
    late = load_training_data(seeds_dataset, layout, horizon=4, sensor_noise='{"latency": 3}')
    np.testing.assert_array_equal(late.chunks, plain.chunks)
    ids, first = np.unique(plain.episode, return_index=True)  # an episode's steps are adjacent
    starts = first[np.searchsorted(ids, plain.episode)]
    seen = np.maximum(np.arange(len(plain.obs)) - 3, starts)
    np.testing.assert_array_equal(late.obs, plain.obs[seen])
    with pytest.raises(UserError, match=r"--sensor-noise: .*state_std has 2 entries.* has 9"):
        load_training_data(seeds_dataset, layout, horizon=4, sensor_noise='{"state_std": [1, 2]}')
