"""`demofactory.shards.export_gr00t` on the tiny real datasets of test_exports: the GR00T LeRobot
(v2.1)
layout read back file by file with json, pyarrow and PyAV (not with gr00t or lerobot)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from demofactory.shards import DatasetError
from demofactory.shards.export_gr00t import export_gr00t
from demofactory.shards.export_lerobot import export_lerobot

from tests.shards.test_exports import (
    ACTION_LAYOUT,
    CAMERAS,
    FPS,
    LIFT,
    PICK,
    PSNR_BOUND,
    STATE_LAYOUT,
    _decode_video,
    _in_order,
    _non_empty,
    _unjpeg,
    dataset,  # noqa: F401  (the module fixture, shared)
    make_dataset,
    psnr,
)

# the fields and rotation types of gr00t/data/schema.py (NVIDIA/Isaac-GR00T)
SCHEMA_FIELDS = {"start", "end", "rotation_type", "absolute", "dtype", "range", "original_key"}
ROTATION_TYPES = {"axis_angle", "quaternion", "rotation_6d", "matrix"} | {
    f"euler_angles_{order}" for order in ("rpy", "ryp", "pry", "pyr", "yrp", "ypr")
}
PARAPHRASES = {7: ["grab the red cube", PICK, "grab the red cube"]}  # a repeat, and itself


@pytest.fixture(scope="module")
def gr00t(dataset, tmp_path_factory) -> tuple[Path, dict]:  # noqa: F811
    out = tmp_path_factory.mktemp("gr00t") / "out"
    return out, export_gr00t(dataset[0], out, embodiment="new_embodiment", chunk_size=2)


def _meta(out: Path, name: str):
    path = out / "meta" / name
    if name.endswith(".jsonl"):
        return [json.loads(line) for line in path.read_text().splitlines()]
    return json.loads(path.read_text())


def test_gr00t_layout_file_by_file(gr00t, dataset):  # noqa: F811
    out, summary = gr00t
    episodes = _in_order(dataset[1])
    expected = {f"meta/{name}" for name in ("info.json", "episodes.jsonl", "tasks.jsonl")}
    expected |= {"meta/stats.json", "meta/modality.json", "meta/episodes_stats.jsonl"}
    for n in range(len(episodes)):
        chunk = n // 2
        expected.add(f"data/chunk-{chunk:03d}/episode_{n:06d}.parquet")
        for camera in CAMERAS:
            expected.add(
                f"videos/chunk-{chunk:03d}/observation.images.{camera}/episode_{n:06d}.mp4"
            )
    found = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert found == expected
    assert summary["codebase_version"] == "v2.1" and summary["embodiment"] == "new_embodiment"
    assert (summary["episodes"], summary["frames"]) == (3, 16)
    assert not list(out.parent.glob(".out.tmp-*"))


def test_gr00t_info_is_v2_1(gr00t):
    out, _ = gr00t
    info = _meta(out, "info.json")
    assert info["codebase_version"] == "v2.1" and info["embodiment_tag"] == "new_embodiment"
    assert info["data_path"] == "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
    assert info["video_path"] == (
        "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
    )
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"]) == (3, 16, 2)
    assert (info["total_videos"], info["total_chunks"], info["chunks_size"]) == (6, 2, 2)
    assert info["fps"] == FPS and info["robot_type"] == "Panda"
    assert info["splits"] == {"train": "0:3"}
    features = info["features"]
    assert features["observation.state"]["shape"] == [9]
    assert features["observation.state"]["names"][:4] == ["eef_pos_0", "eef_pos_1", "eef_pos_2",
                                                          "eef_quat_wxyz_0"]  # fmt: skip
    assert features["timestamp"]["dtype"] == "float64"
    assert features["action"]["names"][-1] == "gripper" and features["action"]["shape"] == [7]
    assert features["annotation.human.task_description"]["dtype"] == "int64"
    for camera, (width, height) in CAMERAS.items():
        video = features[f"observation.images.{camera}"]
        assert video["dtype"] == "video" and video["shape"] == [height, width, 3]
        assert video["info"]["video.codec"] == "h264" and video["info"]["video.fps"] == FPS


def test_gr00t_modality_json_splits_the_layouts(gr00t):
    out, _ = gr00t
    modality = _meta(out, "modality.json")
    assert set(modality) == {"state", "action", "video", "annotation"}
    state_layout = [
        ("eef_quat_wxyz", n) if k == "eef_quat_xyzw" else (k, n) for k, n in STATE_LAYOUT
    ]
    for part, layout, dim in (("state", state_layout, 9), ("action", ACTION_LAYOUT, 7)):
        entries = modality[part]
        by_start = sorted(entries, key=lambda name: entries[name]["start"])
        assert by_start == [name for name, _ in layout]  # the file's keys are sorted
        covered = []
        for name, size in layout:
            entry = entries[name]
            assert entry["end"] - entry["start"] == size and entry["dtype"] == "float32"
            covered.extend(range(entry["start"], entry["end"]))
        assert covered == list(range(dim))  # exactly, in order, no overlap
    for entry in [*modality["state"].values(), *modality["action"].values()]:
        assert set(entry) <= SCHEMA_FIELDS  # GR00T's LeRobotStateActionMetadata
        assert entry.get("rotation_type", "axis_angle") in ROTATION_TYPES
    assert modality["state"]["eef_quat_wxyz"]["rotation_type"] == "quaternion"
    assert "rotation_type" not in modality["state"]["eef_pos"]
    action = modality["action"]
    assert action["delta_axis_angle"]["rotation_type"] == "axis_angle"
    assert [action[k]["absolute"] for k in ("delta_pos", "delta_axis_angle", "gripper")] == [
        False,
        False,
        True,
    ]
    assert modality["video"] == {c: {"original_key": f"observation.images.{c}"} for c in CAMERAS}
    assert modality["annotation"] == {"human.task_description": {}}


def test_gr00t_rows_equal_the_shards(gr00t, dataset):  # noqa: F811
    out, _ = gr00t
    tasks = {row["task"]: row["task_index"] for row in _meta(out, "tasks.jsonl")}
    first = 0
    for n, source in enumerate(_in_order(dataset[1])):
        table = pq.read_table(out / f"data/chunk-{n // 2:03d}/episode_{n:06d}.parquet")
        assert table.schema.field("observation.state").type == pa.list_(pa.float32())
        assert table.schema.field("action").type == pa.list_(pa.float32())
        assert table.schema.field("timestamp").type == pa.float64()
        for name in ("annotation.human.task_description", "task_index", "frame_index",
                     "episode_index", "index"):  # fmt: skip
            assert table.schema.field(name).type == pa.int64()
        states = np.array(table.column("observation.state").to_pylist(), dtype=np.float32)
        actions = np.array(table.column("action").to_pylist(), dtype=np.float32)
        # quaternion (state [3, 7)) scalar-first, the rest bit for bit
        wanted = source.states.astype(np.float32)
        keep = [0, 1, 2, 7, 8]
        assert states[:, keep].tobytes() == wanted[:, keep].tobytes()
        quat = states[:, 3:7]
        wxyz = wanted[:, 3:7][:, [3, 0, 1, 2]]
        sign = np.sign(np.einsum("ij,ij->i", quat, wxyz))
        assert np.all(sign != 0) and np.array_equal(quat, wxyz * sign[:, None])  # q or -q
        assert np.all(np.einsum("ij,ij->i", quat[1:], quat[:-1]) >= 0)  # no sign flip
        assert actions.tobytes() == source.actions.astype(np.float32).tobytes()
        steps = np.arange(source.length)
        assert table.column("frame_index").to_pylist() == steps.tolist()
        assert table.column("index").to_pylist() == (first + steps).tolist()
        assert table.column("episode_index").to_pylist() == [n] * source.length
        times = table.column("timestamp").to_numpy()
        np.testing.assert_array_equal(times, steps / FPS)
        assert np.array_equal(np.round(times * FPS).astype(int), steps)
        task = tasks[source.instruction]
        assert table.column("annotation.human.task_description").to_pylist() == [task] * len(steps)
        assert table.column("task_index").to_pylist() == [task] * source.length
        first += source.length


def test_gr00t_tasks_episodes_and_stats(gr00t, dataset):  # noqa: F811
    out, _ = gr00t
    assert _meta(out, "tasks.jsonl") == [
        {"task_index": 0, "task": LIFT},
        {"task_index": 1, "task": PICK},
    ]
    episodes = _meta(out, "episodes.jsonl")
    for n, (row, source) in enumerate(zip(episodes, _in_order(dataset[1]), strict=True)):
        assert row["episode_index"] == n and row["length"] == source.length
        assert row["tasks"] == [source.instruction]
        assert row["demofactory_episode_index"] == source.index
    stats = _meta(out, "stats.json")
    everything = [ep for ep in _in_order(dataset[1])]
    actions = np.concatenate([ep.actions for ep in everything]).astype(np.float32)
    states = np.concatenate([ep.states for ep in everything]).astype(np.float32)
    np.testing.assert_allclose(stats["action"]["mean"], actions.mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(stats["action"]["min"], actions.min(axis=0))
    np.testing.assert_allclose(stats["observation.state"]["max"][:3], states.max(axis=0)[:3])
    # global quantiles over all 16 frames, as GR00T's calculate_dataset_statistics computes them
    values = actions.astype(np.float64)
    np.testing.assert_allclose(stats["action"]["q01"], np.quantile(values, 0.01, axis=0))
    np.testing.assert_allclose(stats["action"]["q99"], np.quantile(values, 0.99, axis=0))
    for key in stats:  # GR00T's keys only (N1.5 slices every one per modality)
        assert set(stats[key]) == {"mean", "std", "min", "max", "q01", "q99"}
    assert "observation.images.hand" not in stats
    per_episode = _meta(out, "episodes_stats.jsonl")
    assert [row["episode_index"] for row in per_episode] == [0, 1, 2]
    for row, source in zip(per_episode, everything, strict=True):
        action = row["stats"]["action"]
        np.testing.assert_allclose(
            action["mean"], source.actions.astype(np.float32).mean(axis=0), rtol=1e-5
        )
        assert action["count"] == [source.length]
        assert row["stats"]["observation.images.hand"]["count"] == [source.length]


def test_gr00t_videos_hold_every_frame(gr00t, dataset):  # noqa: F811
    out, _ = gr00t
    for n, source in enumerate(_in_order(dataset[1])):
        for camera, (width, height) in CAMERAS.items():
            path = out / f"videos/chunk-{n // 2:03d}/observation.images.{camera}"
            frames = _decode_video(path / f"episode_{n:06d}.mp4")
            assert len(frames) == source.length
            for t, (time, image) in enumerate(frames):
                assert time == pytest.approx(t / FPS)
                assert image.shape == (height, width, 3)
                assert psnr(image, _unjpeg(source.images[camera][t])) > PSNR_BOUND


def _with_paraphrases(root: Path) -> Path:
    make_dataset(root)
    lines = [json.loads(line) for line in (root / "episodes.jsonl").read_text().splitlines()]
    for record in lines:
        record["provenance"]["paraphrases"] = PARAPHRASES.get(record["index"], [])
    (root / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return root


def test_lerobot_paraphrases_become_tasks(tmp_path):
    export_lerobot(_with_paraphrases(tmp_path / "tiny"), tmp_path / "out")
    out = tmp_path / "out"
    tasks = pq.read_table(out / "meta/tasks.parquet").to_pydict()
    # only the tasks frames use (LeRobot's split and merge rebuild tasks from them)
    assert dict(zip(tasks["task"], tasks["task_index"], strict=True)) == {LIFT: 0, PICK: 1}
    episodes = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet").to_pydict()
    assert episodes["tasks"] == [[LIFT], [PICK], [LIFT]]
    assert episodes["paraphrases"] == [[], ["grab the red cube"], []]
    frames = pq.read_table(out / "data/chunk-000/file-000.parquet").to_pydict()
    by_episode = dict(zip(frames["episode_index"], frames["task_index"], strict=True))
    assert by_episode == {0: 0, 1: 1, 2: 0}  # frames carry the instruction, not a paraphrase
    assert json.loads((out / "meta/info.json").read_text())["total_tasks"] == 2


def test_gr00t_paraphrases_become_tasks(tmp_path):
    root = _with_paraphrases(tmp_path / "tiny")
    export_gr00t(root, tmp_path / "out")
    out = tmp_path / "out"
    tasks = _meta(out, "tasks.jsonl")
    assert [t["task"] for t in tasks] == [LIFT, PICK]  # the tasks frames use
    episodes = _meta(out, "episodes.jsonl")
    assert [e["tasks"] for e in episodes] == [[LIFT], [PICK], [LIFT]]
    assert [e.get("paraphrases") for e in episodes] == [None, ["grab the red cube"], None]
    table = pq.read_table(out / "data/chunk-000/episode_000001.parquet")
    assert set(table.column("annotation.human.task_description").to_pylist()) == {1}


def test_gr00t_low_dimensional_dataset_has_no_videos(tmp_path):
    make_dataset(tmp_path / "tiny", cameras={})
    export_gr00t(tmp_path / "tiny", tmp_path / "out")
    out = tmp_path / "out"
    assert not (out / "videos").exists()
    info = _meta(out, "info.json")
    assert info["video_path"] is None and info["total_videos"] == 0
    assert _meta(out, "modality.json")["video"] == {}
    assert len(list((out / "data").glob("chunk-000/episode_*.parquet"))) == 3


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda d, tmp: export_gr00t(d, _non_empty(tmp)), "not empty"),
        (lambda d, tmp: export_gr00t(d, tmp / "out", embodiment="New Robot"), "embodiment"),
        (lambda d, tmp: export_gr00t(d, tmp / "out", embodiment="genie1_gripper"), "embodiment"),
        (lambda d, tmp: export_gr00t(d, tmp / "out", chunk_size=0), "chunk_size must be"),
        (lambda d, tmp: export_gr00t(d, tmp / "out", video_codec="nosuchcodec"), "video_codec"),
        (lambda d, tmp: export_gr00t(tmp / "nowhere", tmp / "out"), "no such dataset directory"),
    ],
)
def test_gr00t_refusals_write_nothing(dataset, tmp_path, call, message):  # noqa: F811
    with pytest.raises(DatasetError, match=message):  # ExportError or DatasetError
        call(dataset[0], tmp_path)
    assert sorted(p.name for p in tmp_path.rglob("*")) in ([], ["keep.txt", "taken"])


def test_gr00t_export_through_the_cli(dataset, tmp_path, capsys):  # noqa: F811
    from demofactory.cli.main import main

    out = tmp_path / "gr00t"
    argv = ["export", str(dataset[0]), "--to", "gr00t", str(out), "--embodiment", "oxe_droid"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["embodiment"] == "oxe_droid" and summary["episodes"] == 3
    info = _meta(out, "info.json")
    assert info["embodiment_tag"] == "oxe_droid"
    assert (out / "meta" / "modality.json").is_file()
    video = info["features"]["observation.images.hand"]["info"]
    assert video["video.video_backend"] == "torchcodec"  # a backend GR00T knows


def test_gr00t_unknown_embodiment_is_one_line_exit_2(dataset, tmp_path):  # noqa: F811
    import subprocess
    import sys

    out = tmp_path / "gr00t"
    argv = ["export", str(dataset[0]), "--to", "gr00t", str(out), "--embodiment", "panda_lift"]
    done = subprocess.run(
        [sys.executable, "-m", "demofactory.cli.main", *argv], capture_output=True, text=True
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--embodiment" in lines[0] and "new_embodiment" in lines[0]
    assert not out.exists()


def test_gr00t_a_shard_that_disagrees_fails_and_leaves_nothing(tmp_path):
    root = tmp_path / "tiny"
    make_dataset(root)
    records = [json.loads(line) for line in (root / "episodes.jsonl").read_text().splitlines()]
    records[1]["instruction"] = "something else"  # the shard says otherwise
    (root / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(DatasetError, match="not a readable dataset.*episodes.jsonl lists"):
        export_gr00t(root, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny"]


def test_a_two_arm_layout_is_split_into_arm_and_hand_parts():
    from demofactory.shards.export_gr00t import _parts, arm_parts, gr00t_state_layout
    from demofactory.simulation.bimanual import arm_layout

    one_state = [["eef_pos", 3], ["eef_quat_xyzw", 4], ["gripper_qpos", 2]]
    one_action = [["delta_pos", 3], ["delta_axis_angle", 3], ["gripper", 1]]
    arms = ("right", "left")
    state = arm_parts(_parts(gr00t_state_layout(arm_layout(one_state, arms)), action=False))
    action = arm_parts(_parts(arm_layout(one_action, arms), action=True))
    for parts, width in ((state, 18), (action, 14)):
        covered = sorted(i for p in parts.values() for i in range(p["start"], p["end"]))
        assert covered == list(range(width))  # every dimension exactly once
    assert (state["right_arm"]["start"], state["right_arm"]["end"]) == (0, 7)
    assert (state["left_hand"]["start"], state["left_hand"]["end"]) == (16, 18)
    assert [
        action[k]["absolute"] for k in ("right_arm", "right_hand", "left_arm", "left_hand")
    ] == [
        False,
        True,
        False,
        True,
    ]
    assert arm_parts(_parts(one_action, action=True)) is None  # one arm: the fine parts stay


def test_a_two_arm_layout_without_grippers_has_arm_parts_only():
    """TwoArmPegInHole's bare wrists: each arm's eef pose (state) and its delta (action), no
    hand part (demofactory.simulation.bimanual.arm_proprio_layout(0), arm_action_layout(False))."""
    from demofactory.shards.export_gr00t import _parts, arm_parts, gr00t_state_layout
    from demofactory.simulation.bimanual import arm_action_layout, arm_layout, arm_proprio_layout

    arms = ("right", "left")
    state_layout = arm_layout(arm_proprio_layout(0), arms)
    action_layout = arm_layout(arm_action_layout(False), arms)
    state = arm_parts(_parts(gr00t_state_layout(state_layout), action=False))
    action = arm_parts(_parts(action_layout, action=True))
    assert sorted(state) == sorted(action) == ["left_arm", "right_arm"]
    assert (state["left_arm"]["start"], state["left_arm"]["end"]) == (7, 14)
    assert (action["left_arm"]["start"], action["left_arm"]["end"]) == (6, 12)
    assert not action["right_arm"]["absolute"] and not action["left_arm"]["absolute"]


def test_the_default_tag_is_gr1_only_for_a_dataset_of_gr1_robots():
    from demofactory.shards.export_gr00t import default_embodiment

    assert default_embodiment({"robot": "GR1ArmsOnly"}) == "gr1"
    assert default_embodiment({"robot": "GR1FixedLowerBody"}) == "gr1"
    assert default_embodiment({"robot": "Panda"}) == "new_embodiment"
    assert default_embodiment({"robot": "Panda+GR1ArmsOnly"}) == "new_embodiment"  # mixed
    assert default_embodiment({}) == "new_embodiment"
