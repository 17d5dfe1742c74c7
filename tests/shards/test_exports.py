"""`demofactory.shards.export_lerobot` and `demofactory.shards.export_robomimic` on tiny real
datasets: shards written with
the writer, exports read back with pyarrow, PyAV and h5py (not with lerobot or robomimic)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import av
import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from demofactory.shards import DatasetError, Episode, load_stats, shards_dir
from demofactory.shards.dataset import write_dataset
from demofactory.shards.export_lerobot import export_lerobot
from demofactory.shards.export_robomimic import export_robomimic
from PIL import Image

FPS = 10
CAMERAS = {
    "scene": (48, 48),
    "hand": (40, 32),
}  # name -> (width, height); not the tar's (sorted) order
# (index, shard, length, instruction): gaps in the indices, two shards, three lengths, two
# instructions.
LIFT, PICK = "lift the red cube", "pick up the red cube"
EPISODES = ((3, 0, 5, LIFT), (7, 0, 8, PICK), (12, 1, 3, LIFT))
COLOUR = {
    3: (40, 120, 200),
    7: (190, 40, 90),
    12: (90, 200, 30),
}  # per episode, so a wrong episode shows
STATE_LAYOUT = [["eef_pos", 3], ["eef_quat_xyzw", 4], ["gripper_qpos", 2]]
ACTION_LAYOUT = [["delta_pos", 3], ["delta_axis_angle", 3], ["gripper", 1]]
SIM_DIM = 15
PSNR_BOUND = 35.0  # dB, decoded H.264 frame vs the decoded source JPEG; measured ~41 dB at crf 18
SPLIT_FILES = {
    "chunk_size": 2,
    "data_file_size_mb": 1e-6,
}  # a new file every episode, two per chunk


def pixels(index: int, step: int, camera: str, size: tuple[int, int]) -> np.ndarray:
    """A smooth gradient in the episode's colour, shifting with the step: [H, W, 3] uint8."""
    width, height = size
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    red, green, blue = COLOUR.get(index, (128, 128, 128))
    image = np.stack(
        [
            red + 50 * x / width + 5 * step,
            green + 50 * y / height,
            blue + 25 * (x + y) / (width + height),
        ],
        axis=-1,
    )
    return np.clip(image + (20 if camera == "hand" else 0), 0, 255).astype(np.uint8)


def _jpeg(image: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=95)
    return buffer.getvalue()


def _unjpeg(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def make_dataset(root: Path, cameras=CAMERAS, episodes=EPISODES) -> dict[int, Episode]:
    """A real dataset: shards, manifest, episodes.jsonl, stats.json, dataset_info.json."""
    shards_dir(root).mkdir(parents=True)
    rng = np.random.default_rng(0)
    made: dict[int, Episode] = {}
    for index, shard, length, instruction in episodes:
        made[index] = Episode(
            index=index,
            shard=shard,
            instruction=instruction,
            seed=100 + index,
            actions=rng.uniform(-1, 1, size=(length, 7)),
            states=rng.normal(size=(length, 9)),
            sim_states=rng.normal(size=(length, SIM_DIM)),
            images={
                name: [_jpeg(pixels(index, t, name, size)) for t in range(length)]
                for name, size in cameras.items()
            },
            provenance={"source_demo": "demo_1"},
        )
    task = {
        "env": "Lift",
        "robot": "Panda",
        "controller": "OSC_POSE",
        "control_freq": FPS,
        "horizon": 50,
    }
    write_dataset(
        root,
        list(made.values()),
        {
            "name": "tiny",
            "fps": FPS,
            "env": "Lift",
            "robot": "Panda",
            "cameras": [
                {"name": n, "width": w, "height": h, "format": "jpg"}
                for n, (w, h) in cameras.items()
            ],
            "state": {"dim": 9, "layout": STATE_LAYOUT},
            "action": {"dim": 7, "layout": ACTION_LAYOUT},
            "sim_state": {"dim": SIM_DIM, "layout": "time, qpos, qvel (MuJoCo, flattened)"},
            "spec": {"name": "tiny", "task": task},
        },
    )
    return made


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> tuple[Path, dict[int, Episode]]:
    root = tmp_path_factory.mktemp("exports") / "tiny"
    return root, make_dataset(root)


def _continuous(states: np.ndarray) -> np.ndarray:
    """The states with the quaternion (columns 3:7) walked to the hemisphere of the step before,
    as the LeRobot and GR00T exports write them."""
    out = np.array(states, dtype=np.float32)
    for t in range(1, len(out)):
        if float(out[t, 3:7] @ out[t - 1, 3:7]) < 0:
            out[t, 3:7] *= -1
    return out


def _in_order(episodes: dict[int, Episode]) -> list[Episode]:
    """The episodes as the export numbers them: by shard, then index."""
    return sorted(episodes.values(), key=lambda ep: (ep.shard, ep.index))


@pytest.fixture(scope="module", params=[{}, SPLIT_FILES], ids=["one-file", "file-per-episode"])
def lerobot(request, dataset, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("lerobot") / "out"
    summary = export_lerobot(dataset[0], out, **request.param)
    return out, summary


def _info(out: Path) -> dict:
    return json.loads((out / "meta" / "info.json").read_text())


def _episodes_meta(out: Path) -> list[dict]:
    return pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet").to_pylist()


def _data(out: Path) -> pa.Table:
    files = sorted((out / "data").glob("chunk-*/file-*.parquet"))
    return pa.concat_tables([pq.read_table(f) for f in files])


def _decode_video(path: Path) -> list[tuple[float, np.ndarray]]:
    with av.open(str(path)) as container:
        return [
            (frame.time, frame.to_ndarray(format="rgb24")) for frame in container.decode(video=0)
        ]


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def test_lerobot_info_counts_features_and_files(lerobot, dataset, request):
    out, summary = lerobot
    info = _info(out)
    assert (
        info["codebase_version"] == "v3.0" and info["fps"] == FPS and info["robot_type"] == "Panda"
    )
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"]) == (3, 16, 2)
    assert summary["episodes"] == 3 and summary["frames"] == 16 and summary["tasks"] == 2
    assert info["splits"] == {"train": "0:3"}
    assert info["data_path"] == "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
    assert (
        info["video_path"] == "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    )
    features = info["features"]
    assert features["observation.state"]["shape"] == [9] and features["action"]["shape"] == [7]
    assert features["observation.state"]["names"][:4] == [
        "eef_pos_0",
        "eef_pos_1",
        "eef_pos_2",
        "eef_quat_xyzw_0",
    ]
    assert features["action"]["names"][-1] == "gripper"
    for name in ("frame_index", "episode_index", "index", "task_index"):
        assert features[name] == {"dtype": "int64", "shape": [1], "names": None}
    assert features["timestamp"]["dtype"] == "float32"
    for camera, (width, height) in CAMERAS.items():
        feature = features[f"observation.images.{camera}"]
        assert feature["dtype"] == "video" and feature["shape"] == [height, width, 3]
        assert (
            feature["info"]["video.codec"] == "h264"
            and feature["info"]["video.pix_fmt"] == "yuv420p"
        )
        assert (feature["info"]["video.width"], feature["info"]["video.height"]) == (width, height)
        assert feature["info"]["video.fps"] == FPS
    split = request.node.callspec.params["lerobot"] == SPLIT_FILES
    assert summary["data_files"] == (3 if split else 1)  # SPLIT_FILES: one file an episode
    assert len(list((out / "data").rglob("*.parquet"))) == summary["data_files"]
    assert not list(out.parent.glob(".out.tmp-*"))  # the temporary folder was renamed


def test_lerobot_rows_equal_the_shards(lerobot, dataset):
    out, _ = lerobot
    table = _data(out)
    tasks = pq.read_table(out / "meta" / "tasks.parquet").to_pylist()
    task_of = {row["task_index"]: row["task"] for row in tasks}
    episodes = _in_order(dataset[1])
    index = 0
    for episode_index, source in enumerate(episodes):
        rows = table.slice(index, source.length).to_pydict()
        states = np.array(rows["observation.state"], dtype=np.float32)
        actions = np.array(rows["action"], dtype=np.float32)
        assert np.array_equal(states, _continuous(source.states))  # q or -q, no sign flips
        assert np.array_equal(np.abs(states), np.abs(source.states.astype(np.float32)))
        assert np.array_equal(actions, source.actions)
        steps = np.arange(source.length)
        assert rows["frame_index"] == steps.tolist() and rows["index"] == (index + steps).tolist()
        assert rows["episode_index"] == [episode_index] * source.length
        assert np.array_equal(
            np.array(rows["timestamp"], dtype=np.float32), (steps / FPS).astype(np.float32)
        )
        assert {task_of[t] for t in rows["task_index"]} == {source.instruction}
        index += source.length
    assert index == table.num_rows
    assert table.schema.field("observation.state").type == pa.list_(pa.float32(), 9)
    assert table.schema.field("timestamp").type == pa.float32()


def test_lerobot_episodes_metadata_selects_the_right_rows_and_frames(lerobot, dataset):
    out, _ = lerobot
    info, table = _info(out), _data(out)
    worst = np.inf
    for row, source in zip(_episodes_meta(out), _in_order(dataset[1]), strict=True):
        assert row["tasks"] == [source.instruction] and row["length"] == source.length
        assert (row["demofactory/episode_index"], row["demofactory/seed"]) == (
            source.index,
            source.seed,
        )
        data_file = out / info["data_path"].format(
            chunk_index=row["data/chunk_index"], file_index=row["data/file_index"]
        )
        in_file = pq.read_table(data_file).to_pydict()
        assert row["episode_index"] in in_file["episode_index"]
        rows = table.slice(
            row["dataset_from_index"], row["dataset_to_index"] - row["dataset_from_index"]
        )
        assert rows.column("episode_index").to_pylist() == [row["episode_index"]] * source.length
        for camera in CAMERAS:
            key = f"observation.images.{camera}"
            path = out / info["video_path"].format(
                video_key=key,
                chunk_index=row[f"videos/{key}/chunk_index"],
                file_index=row[f"videos/{key}/file_index"],
            )
            start, end = row[f"videos/{key}/from_timestamp"], row[f"videos/{key}/to_timestamp"]
            assert end - start == pytest.approx(source.length / FPS)
            half = 0.5 / FPS
            selected = [
                image for time, image in _decode_video(path) if start - half <= time < end - half
            ]
            assert len(selected) == source.length
            for image, jpeg in zip(selected, source.images[camera], strict=True):
                worst = min(worst, psnr(image, _unjpeg(jpeg)))
    assert worst > PSNR_BOUND, worst


def test_lerobot_videos_hold_every_frame_at_camera_size(lerobot, dataset):
    out, _ = lerobot
    episodes = _in_order(dataset[1])
    by_file: dict[tuple, list[Episode]] = {}
    for row, source in zip(_episodes_meta(out), episodes, strict=True):
        by_file.setdefault((row["data/chunk_index"], row["data/file_index"]), []).append(source)
    worst = np.inf
    for camera, (width, height) in CAMERAS.items():
        videos = sorted(
            (out / "videos" / f"observation.images.{camera}").glob("chunk-*/file-*.mp4")
        )
        assert len(videos) == len(by_file)
        for path, ((chunk, file), sources) in zip(videos, sorted(by_file.items()), strict=True):
            assert (
                path.relative_to(out).as_posix().endswith(f"chunk-{chunk:03d}/file-{file:03d}.mp4")
            )
            frames = _decode_video(path)
            expected = [jpeg for source in sources for jpeg in source.images[camera]]
            assert len(frames) == len(expected) == sum(source.length for source in sources)
            for n, ((time, image), jpeg) in enumerate(zip(frames, expected, strict=True)):
                assert image.shape == (height, width, 3) and time == pytest.approx(n / FPS)
                worst = min(worst, psnr(image, _unjpeg(jpeg)))
    print(f"worst PSNR {worst:.1f} dB")
    assert worst > PSNR_BOUND


def test_lerobot_split_files_roll_over_chunks(dataset, tmp_path):
    out = tmp_path / "split"
    export_lerobot(dataset[0], out, **SPLIT_FILES)
    placed = [
        (
            row["data/chunk_index"],
            row["data/file_index"],
            row["videos/observation.images.scene/from_timestamp"],
        )
        for row in _episodes_meta(out)
    ]
    assert placed == [(0, 0, 0.0), (0, 1, 0.0), (1, 0, 0.0)]
    assert (out / "videos/observation.images.hand/chunk-001/file-000.mp4").is_file()
    assert _info(out)["chunks_size"] == 2


def test_lerobot_tasks_and_stats(lerobot, dataset):
    out, _ = lerobot
    tasks = pq.read_table(out / "meta" / "tasks.parquet")
    assert tasks.to_pylist() == [{"task_index": 0, "task": LIFT}, {"task_index": 1, "task": PICK}]
    assert json.loads(tasks.schema.metadata[b"pandas"])["index_columns"] == [
        "task"
    ]  # pandas' index: task

    # Aggregated from the episodes as LeRobot does: min, max, mean, std exact (to float32);
    # quantiles over all frames (tests/shards/test_lerobot_fidelity.py). The quaternion columns 3:7
    # are made continuous (sign-flipped), so the source's stats.json holds for the others.
    stats, source = json.loads((out / "meta" / "stats.json").read_text()), load_stats(dataset[0])
    for key, ours, dims in (
        ("observation.state", source.keys["state"], [0, 1, 2, 7, 8]),
        ("action", source.keys["action"], list(range(7))),
    ):
        for name in ("mean", "std", "min", "max"):
            found, wanted = np.array(stats[key][name])[dims], np.array(getattr(ours, name))[dims]
            assert np.allclose(found, wanted, atol=1e-5), (key, name)
        assert stats[key]["count"] == [16]
    for camera in CAMERAS:
        frames = (
            np.stack([_unjpeg(j) for ep in dataset[1].values() for j in ep.images[camera]]) / 255.0
        )
        image_stats = stats[f"observation.images.{camera}"]
        # every frame is sampled at these lengths (LeRobot samples all of an episode up to 100)
        assert np.allclose(np.array(image_stats["mean"]).reshape(3), frames.mean(axis=(0, 1, 2)))
        assert np.allclose(
            np.array(image_stats["std"]).reshape(3), frames.std(axis=(0, 1, 2)), atol=1e-4
        )  # float32 arithmetic, as LeRobot
        assert np.allclose(np.array(image_stats["max"]).reshape(3), frames.max(axis=(0, 1, 2)))
        assert np.array(image_stats["min"]).shape == (3, 1, 1) and image_stats["count"] == [16]


def test_odd_frame_sizes_are_padded_to_even(tmp_path):
    episodes = make_dataset(
        tmp_path / "odd", cameras={"odd": (31, 17)}, episodes=((0, 0, 2, LIFT),)
    )
    export_lerobot(tmp_path / "odd", tmp_path / "out")
    feature = _info(tmp_path / "out")["features"]["observation.images.odd"]
    assert feature["shape"] == [18, 32, 3]
    frames = _decode_video(tmp_path / "out/videos/observation.images.odd/chunk-000/file-000.mp4")
    assert [image.shape for _, image in frames] == [(18, 32, 3)] * 2
    for (_, image), jpeg in zip(frames, episodes[0].images["odd"], strict=True):
        assert psnr(image[:17, :31], _unjpeg(jpeg)) > PSNR_BOUND


def test_low_dimensional_dataset_exports_without_videos(tmp_path):
    episodes = make_dataset(tmp_path / "lowdim", cameras={})
    export_lerobot(tmp_path / "lowdim", tmp_path / "out")
    info = _info(tmp_path / "out")
    assert info["video_path"] is None and not (tmp_path / "out" / "videos").exists()
    assert not any(feature["dtype"] == "video" for feature in info["features"].values())
    export_robomimic(tmp_path / "lowdim", tmp_path / "out.hdf5")
    with h5py.File(tmp_path / "out.hdf5", "r") as f:
        assert sorted(f["data/demo_0/obs"]) == [
            "robot0_eef_pos",
            "robot0_eef_quat",
            "robot0_gripper_qpos",
        ]
        assert f["data"].attrs["total"] == sum(ep.length for ep in episodes.values())


def test_robomimic_file_equals_the_shards(dataset, tmp_path):
    summary = export_robomimic(dataset[0], tmp_path / "tiny.hdf5")
    assert summary["demos"] == 3 and summary["total"] == 16
    assert [p.name for p in tmp_path.iterdir()] == ["tiny.hdf5"]  # no temporary left
    with h5py.File(tmp_path / "tiny.hdf5", "r") as f:
        data = f["data"]
        assert sorted(data) == ["demo_0", "demo_1", "demo_2"] and data.attrs["total"] == 16
        env_args = json.loads(data.attrs["env_args"])
        assert env_args["env_name"] == "Lift" and env_args["type"] == 1
        kwargs = env_args["env_kwargs"]
        assert kwargs["robots"] == ["Panda"] and kwargs["control_freq"] == FPS
        assert kwargs["controller_configs"]["type"] == "BASIC"
        assert kwargs["controller_configs"]["body_parts"]["right"]["type"] == "OSC_POSE"
        assert kwargs["camera_names"] == list(CAMERAS) and kwargs["camera_heights"] == [48, 32]
        for n, source in enumerate(_in_order(dataset[1])):
            demo = data[f"demo_{n}"]
            assert (
                demo.attrs["num_samples"] == source.length
                and demo.attrs["episode_index"] == source.index
            )
            assert demo.attrs["instruction"] == source.instruction
            assert np.array_equal(demo["actions"][()], source.actions)
            assert np.array_equal(demo["states"][()], source.sim_states)
            assert demo["dones"][()].tolist() == [0] * (source.length - 1) + [1]
            obs = demo["obs"]
            assert np.array_equal(obs["robot0_eef_pos"][()], source.states[:, :3])
            assert np.array_equal(obs["robot0_eef_quat"][()], source.states[:, 3:7])
            assert np.array_equal(obs["robot0_gripper_qpos"][()], source.states[:, 7:9])
            for camera, (width, height) in CAMERAS.items():
                images = obs[f"{camera}_image"]
                assert images.dtype == np.uint8 and images.shape == (
                    source.length,
                    height,
                    width,
                    3,
                )
                assert np.array_equal(
                    images[()], np.stack([_unjpeg(j) for j in source.images[camera]])
                )


def _non_empty(tmp_path: Path) -> Path:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine")
    return tmp_path / "taken"


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda d, tmp: export_lerobot(d, _non_empty(tmp)), "not empty"),
        (lambda d, tmp: export_lerobot(d, tmp / "out", chunk_size=0), "chunk_size must be"),
        (lambda d, tmp: export_lerobot(d, tmp / "out", video_codec="nosuchcodec"), "video_codec"),
        (lambda d, tmp: export_lerobot(tmp / "nowhere", tmp / "out"), "no such dataset directory"),
        (lambda d, tmp: export_lerobot(tmp, tmp / "out"), "not a demofactory dataset"),
        (lambda d, tmp: export_robomimic(d, _non_empty(tmp) / "keep.txt"), "already exists"),
        (
            lambda d, tmp: export_robomimic(tmp / "nowhere", tmp / "out.hdf5"),
            "no such dataset directory",
        ),
    ],
)
def test_refusals_raise_a_dataset_error_and_write_nothing(dataset, tmp_path, call, message):
    with pytest.raises(DatasetError, match=message):  # ExportError or DatasetError
        call(dataset[0], tmp_path)
    assert sorted(p.name for p in tmp_path.rglob("*")) in ([], ["keep.txt", "taken"])
    if (tmp_path / "taken").exists():
        assert (tmp_path / "taken" / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize("to", ["lerobot", "robomimic"])
def test_a_shard_that_disagrees_fails_and_leaves_nothing(tmp_path, to):
    root = tmp_path / "tiny"
    make_dataset(root)
    records = [json.loads(line) for line in (root / "episodes.jsonl").read_text().splitlines()]
    records[1]["instruction"] = "something else"  # the shard says otherwise
    (root / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / ("out" if to == "lerobot" else "out.hdf5")
    export = export_lerobot if to == "lerobot" else export_robomimic
    with pytest.raises(DatasetError, match="not a readable dataset.*episodes.jsonl lists"):
        export(root, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny"]
