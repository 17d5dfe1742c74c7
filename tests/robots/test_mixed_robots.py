"""Mixed-robot datasets (`task.robots`, demofactory.robots.embodiments) and each gripper's closing
sign
(demofactory.robots.gripper_sign): the robot of each attempt, the spec's checks, and one real shard
of Panda
and Sawyer attempts carried through stats.json, the loader and the contact sheet."""

from __future__ import annotations

import io
import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from demofactory.errors import SpecError
from demofactory.robots.embodiments import GOLDEN, robot_for_attempt, robot_shares
from demofactory.specs.spec import load_spec

from tests.conftest import SPECS, write_spec

MIXED_EXAMPLE = ("Panda", "Sawyer", "IIWA")  # scene_specs/mixed/lift_mixed.yaml
PANDA_SAWYER = [{"robot": "Panda", "share": 1}, {"robot": "Sawyer", "share": 1}]


# --- which robot runs an attempt (pure) ------------------------------------------------------


def test_each_attempt_has_one_robot_and_every_range_keeps_the_shares():
    shares = (("Panda", 0.5), ("Sawyer", 0.25), ("IIWA", 0.25))
    robots = [robot_for_attempt(shares, a) for a in range(2000)]
    assert robots == [robot_for_attempt(shares, a) for a in range(2000)]  # a pure function
    # by hand: frac(a * 0.618...) against the cumulative shares 0.5, 0.75, 1
    for a in (0, 1, 2, 3):
        u = (a * GOLDEN) % 1.0
        assert robots[a] == ("Panda" if u < 0.5 else "Sawyer" if u < 0.75 else "IIWA")
    for start, n in ((0, 40), (7, 100), (1234, 500)):  # any range of attempts, not only prefixes
        counts = Counter(robots[start : start + n])
        for robot, share in shares:
            assert abs(counts[robot] - share * n) <= 2, (start, n, counts)


def test_shares_are_weights_normalised_to_their_sum(tmp_path):
    spec = load_spec(
        write_spec(
            tmp_path / "s.yaml",
            task={"robots": [{"robot": "Sawyer", "share": 3}, {"robot": "Panda", "share": 1}]},
        )
    )
    assert robot_shares(spec.task) == (("Sawyer", 0.75), ("Panda", 0.25))
    assert spec.task.robot == "Panda"  # lift.yaml's robot: one of the list, so kept
    single = load_spec(write_spec(tmp_path / "one.yaml", task={"robot": "Sawyer"}))
    assert robot_shares(single.task) == (("Sawyer", 1.0),)


def test_the_example_spec_mixes_three_robots_from_the_panda_demos():
    spec = load_spec(SPECS / "mixed/lift_mixed.yaml")
    assert robot_shares(spec.task) == tuple((r, pytest.approx(1 / 3)) for r in MIXED_EXAMPLE)
    assert all(spec.resolve_path(p).is_file() for p in spec.seed_demos)


@pytest.mark.parametrize(
    "robots, fragment",
    [
        ([{"robot": "Sawyer", "share": 1}, {"robot": "IIWA", "share": 1}], "not among task.robots"),
        ([{"robot": "Panda", "share": 1}, {"robot": "Panda", "share": 2}], "more than once"),
        ([{"robot": "Panda", "share": 0}], "greater than 0"),
        ([{"robot": "Panda", "share": 2e6}, {"robot": "Sawyer", "share": 1}], "less than"),
        ([{"robot": "Panda", "share": True}], "valid number"),
        ([{"robot": "Pandaa", "share": 1}], "misspelt"),  # the inherited Panda is not listed
        ([], "at least one robot"),
    ],
)
def test_a_bad_robots_list_names_the_file_and_field(tmp_path, robots, fragment):
    path = write_spec(tmp_path / "bad.yaml", task={"env": "Lift", "robot": "Panda"})
    data = path.read_text().replace("robot: Panda", f"robot: Panda\n  robots: {json.dumps(robots)}")
    path.write_text(data)
    with pytest.raises(SpecError) as err:
        load_spec(path)
    message = str(err.value)
    assert "bad.yaml" in message and "task" in message and fragment in message, message
    assert "\n" not in message.strip()


def test_task_robot_null_takes_the_first_of_the_list_and_bools_are_bools(tmp_path):
    robots = [{"robot": "Sawyer", "share": 1}, {"robot": "IIWA", "share": 1}]
    path = write_spec(tmp_path / "s.yaml", task={"env": "Lift", "robot": None, "robots": robots})
    assert load_spec(path).task.robot == "Sawyer"
    for value in ("yes", 1):  # YAML's own true/false only, not strings or numbers
        bad = write_spec(tmp_path / "b.yaml", task={"env": "Lift", "fast_control": value})
        with pytest.raises(SpecError, match="task.fast_control"):
            load_spec(bad)


@pytest.mark.sim
def test_an_unknown_robot_in_the_list_is_one_line_naming_its_index(tmp_path):
    from demofactory.seeds.resolve import resolve_spec

    robots = [{"robot": "Panda", "share": 1}, {"robot": "Baxter", "share": 1}]
    with pytest.raises(SpecError) as err:
        resolve_spec(load_spec(write_spec(tmp_path / "s.yaml", task={"robots": robots})))
    message = str(err.value)
    assert "s.yaml" in message and "task.robots[1].robot" in message and "Baxter" in message
    assert "Sawyer" in message and "\n" not in message  # the robots that work, one line


# --- the closing sign and the pad gap, measured -------------------------------------------------


def test_a_hand_of_the_other_sign_gets_its_gripper_column_flipped():
    from demofactory.generators.records import AnnotatedDemo, SeedDemo
    from demofactory.seeds.cross_robot import flip_gripper

    actions = np.zeros((3, 7))
    actions[:, -1] = [-1.0, 1.0, 1.0]
    seed = SeedDemo("d", Path("d.hdf5"), "Lift", np.zeros((3, 5)), actions)
    demo = AnnotatedDemo(
        demo=seed, eef_poses=np.zeros((3, 4, 4)), object_poses={}, gripper=actions[:, -1].copy(),
        subtask_ends=(3,),
    )  # fmt: skip
    assert flip_gripper(demo, 1) is demo
    flipped = flip_gripper(demo, -1)
    np.testing.assert_array_equal(flipped.gripper, [1.0, -1.0, -1.0])
    np.testing.assert_array_equal(flipped.demo.actions[:, -1], [1.0, -1.0, -1.0])
    np.testing.assert_array_equal(flipped.demo.actions[:, :6], actions[:, :6])
    np.testing.assert_array_equal(demo.gripper, [-1.0, 1.0, 1.0])  # the input is left alone


@pytest.mark.sim
def test_the_jaco_closes_on_plus_one_and_its_open_hand_reads_open(tmp_path):
    # robosuite's docstring says the Jaco's -1 opens, its code subtracts the command: measured at
    # the pads, +1 closes it. Its open hand's pads are ~3 cm apart at reset, where MuJoCo's
    # mj_geomDistance alone reads 0 for the index/thumb pair.
    from demofactory.robots.gripper_sign import measure_closing_sign, pad_gap
    from demofactory.simulation.scene import Scene

    scene = Scene(load_spec(write_spec(tmp_path / "j.yaml", task={"robot": "Jaco"}, cameras=[])))
    assert scene.gripper_sign == 1 == measure_closing_sign(scene)
    assert pad_gap(scene) > 0.01


# --- a real mixed shard: Panda and Sawyer ----------------------------------------------------


@pytest.fixture(scope="module")
def mixed_dataset(tmp_path_factory):
    """One shard of two attempts (attempt 0 on the Panda, 1 on the Sawyer), physics only,
    finished as `factory run` finishes a dataset (without Ray); and the resolved spec."""
    from demofactory.build.mixed_worker import MixedShardWorker
    from demofactory.build.recorder import DatasetRecorder
    from demofactory.build.records import ShardTask
    from demofactory.build.run import dataset_info
    from demofactory.seeds.resolve import resolve_spec
    from demofactory.shards import save_dataset_info, shards_dir

    root = tmp_path_factory.mktemp("mixed")
    spec = load_spec(
        write_spec(
            root / "mixed.yaml",
            name="mixed",
            task={"horizon": 600, "robots": PANDA_SAWYER},
            seed_demos=[str(SPECS / "demos/lift_panda_1demo_robosuite100.hdf5")],
            generation={"attempts": 2, "attempts_per_shard": 2},
            cameras=[],  # rendering would cost ~13 s an episode here; the names are checked below
        )
    )
    resolved = resolve_spec(spec)
    out = root / "out"
    shards_dir(out).mkdir(parents=True)
    save_dataset_info(out, dataset_info(spec, resolved.scene.state_size, resolved.robots))
    worker = MixedShardWorker(spec, resolved.worker_demos)
    try:
        result = worker.run_shard(ShardTask(0, (0, 1)), out)
    finally:
        worker.close()
    recorder = DatasetRecorder(out, {})
    recorder.record(result)
    recorder.finish(0.0)
    return out, result, resolved


@pytest.mark.sim
def test_a_mixed_shard_names_each_episodes_robot_everywhere(mixed_dataset):
    from demofactory.shards.tario import read_samples

    out, result, resolved = mixed_dataset
    assert result.successes == 2, result.failures
    robots = {e.index: e.provenance["embodiment"] for e in result.episodes}
    assert robots == {0: "Panda", 1: "Sawyer"}
    one_each = {"attempts": 1, "successes": 1}
    assert result.robots == {"Panda": one_each, "Sawyer": one_each}
    generation = json.loads((out / "generation.json").read_text())
    assert [s["robots"] for s in generation["shards"].values()] == [result.robots]
    from demofactory.build.report import format_summary, summarize

    summary = summarize(out)
    assert summary["robots"]["Sawyer"] == {**one_each, "success_rate": 1.0}
    assert "robot Sawyer" in format_summary(summary)
    lines = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    assert {x["index"]: x["provenance"]["embodiment"] for x in lines} == robots
    info = json.loads((out / "dataset_info.json").read_text())
    assert info["robot"] == "Panda+Sawyer"
    assert {r: e["id"] for r, e in info["embodiments"].items()} == {"Panda": 0, "Sawyer": 1}
    assert {e["state"]["dim"] for e in info["embodiments"].values()} == {info["state"]["dim"]}
    metas, states = {}, {}
    for sample in read_samples(out / "shards" / "shard-000000.tar"):
        meta = json.loads(sample.members["meta.json"])
        metas.setdefault(meta["episode"], set()).add(meta["embodiment"])
        states[meta["episode"]] = len(np.load(io.BytesIO(sample.members["state.npy"])))
    assert metas == {0: {"Panda"}, 1: {"Sawyer"}}
    assert set(states.values()) == {info["state"]["dim"]}
    # Part of every robot's model, under one name: a mixed dataset's image keys are the same.
    for robot in resolved.robots.values():
        assert {"agentview", "robot0_eye_in_hand"} <= set(robot.scene.camera_names())


@pytest.mark.sim
def test_stats_per_embodiment_match_the_steps_of_each_robot(mixed_dataset):
    from demofactory.shards.embodiment_stats import _tar_parts, embodiment_stats
    from demofactory.shards.stats import _key_stats, load_stats

    out, result, _ = mixed_dataset
    stats = load_stats(out)
    lengths = {e.provenance["embodiment"]: e.length for e in result.episodes}
    per_robot = stats.extra["embodiments"]
    assert {r: per_robot[r]["action"]["count"] for r in per_robot} == lengths
    assert stats.keys["action"].count == sum(lengths.values())  # the top level: every step
    # the sidecar's per-robot statistics equal those read back from the tar
    shard = out / "shards" / "shard-000000.tar"
    from_tar = {k: _key_stats(p) for k, p in _tar_parts(shard).items()}
    via_sidecar = embodiment_stats(out, {shard.name: result.info.sha256})
    for robot in lengths:
        assert via_sidecar[robot]["state"] == from_tar[f"state@{robot}"]


@pytest.mark.sim
def test_the_loader_filters_one_robot_and_normalises_each_with_its_own(mixed_dataset):
    from demofactory.shards.loader import make_loader

    out, result, _ = mixed_dataset
    lengths = {e.provenance["embodiment"]: e.length for e in result.episodes}
    items = list(make_loader(out, action_horizon=2))
    assert Counter(int(i["embodiment_id"]) for i in items) == {
        0: lengths["Panda"],
        1: lengths["Sawyer"],
    }
    sawyer = list(make_loader(out, action_horizon=2, embodiment="Sawyer"))
    assert len(sawyer) == lengths["Sawyer"] and {int(i["embodiment_id"]) for i in sawyer} == {1}
    actions = np.stack([i["action_chunk"][0].numpy() for i in sawyer])
    np.testing.assert_allclose(actions[:, :6].mean(axis=0), 0.0, atol=1e-4)  # its own mean
    with pytest.raises(ValueError, match="UR5e.*Panda, Sawyer"):
        make_loader(out, embodiment="UR5e")


@pytest.mark.sim
def test_train_eval_trains_one_policy_on_both_robots_and_rolls_out_on_each(mixed_dataset):
    # The mixed path of `factory train-eval` (demofactory.train.mixed), at toy size: the figures
    # are benchmarks/bench_mixed_policy.py's; here, which episodes train and where it rolls out.
    from demofactory.errors import UserError
    from demofactory.train.config import TrainEvalConfig
    from demofactory.train.train_eval import train_eval

    out, result, resolved = mixed_dataset
    lengths = {e.provenance["embodiment"]: e.length for e in result.episodes}
    config = TrainEvalConfig(
        steps=10, batch_size=16, hidden=16, layers=1, rollouts=1, eval_horizon=4, drop_idle=False
    )
    report = train_eval(out, resolved, config)
    assert report["trained_on"] == ["Panda", "Sawyer"] == list(report["per_robot"])
    assert {r: v["steps_trained_on"] for r, v in report["per_robot"].items()} == lengths
    assert report["observation"]["dim"] == report["observation"]["proprio_width"] + 10 + 1 + 2
    rollouts = report["per_rollout"]
    assert [r["robot"] for r in rollouts] == ["Panda", "Sawyer"]
    assert rollouts[0]["placement"] == rollouts[1]["placement"]  # same seed, same placement
    own = train_eval(out, resolved, config.model_copy(update={"embodiment": "Sawyer"}))
    assert own["trained_on"] == ["Sawyer"] == list(own["per_robot"])
    assert own["steps_trained_on"] == lengths["Sawyer"]
    with pytest.raises(UserError, match="--embodiment UR5e.*Panda, Sawyer"):
        train_eval(out, resolved, config.model_copy(update={"embodiment": "UR5e"}))


@pytest.mark.sim
def test_the_contact_sheet_shows_each_robots_rows(mixed_dataset):
    from demofactory.build.contact_sheet import sheet_records
    from demofactory.shards import load_episodes

    out, _, _ = mixed_dataset
    records = load_episodes(out)
    rows = sheet_records(records, 2)
    assert [r.provenance["embodiment"] for r in rows] == ["Panda", "Sawyer"]
    assert replace(rows[0]) == records[0]


@pytest.mark.sim
def test_exports_carry_the_robots_and_robomimic_refuses_a_mix(mixed_dataset, tmp_path):
    from demofactory.shards.export_gr00t import export_gr00t
    from demofactory.shards.export_robomimic import export_robomimic
    from demofactory.shards.format import ExportError

    out, _, _ = mixed_dataset
    export_gr00t(out, tmp_path / "gr00t")
    info = json.loads((tmp_path / "gr00t/meta/info.json").read_text())
    assert info["robot_type"] == "Panda+Sawyer"
    lines = (tmp_path / "gr00t/meta/episodes.jsonl").read_text().splitlines()
    assert [json.loads(x)["demofactory_embodiment"] for x in lines] == ["Panda", "Sawyer"]
    with pytest.raises(ExportError, match="mixed-robot dataset .Panda, Sawyer."):
        export_robomimic(out, tmp_path / "r.hdf5")


def test_a_mixed_spec_gets_a_worker_per_robot_built_on_need(tmp_path):
    from demofactory.build.mixed_worker import MixedShardWorker
    from demofactory.build.worker_factory import ShardWorkerFactory

    spec = load_spec(write_spec(tmp_path / "m.yaml", task={"robots": PANDA_SAWYER}))
    worker = ShardWorkerFactory(spec)()
    assert isinstance(worker, MixedShardWorker) and worker.workers == {}  # no env yet


def test_both_shard_layouts_give_the_embodiment_in_every_steps_meta():
    from demofactory.shards.format import Episode
    from demofactory.shards.shard_layout import episode_members, expand_members
    from demofactory.shards.writer import _shard_members

    ep = Episode(
        index=3, shard=0, instruction="x", seed=5, actions=np.zeros((4, 7)),
        states=np.ones((4, 13)), sim_states=np.zeros((4, 3)), images={}, provenance={},
        embodiment="Sawyer",
    )  # fmt: skip
    steps = list(_shard_members([ep]))
    assert steps == list(expand_members(episode_members(ep), "shard"))  # byte for byte
    metas = [json.loads(data) for name, data in steps if name.endswith(".meta.json")]
    assert [m["embodiment"] for m in metas] == ["Sawyer"] * 4


@pytest.mark.sim
def test_validate_names_every_robot_and_each_ones_control_path(capsys):
    from demofactory.cli.main import main

    assert main(["validate", str(SPECS / "mixed/lift_mixed_lowdim.yaml")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "(Lift, Panda+Sawyer)" in lines[0] and "control: per robot, below" in lines[0]
    assert lines[1:3] == [
        "  Panda: control: fast (demofactory.simulation.fast_step)",
        "  Sawyer: control: fast (demofactory.simulation.fast_step)",
    ]
