"""The LeRobot v3.0 export field by field against what lerobot 0.6.x writes for the same data
(its ``compute_stats.py``, ``dataset_metadata.py``, ``video_utils.get_video_info`` and
``feature_utils.get_hf_features_from_features``): per-episode ``stats/*`` columns, quantiles,
image statistics, info.json's video info, the parquet schema and its ``huggingface`` metadata,
and depth / segmentation cameras. lerobot itself is not installed here (see the README)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from demofactory.shards import Episode
from demofactory.shards.dataset import write_dataset
from demofactory.shards.export_lerobot import export_lerobot
from demofactory.shards.format import encode_depth_png, encode_segmentation_png
from demofactory.shards.lerobot_stats import (
    QUANTILE_KEYS,
    QUANTILES,
    STAT_KEYS,
    aggregate_stats,
    feature_stats,
)
from demofactory.shards.metadata import camera_entry
from PIL import Image

from tests.shards.test_exports import (
    ACTION_LAYOUT,
    CAMERAS,
    FPS,
    LIFT,
    STATE_LAYOUT,
    _data,
    _episodes_meta,
    _in_order,
    _info,
    _jpeg,
    _unjpeg,
    dataset,  # noqa: F401  (the module fixtures, shared)
    lerobot,  # noqa: F401
    pixels,
)

# lerobot 0.6.1's get_video_info(path, RGBEncoderConfig(...)) keys for an RGB video
VIDEO_INFO_KEYS = {
    "video.height",
    "video.width",
    "video.codec",
    "video.pix_fmt",
    "video.fps",
    "video.channels",
    "has_audio",
    "video.g",
    "video.crf",
    "video.preset",
    "video.fast_decode",
    "video.video_backend",
    "video.extra_options",
    "is_depth_map",
}


def _stats_of(row: dict, key: str) -> dict[str, np.ndarray]:
    return {name: np.array(row[f"stats/{key}/{name}"]) for name in STAT_KEYS}


def test_episodes_hold_stats_columns_for_every_feature(lerobot, dataset):  # noqa: F811
    out, _ = lerobot
    features, table = _info(out)["features"], _data(out)
    assert list(QUANTILE_KEYS) == ["q01", "q10", "q50", "q90", "q99"]
    rows = _episodes_meta(out)
    for row, source in zip(rows, _in_order(dataset[1]), strict=True):
        assert {f"stats/{key}/{name}" for key in features for name in STAT_KEYS} <= set(row)
        part = table.slice(row["dataset_from_index"], source.length)
        for key, feature in features.items():
            stats = _stats_of(row, key)
            assert stats["count"].tolist() == [source.length], key
            if feature["dtype"] == "video":
                continue
            values = np.array(part.column(key).to_pylist(), dtype=feature["dtype"])
            flat = values.reshape(source.length, -1).astype(np.float64)
            assert stats["min"].tolist() == flat.min(axis=0).tolist(), key
            assert stats["max"].tolist() == flat.max(axis=0).tolist(), key
            assert np.allclose(stats["mean"], flat.mean(axis=0), rtol=1e-6, atol=1e-6), key
            assert np.allclose(stats["std"], flat.std(axis=0), rtol=1e-4, atol=1e-5), key
            quantiles = np.stack([stats[q] for q in QUANTILE_KEYS])
            assert quantiles.shape == (5, flat.shape[1]), key
            assert np.all(np.diff(quantiles, axis=0) >= 0), key  # q01 <= q10 <= ... <= q99
            assert np.all(quantiles >= stats["min"] - 1e-9) and np.all(
                quantiles <= stats["max"] + 1e-9
            ), key
            recomputed = feature_stats(values)  # the same rule, from the parquet rows
            for name in STAT_KEYS:
                assert np.allclose(stats[name], recomputed[name]), (key, name)


def test_image_stats_per_channel_in_unit_range(lerobot, dataset):  # noqa: F811
    out, _ = lerobot
    for row, source in zip(_episodes_meta(out), _in_order(dataset[1]), strict=True):
        for camera in CAMERAS:
            stats = _stats_of(row, f"observation.images.{camera}")
            for name in STAT_KEYS:
                if name != "count":
                    assert stats[name].shape == (3, 1, 1), name
                    assert np.all((stats[name] >= 0) & (stats[name] <= 1)), name
            # every frame is sampled below 100 frames; the source frames, not the video's
            frames = np.stack([_unjpeg(j) for j in source.images[camera]]) / 255.0
            assert np.allclose(stats["mean"].reshape(3), frames.mean(axis=(0, 1, 2)), atol=1e-6)
            assert np.allclose(stats["max"].reshape(3), frames.max(axis=(0, 1, 2)))
            assert np.allclose(stats["min"].reshape(3), frames.min(axis=(0, 1, 2)))


def _every_frame(out: Path, key: str, feature: dict, dataset) -> np.ndarray:  # noqa: F811
    """[N, D] values of a feature over all frames: video pixels from the source JPEGs (every
    frame is sampled at these lengths), / 255, one row a pixel."""
    if feature["dtype"] == "video":
        camera = key.removeprefix("observation.images.")
        frames = [_unjpeg(j) for ep in _in_order(dataset[1]) for j in ep.images[camera]]
        return np.concatenate([f.reshape(-1, 3) for f in frames]).astype(np.float64) / 255.0
    values = np.array(_data(out).column(key).to_pylist(), dtype=feature["dtype"])
    return values.reshape(len(values), -1).astype(np.float64)


def test_stats_json_aggregates_the_episodes_as_lerobot(lerobot, dataset):  # noqa: F811
    out, _ = lerobot
    stats = json.loads((out / "meta" / "stats.json").read_text())
    features = _info(out)["features"]
    assert set(stats) == set(features)  # timestamp and the index columns too
    rows = _episodes_meta(out)
    for key in features:
        assert set(stats[key]) == set(STAT_KEYS), key
        parts = [_stats_of(row, key) for row in rows]
        counts = np.array([p["count"][0] for p in parts], dtype=np.float64)
        weights = counts.reshape((-1,) + (1,) * parts[0]["mean"].ndim) / counts.sum()
        mean = sum(w * p["mean"] for w, p in zip(weights, parts, strict=True))
        assert np.allclose(stats[key]["mean"], mean), key
        every = _every_frame(out, key, features[key], dataset)
        for q, level in zip(QUANTILE_KEYS, QUANTILES, strict=True):
            # over all frames (numpy's linear rule), not LeRobot's count-weighted average of the
            # episodes' quantiles
            expected = np.quantile(every, level, axis=0)
            found = np.array(stats[key][q]).reshape(expected.shape)
            assert np.allclose(found, expected, atol=1e-6), (key, q)
        assert np.array_equal(stats[key]["min"], np.min([p["min"] for p in parts], axis=0))
        assert np.array_equal(stats[key]["max"], np.max([p["max"] for p in parts], axis=0))
        assert stats[key]["count"] == [16]
    assert np.array(stats["observation.images.scene"]["q50"]).shape == (3, 1, 1)
    assert stats["index"]["min"] == [0.0] and stats["index"]["max"] == [15.0]


def test_quantiles_follow_lerobots_histogram_rule():
    rng = np.random.default_rng(1)
    values = rng.normal(size=(20_000, 2)).astype(np.float32)
    stats = feature_stats(values)
    width = (values.max(axis=0) - values.min(axis=0)) / 5000
    for q, key in zip((0.01, 0.10, 0.50, 0.90, 0.99), QUANTILE_KEYS, strict=True):
        assert np.all(np.abs(stats[key] - np.quantile(values, q, axis=0)) <= 2 * width), key
    one = feature_stats(np.array([[1.0, 2.0]], dtype=np.float32))  # < 2 rows: quantiles = mean
    assert all(one[key].tolist() == [1.0, 2.0] for key in QUANTILE_KEYS)
    scalar = feature_stats(np.arange(5, dtype=np.int64))
    assert scalar["mean"].shape == (1,) and scalar["count"].tolist() == [5]
    merged = aggregate_stats([{"x": feature_stats(values[:100])}, {"x": feature_stats(values)}])
    assert merged["x"]["count"].tolist() == [20_100]


def test_info_video_features_as_lerobot_0_6(lerobot):  # noqa: F811
    out, _ = lerobot
    info = _info(out)
    for camera in CAMERAS:
        video = info["features"][f"observation.images.{camera}"]["info"]
        assert set(video) == VIDEO_INFO_KEYS
        assert "video.is_depth_map" not in video and video["is_depth_map"] is False
        assert (video["video.g"], video["video.crf"], video["video.preset"]) == (2, 18, "medium")
        assert video["video.fast_decode"] == 0 and video["video.video_backend"] == "pyav"
        assert video["video.codec"] == "h264" and video["video.fps"] == FPS
    assert {"total_episodes", "total_frames", "total_tasks", "chunks_size"} <= set(info)
    assert {"data_files_size_in_mb", "video_files_size_in_mb", "splits"} <= set(info)


def test_data_parquet_types_and_huggingface_metadata(lerobot):  # noqa: F811
    out, _ = lerobot
    features = _info(out)["features"]
    for path in sorted((out / "data").rglob("*.parquet")):
        schema = pq.read_schema(path)
        for key, size in (("observation.state", 9), ("action", 7)):
            assert pa.types.is_fixed_size_list(schema.field(key).type), key
            assert schema.field(key).type.list_size == size == features[key]["shape"][0]
            assert schema.field(key).type.value_type == pa.float32()
        hf = json.loads(schema.metadata[b"huggingface"])
        assert hf["info"]["features"]["observation.state"] == {
            "feature": {"dtype": "float32", "_type": "Value"},
            "length": 9,
            "_type": "List",
        }
        assert hf["info"]["features"]["timestamp"] == {"dtype": "float32", "_type": "Value"}
        assert hf["info"]["features"]["index"] == {"dtype": "int64", "_type": "Value"}
        non_video = [k for k, f in features.items() if f["dtype"] != "video"]
        assert list(hf["info"]["features"]) == schema.names  # in column order
        assert set(schema.names) == set(non_video)  # (info.json's keys are sorted)


def test_huggingface_metadata_parses_with_datasets(lerobot):  # noqa: F811
    datasets = pytest.importorskip(
        "datasets", reason="Hugging Face `datasets` is not a dependency of the project's venv"
    )
    out, _ = lerobot
    schema = pq.read_schema(next((out / "data").rglob("*.parquet")))
    hf = json.loads(schema.metadata[b"huggingface"])
    parsed = datasets.Features.from_dict(hf["info"]["features"])
    assert parsed.arrow_schema.field("observation.state").type == pa.list_(pa.float32(), 9)


# ---------------------------------------------------------------- depth and segmentation


@pytest.fixture(scope="module")
def depth_export(tmp_path_factory) -> tuple[Path, dict[int, Episode]]:
    root = tmp_path_factory.mktemp("depth") / "tiny"
    rng = np.random.default_rng(3)
    width, height = CAMERAS["hand"]
    made = {}
    for index, length in ((0, 3), (1, 4)):
        made[index] = Episode(
            index=index,
            shard=0,
            instruction=LIFT,
            seed=index,
            actions=rng.uniform(-1, 1, size=(length, 7)),
            states=rng.normal(size=(length, 9)),
            sim_states=rng.normal(size=(length, 3)),
            images={
                "hand": [_jpeg(pixels(index, t, "hand", (width, height))) for t in range(length)]
            },
            depth={
                "hand": [
                    encode_depth_png(rng.uniform(0.2, 2.0, size=(height, width)))
                    for _ in range(length)
                ]
            },
            segmentation={
                "hand": [
                    encode_segmentation_png(rng.integers(0, 4, size=(height, width)), 8)
                    for _ in range(length)
                ]
            },
            provenance={},
        )
    write_dataset(
        root,
        list(made.values()),
        {
            "name": "depth",
            "fps": FPS,
            "robot": "Panda",
            "cameras": [camera_entry("hand", width, height, depth=True, segmentation="object")],
            "state": {"dim": 9, "layout": STATE_LAYOUT},
            "action": {"dim": 7, "layout": ACTION_LAYOUT},
            "sim_state": {"dim": 3, "layout": "test"},
        },
    )
    out = root.parent / "out"
    export_lerobot(root, out)
    return out, made


def test_depth_and_segmentation_are_lossless_image_features(depth_export):
    out, made = depth_export
    width, height = CAMERAS["hand"]
    features = _info(out)["features"]
    depth, seg = features["observation.images.hand_depth"], features["observation.images.hand_seg"]
    assert depth["dtype"] == seg["dtype"] == "image"
    assert depth["shape"] == seg["shape"] == [height, width, 1]
    assert depth["info"] == {"is_depth_map": True, "depth_unit": "mm"}
    assert seg["info"]["is_depth_map"] is False and seg["info"]["segmentation"] == "object"
    table = _data(out)
    struct = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    assert table.schema.field("observation.images.hand_depth").type == struct
    hf = json.loads(
        pq.read_schema(next((out / "data").rglob("*.parquet"))).metadata[b"huggingface"]
    )
    assert hf["info"]["features"]["observation.images.hand_depth"] == {"_type": "Image"}
    stored = table.column("observation.images.hand_depth").to_pylist()
    assert [cell["bytes"] for cell in stored] == [
        p for ep in made.values() for p in ep.depth["hand"]
    ]
    labels = table.column("observation.images.hand_seg").to_pylist()
    assert [c["bytes"] for c in labels] == [
        p for ep in made.values() for p in ep.segmentation["hand"]
    ]
    stats = json.loads((out / "meta" / "stats.json").read_text())
    mm = np.concatenate(
        [
            np.asarray(Image.open(io.BytesIO(p))).ravel()
            for ep in made.values()
            for p in ep.depth["hand"]
        ]
    )
    assert np.array(stats["observation.images.hand_depth"]["mean"]).shape == (1, 1, 1)
    assert stats["observation.images.hand_depth"]["max"] == [[[float(mm.max())]]]  # millimetres
    assert np.array(stats["observation.images.hand_seg"]["max"]).max() <= 3 / 255 + 1e-9
    row = _episodes_meta(out)[1]
    assert row["stats/observation.images.hand_depth/count"] == [4]
