"""Round trips of the on-disk dataset format: real shards in tmp_path, read back with webdataset."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import demofactory.shards.writer
import numpy as np
import pytest
import webdataset as wds
from demofactory.shards import (
    DatasetError,
    Episode,
    EpisodeRecord,
    Manifest,
    ShardInfo,
    compute_stats,
    load_dataset_info,
    load_episodes,
    load_manifest,
    load_stats,
    sample_key,
    save_dataset_info,
    save_episodes,
    save_manifest,
    save_stats,
    sha256_file,
    shard_name,
    shards_dir,
    verify_shard,
    write_shard,
)
from demofactory.shards.partial_stats import QUANTILE_ERROR_OF_RANGE
from demofactory.shards.stats import sidecar_path
from PIL import Image

HEIGHT, WIDTH = 12, 20  # not square, so a transposed decode would show
CAMERAS = ("wrist", "agentview")  # deliberately unsorted


def _jpeg(rng: np.random.Generator) -> bytes:
    pixels = rng.integers(0, 256, size=(HEIGHT, WIDTH, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def make_episode(index: int, shard: int, length: int, seed: int, cameras=CAMERAS) -> Episode:
    """A small real episode: random arrays and random JPEG frames, all from `seed`."""
    rng = np.random.default_rng(seed)
    return Episode(
        index=index,
        shard=shard,
        instruction=f"stack the red cube on the green cube ({index})",
        seed=seed,
        actions=rng.normal(size=(length, 7)).astype(np.float32),
        states=rng.normal(size=(length, 9)).astype(np.float32),
        sim_states=rng.normal(size=(length, 15)),
        images={camera: [_jpeg(rng) for _ in range(length)] for camera in cameras},
        provenance={"source_demo": f"demo_{seed % 3}", "placement": [0.1, -0.2]},
    )


def _shard_file(dataset_dir: Path, info: ShardInfo) -> Path:
    return shards_dir(dataset_dir) / info.name


@pytest.fixture
def dataset_dir(tmp_path: Path) -> Path:
    shards_dir(tmp_path).mkdir()
    return tmp_path


def test_names() -> None:
    assert sample_key(42, 7) == "e00000042_t0007"
    assert "." not in sample_key(123456789, 12345)
    assert shard_name(3) == "shard-000003.tar"
    with pytest.raises(ValueError):
        shard_name(-1)


def test_shard_round_trips_through_webdataset(dataset_dir: Path) -> None:
    # Given out of order: the shard must hold them sorted by index.
    episodes = [make_episode(7, 3, 3, seed=70), make_episode(2, 3, 4, seed=20)]
    info = write_shard(episodes, shards_dir(dataset_dir), 3)

    assert info.name == "shard-000003.tar"
    assert (info.samples, info.episodes) == (7, 2)
    path = _shard_file(dataset_dir, info)
    assert info.bytes == path.stat().st_size

    samples = list(wds.WebDataset([str(path)], shardshuffle=False).decode("rgb8"))
    expected = [(ep, t) for ep in sorted(episodes, key=lambda e: e.index) for t in range(ep.length)]
    assert [s["__key__"] for s in samples] == [sample_key(ep.index, t) for ep, t in expected]
    for sample, (ep, t) in zip(samples, expected, strict=True):
        assert "." not in sample["__key__"]
        for camera in CAMERAS:
            image = sample[f"{camera}.jpg"]
            assert image.shape == (HEIGHT, WIDTH, 3) and image.dtype == np.uint8
            reference = np.asarray(Image.open(io.BytesIO(ep.images[camera][t])).convert("RGB"))
            np.testing.assert_array_equal(image, reference)
        assert sample["action.npy"].dtype == np.float32
        np.testing.assert_array_equal(sample["action.npy"], ep.actions[t])
        np.testing.assert_array_equal(sample["state.npy"], ep.states[t])
        assert sample["sim_state.npy"].dtype == np.float64
        np.testing.assert_array_equal(sample["sim_state.npy"], ep.sim_states[t])
        meta = sample["meta.json"]
        assert meta == {
            "episode": ep.index,
            "step": t,
            "length": ep.length,
            "instruction": ep.instruction,
            "seed": ep.seed,
            "is_first": t == 0,
            "is_last": t == ep.length - 1,
        }


def test_tar_members_are_ordered_with_fixed_headers(dataset_dir: Path) -> None:
    info = write_shard([make_episode(5, 0, 2, seed=1)], shards_dir(dataset_dir), 0)
    with tarfile.open(_shard_file(dataset_dir, info)) as tar:
        members = tar.getmembers()
    key = sample_key(5, 0)
    assert [m.name for m in members[:6]] == [
        f"{key}.agentview.jpg",
        f"{key}.wrist.jpg",
        f"{key}.action.npy",
        f"{key}.state.npy",
        f"{key}.sim_state.npy",
        f"{key}.meta.json",
    ]
    assert len(members) == 12
    for m in members:
        assert (m.mtime, m.uid, m.gid, m.uname, m.gname, m.mode) == (0, 0, 0, "", "", 0o444)


def test_equal_content_gives_equal_bytes(tmp_path: Path) -> None:
    infos, paths = [], []
    for name in ("a", "b"):
        out = tmp_path / name
        out.mkdir()
        # Fresh Episode objects each time: equality must come from content alone.
        episodes = [make_episode(1, 4, 3, seed=11), make_episode(9, 4, 2, seed=99)]
        info = write_shard(episodes, out, 4)
        infos.append(info)
        paths.append(out / info.name)
    assert paths[0].read_bytes() == paths[1].read_bytes()
    assert infos[0] == infos[1]
    assert (
        infos[0].sha256
        == hashlib.sha256(paths[0].read_bytes()).hexdigest()
        == sha256_file(paths[1])
    )


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


@pytest.mark.parametrize(
    "names",
    [
        ["a.jpg", "b" * 100, "000001.state.npy"],  # 100 bytes: the ustar field's whole width
        ["c" * 101 + ".json", "ünïcode.txt", "d/e.npy"],  # PAX records, as tarfile writes them
    ],
)
def test_the_tar_is_tarfiles_bytes(names: list[str]) -> None:
    """The writer builds tar headers itself (tarfile cost ~0.1 ms a member); the archive is the
    one `tarfile` writes with the same fixed fields, byte for byte."""
    from demofactory.shards.writer import _end_archive, _tar_info, _write_member

    rng = np.random.default_rng(0)
    members = [(n, rng.bytes(size)) for n in names for size in (0, 1, 511, 512, 513, 7000)]
    ours = io.BytesIO()
    written = sum(_write_member(ours, name, data) for name, data in members)
    _end_archive(ours, written)
    theirs = io.BytesIO()
    with tarfile.open(fileobj=theirs, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8") as t:
        for name, data in members:
            t.addfile(_tar_info(name, len(data)), io.BytesIO(data))
    assert ours.getvalue() == theirs.getvalue()
    assert len(ours.getvalue()) == written + 1024 + (-(written + 1024) % tarfile.RECORDSIZE)


@pytest.mark.parametrize(
    "array",
    [
        np.arange(7, dtype=np.float64),
        np.arange(12, dtype=np.float32).reshape(3, 4),
        np.arange(12, dtype=">i4").reshape(3, 4),
        np.asfortranarray(np.arange(12.0).reshape(3, 4)),  # np.save writes it fortran-ordered
        np.arange(12.0).reshape(3, 4)[:, ::2],  # not contiguous
        np.array(3.5),
        np.zeros((0, 3)),
        np.zeros(2, dtype=[("a", "<f4"), ("b", "<i2")]),
    ],
)
def test_npy_members_are_np_saves_bytes(array: np.ndarray) -> None:
    from demofactory.shards.writer import _npy_bytes

    expected = io.BytesIO()
    np.save(expected, array, allow_pickle=False)
    assert _npy_bytes(array) == expected.getvalue()
    assert _npy_bytes(array) == expected.getvalue()  # from the kept header too


def test_failed_rename_leaves_nothing(dataset_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing_replace(src, dst):
        raise OSError("disk went away")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk went away"):
        write_shard([make_episode(0, 0, 2, seed=0)], shards_dir(dataset_dir), 0)
    assert _leftovers(shards_dir(dataset_dir)) == []


def test_failure_mid_shard_keeps_previous_file(
    dataset_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = shards_dir(dataset_dir)
    first = write_shard([make_episode(0, 0, 2, seed=0)], out, 0)
    before = (out / first.name).read_bytes()

    real_npy_bytes = demofactory.shards.writer._npy_bytes
    calls = []

    def npy_bytes_failing_later(array):
        calls.append(1)
        if len(calls) == 5:  # after some members are already in the temporary tar
            raise RuntimeError("worker killed")
        return real_npy_bytes(array)

    monkeypatch.setattr(demofactory.shards.writer, "_npy_bytes", npy_bytes_failing_later)
    with pytest.raises(RuntimeError, match="worker killed"):
        write_shard([make_episode(0, 0, 4, seed=5)], out, 0)
    assert _leftovers(out) == [sidecar_path(out / first.name).name, first.name]
    assert (out / first.name).read_bytes() == before


def test_non_bytes_frame_is_rejected_before_writing() -> None:
    episode = make_episode(0, 0, 2, seed=0)
    with pytest.raises(TypeError, match=r"images\['wrist'\]\[1\]"):
        Episode(
            index=0,
            shard=0,
            instruction="x",
            seed=0,
            actions=episode.actions,
            states=episode.states,
            sim_states=episode.sim_states,
            images={"wrist": [episode.images["wrist"][0], np.zeros((HEIGHT, WIDTH, 3))]},
            provenance={},
        )


def test_write_shard_rejects_episode_of_another_shard(dataset_dir: Path) -> None:
    with pytest.raises(ValueError, match="belongs to shard 1"):
        write_shard([make_episode(0, 1, 2, seed=0)], shards_dir(dataset_dir), 0)
    assert _leftovers(shards_dir(dataset_dir)) == []


@pytest.mark.parametrize("field", ["states", "sim_states", "images"])
def test_episode_rejects_mismatched_lengths(field: str) -> None:
    good = make_episode(3, 0, 4, seed=3)
    kwargs = dict(
        index=3,
        shard=0,
        instruction="x",
        seed=3,
        actions=good.actions,
        states=good.states,
        sim_states=good.sim_states,
        images=good.images,
        provenance={},
    )
    if field == "images":
        kwargs["images"] = {**good.images, "wrist": good.images["wrist"][:3]}
    else:
        kwargs[field] = getattr(good, field)[:3]
    with pytest.raises(ValueError, match=field):
        Episode(**kwargs)


def test_episode_rejects_empty_and_bad_values() -> None:
    good = make_episode(0, 0, 2, seed=0, cameras=())
    kwargs = dict(
        index=0,
        shard=0,
        instruction="x",
        seed=0,
        actions=good.actions,
        states=good.states,
        sim_states=good.sim_states,
        images={},
        provenance={},
    )
    with pytest.raises(ValueError, match="T >= 1"):
        Episode(
            **{
                **kwargs,
                "actions": good.actions[:0],
                "states": good.states[:0],
                "sim_states": good.sim_states[:0],
            }
        )
    with pytest.raises(ValueError, match="camera name"):
        Episode(**{**kwargs, "images": {"action": [b"x", b"y"]}})
    with pytest.raises(TypeError, match="JSON"):
        Episode(**{**kwargs, "provenance": {"pose": np.zeros(3)}})
    assert Episode(**{**kwargs, "seed": np.int64(7)}).seed == 7


def test_manifest_round_trip_and_verify(dataset_dir: Path) -> None:
    assert load_manifest(dataset_dir) == Manifest()
    out = shards_dir(dataset_dir)
    info1 = write_shard([make_episode(10, 1, 2, seed=10)], out, 1)
    info0 = write_shard([make_episode(0, 0, 3, seed=0)], out, 0)
    manifest = Manifest().with_shard(info1).with_shard(info0)
    save_manifest(dataset_dir, manifest)

    document = json.loads((dataset_dir / "manifest.json").read_text())
    assert document["schema_version"] == 1
    assert [entry["name"] for entry in document["shards"]] == [info0.name, info1.name]
    loaded = load_manifest(dataset_dir)
    assert loaded == manifest
    assert loaded.by_name()[info1.name] == info1
    assert (loaded.total_samples, loaded.total_episodes) == (5, 2)
    assert loaded.total_bytes == info0.bytes + info1.bytes
    assert _leftovers(dataset_dir) == ["manifest.json", "shards"]

    assert verify_shard(dataset_dir, info0)
    path = out / info0.name
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0xFF  # same size, one byte different
    path.write_bytes(bytes(data))
    assert not verify_shard(dataset_dir, info0)
    path.unlink()
    assert not verify_shard(dataset_dir, info0)
    assert verify_shard(dataset_dir, info1)


def test_malformed_manifest_names_the_file(dataset_dir: Path) -> None:
    path = dataset_dir / "manifest.json"
    path.write_text('{"schema_version": 1, "shards": [')
    with pytest.raises(DatasetError, match="manifest.json.*malformed JSON"):
        load_manifest(dataset_dir)
    path.write_text(json.dumps({"schema_version": 1, "shards": [{"name": "shard-000000.tar"}]}))
    with pytest.raises(DatasetError, match=r"manifest.json: shards\[0\]"):
        load_manifest(dataset_dir)
    path.write_text(json.dumps({"schema_version": 99, "shards": []}))
    with pytest.raises(DatasetError, match="schema_version"):
        load_manifest(dataset_dir)


def test_compute_stats_matches_numpy_over_two_shards(dataset_dir: Path) -> None:
    out = shards_dir(dataset_dir)
    by_shard = {
        0: [make_episode(0, 0, 5, seed=0), make_episode(1, 0, 3, seed=1)],
        1: [make_episode(2, 1, 6, seed=2)],
    }
    infos = [write_shard(eps, out, index) for index, eps in by_shard.items()]
    names = [info.name for info in infos]
    episodes = [ep for eps in by_shard.values() for ep in eps]

    stats = compute_stats(dataset_dir, names)
    assert set(stats) == {"action", "state"}
    for key, field in (("action", "actions"), ("state", "states")):
        values = np.concatenate([getattr(ep, field) for ep in episodes]).astype(np.float64)
        got = stats[key]
        assert got.count == 14
        np.testing.assert_allclose(got.mean, values.mean(axis=0))
        np.testing.assert_allclose(got.std, values.std(axis=0))
        np.testing.assert_allclose(got.min, values.min(axis=0))
        np.testing.assert_allclose(got.max, values.max(axis=0))
        bound = QUANTILE_ERROR_OF_RANGE * (values.max(0) - values.min(0))  # a merged sketch
        for q, got_q in ((0.01, got.q01), (0.99, got.q99)):
            assert (np.abs(np.asarray(got_q) - np.quantile(values, q, axis=0)) <= bound).all()
    assert compute_stats(dataset_dir, names[::-1]) == stats
    # the workers' sidecars give the same statistics as reading the tars, without reading them
    checksums = {info.name: info.sha256 for info in infos}
    (out / names[1]).write_bytes(b"not a tar any more")
    assert compute_stats(dataset_dir, names, checksums=checksums) == stats
    # a sidecar naming another checksum is not trusted: the (now broken) tar is read
    with pytest.raises(DatasetError):
        compute_stats(dataset_dir, names, checksums={**checksums, names[1]: "0" * 64})

    save_stats(dataset_dir, stats, {"episodes": 3, "transitions": 14})
    loaded = load_stats(dataset_dir)
    assert loaded.keys == stats
    assert loaded.extra == {"episodes": 3, "transitions": 14}
    with pytest.raises(ValueError, match="clash"):
        save_stats(dataset_dir, stats, {"action": 1})


def test_compute_stats_needs_steps(dataset_dir: Path) -> None:
    info = write_shard([], shards_dir(dataset_dir), 0)
    assert (info.samples, info.episodes) == (0, 0)
    with pytest.raises(DatasetError, match="differ or are zero"):
        compute_stats(dataset_dir, [info.name])
    assert load_stats(dataset_dir) is None


def test_dataset_info_and_episodes_round_trip(dataset_dir: Path) -> None:
    assert load_dataset_info(dataset_dir) is None
    assert load_episodes(dataset_dir) == []
    info = {"fps": 20, "cameras": {"agentview": [HEIGHT, WIDTH]}, "action_dim": 7}
    save_dataset_info(dataset_dir, info)
    assert load_dataset_info(dataset_dir) == {**info, "schema_version": 1}
    (dataset_dir / "dataset_info.json").write_text("{not json")
    with pytest.raises(DatasetError, match="dataset_info.json"):
        load_dataset_info(dataset_dir)

    episodes = [
        make_episode(9, 1, 2, seed=9, cameras=()),
        make_episode(4, 0, 3, seed=4, cameras=()),
    ]
    save_episodes(dataset_dir, [EpisodeRecord.from_episode(ep) for ep in episodes])
    lines = (dataset_dir / "episodes.jsonl").read_text().splitlines()
    assert [json.loads(line)["index"] for line in lines] == [4, 9]
    records = load_episodes(dataset_dir)
    assert records[0] == EpisodeRecord(
        index=4,
        shard="shard-000000.tar",
        length=3,
        instruction=episodes[1].instruction,
        seed=4,
        provenance={"source_demo": "demo_1", "placement": [0.1, -0.2]},
    )
    assert records[1].shard == "shard-000001.tar"

    (dataset_dir / "episodes.jsonl").write_text(lines[0] + "\n" + '{"index": 1}\n')
    with pytest.raises(DatasetError, match="episodes.jsonl:2"):
        load_episodes(dataset_dir)
