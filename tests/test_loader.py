"""The streaming loader over tiny real datasets: real shards, real JPEGs, real DataLoader workers."""

from __future__ import annotations

import io
import itertools
import json
import shutil
import tarfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

from shards import (
    DatasetError,
    Episode,
    EpisodeRecord,
    Manifest,
    compute_stats,
    save_dataset_info,
    save_episodes,
    save_manifest,
    save_stats,
    shards_dir,
    write_shard,
)
from shards.loader import ShardDataset, Split, make_loader

HEIGHT, WIDTH = 12, 20  # not square, so a transposed image would show
CAMERAS = ("wrist", "agentview")  # not sorted: the loader keeps dataset_info's order
# Episode lengths per shard; shard 4 is empty (a valid tar the manifest lists with 0 samples).
LAYOUT = ((3, 5), (4,), (2, 6, 1), (5,), (), (3, 2))
ACTION_DIM, STATE_DIM = 7, 9


@dataclass(frozen=True)
class BuiltDataset:
    """A dataset written to `path` and the episodes it holds, by index."""

    path: Path
    episodes: dict[int, Episode]

    def steps(self) -> Counter:
        return Counter((ep.index, t) for ep in self.episodes.values() for t in range(ep.length))

    def shard(self, i: int) -> Path:
        return shards_dir(self.path) / f"shard-{i:06d}.tar"


def _jpeg(rng: np.random.Generator) -> bytes:
    pixels = rng.integers(0, 256, size=(HEIGHT, WIDTH, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def _episode(index: int, shard: int, length: int, rng: np.random.Generator) -> Episode:
    return Episode(
        index=index,
        shard=shard,
        instruction=f"lift the cube ({index})",
        seed=1000 + index,
        actions=rng.normal(loc=np.arange(ACTION_DIM), scale=0.5 + np.arange(ACTION_DIM), size=(length, ACTION_DIM)),
        states=rng.normal(loc=-1.0, scale=3.0, size=(length, STATE_DIM)),
        sim_states=rng.normal(size=(length, 5)),
        images={camera: [_jpeg(rng) for _ in range(length)] for camera in CAMERAS},
        provenance={"source_demo": "demo_0"},
    )


def build_dataset(root: Path, layout=LAYOUT, seed: int = 0) -> BuiltDataset:
    """Write a whole dataset (shards, manifest, stats, episodes, dataset_info) under `root`."""
    rng = np.random.default_rng(seed)
    shards_dir(root).mkdir(parents=True)
    episodes: dict[int, Episode] = {}
    manifest = Manifest()
    index = 0
    for shard, lengths in enumerate(layout):
        written = []
        for length in lengths:
            written.append(_episode(index, shard, length, rng))
            index += 2  # gaps in the global indices are allowed
        manifest = manifest.with_shard(write_shard(written, shards_dir(root), shard))
        episodes.update({ep.index: ep for ep in written})
    names = [info.name for info in manifest.shards if info.samples > 0]
    totals = {"episodes": len(episodes), "transitions": sum(ep.length for ep in episodes.values())}
    save_stats(root, compute_stats(root, names), totals)
    save_episodes(root, [EpisodeRecord.from_episode(ep) for ep in episodes.values()])
    cameras = [{"name": c, "width": WIDTH, "height": HEIGHT, "format": "jpg"} for c in CAMERAS]
    save_dataset_info(root, {"name": "tiny", "fps": 20, "cameras": cameras})
    save_manifest(root, manifest)
    return BuiltDataset(root, episodes)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> BuiltDataset:
    return build_dataset(tmp_path_factory.mktemp("loader") / "tiny")


def _unbatch(batches) -> list[dict]:
    """DataLoader batches (default collation) -> one dict per sample, tensors per sample."""
    samples = []
    for batch in batches:
        for i in range(len(batch["episode"])):
            samples.append({
                "episode": int(batch["episode"][i]),
                "step": int(batch["step"][i]),
                "instruction": batch["instruction"][i],
                "state": batch["state"][i],
                "action_chunk": batch["action_chunk"][i],
                "action_mask": batch["action_mask"][i],
                "images": {c: images[i] for c, images in batch["images"].items()},
            })
    return samples


def _keys(samples) -> list[tuple[int, int]]:
    return [(int(s["episode"]), int(s["step"])) for s in samples]


@pytest.mark.parametrize(("world_size", "num_workers"), [(1, 0), (1, 2), (2, 2)])
def test_every_step_exactly_once(dataset, monkeypatch, world_size, num_workers) -> None:
    seen: Counter = Counter()
    for rank in range(world_size):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", str(world_size))
        ds = make_loader(dataset.path, action_horizon=4, normalization="none")
        loader = DataLoader(ds, batch_size=3, num_workers=num_workers)
        samples = _unbatch(loader)
        seen.update(_keys(samples))
        for s in samples:
            ep = dataset.episodes[s["episode"]]
            np.testing.assert_array_equal(s["state"].numpy(), ep.states[s["step"]])
            assert s["instruction"] == ep.instruction
    assert seen == dataset.steps()


@pytest.mark.parametrize(
    ("n_shards", "world_size", "num_workers", "all_busy"),
    [(2, 2, 2, False), (3, 2, 2, True), (1, 1, 3, False), (5, 2, 3, True)],
)
def test_fewer_shards_than_splits_still_exactly_once(dataset, n_shards, world_size, num_workers, all_busy) -> None:
    # Shards 0, 1, 2, 3, 5 hold 2, 1, 3, 1, 2 episodes; take the first n_shards of them.
    paths = [dataset.shard(i) for i in (0, 1, 2, 3, 5)[:n_shards]]
    ds = make_loader(paths, action_horizon=2, normalization="none")
    seen: Counter = Counter()
    busy = []
    for rank in range(world_size):
        for worker in range(num_workers):
            keys = _keys(ds.iter_split(Split(rank, world_size, worker, num_workers)))
            seen.update(keys)
            busy.append(bool(keys))
    names = {p.name for p in paths}
    expected = Counter({(ep.index, t): 1 for ep in dataset.episodes.values()
                        if f"shard-{ep.shard:06d}.tar" in names for t in range(ep.length)})
    assert seen == expected
    # Splits sharing a shard take turns by episode: all get some when the shards have enough.
    assert all(busy) == all_busy


def test_samples_hold_the_written_data(dataset) -> None:
    horizon = 3
    samples = list(make_loader(dataset.path, action_horizon=horizon, normalization="none"))
    assert len(samples) == sum(dataset.steps().values())
    for s in samples:
        ep, t = dataset.episodes[s["episode"]], s["step"]
        assert list(s["images"]) == list(CAMERAS)
        for camera in CAMERAS:
            image = s["images"][camera]
            assert image.dtype == torch.uint8 and image.shape == (3, HEIGHT, WIDTH)
            reference = np.asarray(Image.open(io.BytesIO(ep.images[camera][t])).convert("RGB"))
            np.testing.assert_array_equal(image.permute(1, 2, 0).numpy(), reference)
        assert s["state"].dtype == torch.float32 and s["state"].shape == (STATE_DIM,)
        assert s["action_chunk"].dtype == torch.float32 and s["action_chunk"].shape == (horizon, ACTION_DIM)
        assert s["action_mask"].dtype == torch.bool and s["action_mask"].shape == (horizon,)
        rows = [min(t + k, ep.length - 1) for k in range(horizon)]
        np.testing.assert_array_equal(s["action_chunk"].numpy(), ep.actions[rows])

    floats = next(iter(make_loader(dataset.path, cameras=["agentview"], normalization="none",
                                   image_dtype="float32")))
    assert list(floats["images"]) == ["agentview"]
    image = floats["images"]["agentview"]
    assert image.dtype == torch.float32 and 0.0 <= image.min() and image.max() <= 1.0
    first = dataset.episodes[floats["episode"]].images["agentview"][floats["step"]]
    reference = np.asarray(Image.open(io.BytesIO(first)).convert("RGB")).transpose(2, 0, 1) / 255.0
    np.testing.assert_allclose(image.numpy(), reference, atol=1e-6)


def test_action_chunks_at_the_episode_end(dataset) -> None:
    by_key = {(s["episode"], s["step"]): s for s in make_loader(dataset.path, action_horizon=4,
                                                                 normalization="none")}
    five = next(ep for ep in dataset.episodes.values() if ep.length == 5)
    one = next(ep for ep in dataset.episodes.values() if ep.length == 1)
    a, T, F = five.actions, True, False
    expected = {
        0: (a[[0, 1, 2, 3]], [T, T, T, T]),
        1: (a[[1, 2, 3, 4]], [T, T, T, T]),
        2: (a[[2, 3, 4, 4]], [T, T, T, F]),
        3: (a[[3, 4, 4, 4]], [T, T, F, F]),
        4: (a[[4, 4, 4, 4]], [T, F, F, F]),
    }
    for t, (chunk, mask) in expected.items():
        sample = by_key[(five.index, t)]
        np.testing.assert_array_equal(sample["action_chunk"].numpy(), chunk)
        assert sample["action_mask"].tolist() == mask
    single = by_key[(one.index, 0)]
    np.testing.assert_array_equal(single["action_chunk"].numpy(), one.actions[[0, 0, 0, 0]])
    assert single["action_mask"].tolist() == [T, F, F, F]


def _expected_normalized(x: np.ndarray, entry: dict, mode: str) -> np.ndarray:
    x = x.astype(np.float64)
    if mode == "mean_std":
        return (x - np.array(entry["mean"])) / np.maximum(np.array(entry["std"]), 1e-6)
    q01, q99 = np.array(entry["q01"]), np.array(entry["q99"])
    return np.clip(2 * (x - q01) / (q99 - q01) - 1, -1, 1)


@pytest.mark.parametrize("mode", ["mean_std", "quantile"])
def test_normalization_matches_numpy(dataset, mode) -> None:
    stats = json.loads((dataset.path / "stats.json").read_text())
    ds = make_loader(dataset.path, action_horizon=2, normalization=mode)
    clipped = 0
    for s in ds:
        ep, t = dataset.episodes[s["episode"]], s["step"]
        state = _expected_normalized(ep.states[t], stats["state"], mode)
        np.testing.assert_allclose(s["state"].numpy(), state, rtol=1e-5, atol=1e-5)
        rows = [min(t + k, ep.length - 1) for k in range(2)]
        actions = _expected_normalized(ep.actions[rows], stats["action"], mode)
        np.testing.assert_allclose(s["action_chunk"].numpy(), actions, rtol=1e-5, atol=1e-5)
        clipped += int(np.sum(np.abs(s["action_chunk"].numpy()) == 1.0))
    if mode == "quantile":
        assert clipped > 0  # some actions lie outside q01..q99 and were clipped

    # unnormalize inverts normalize wherever quantile did not clip
    x = dataset.episodes[0].actions
    y = ds.normalizer.normalize("action", x)
    inside = np.abs(y) < 1
    np.testing.assert_allclose(ds.normalizer.unnormalize("action", y)[inside], x[inside], rtol=1e-5, atol=1e-5)


def test_brace_pattern_and_path_list_match_the_directory(dataset) -> None:
    def contents(source):
        return sorted((s["episode"], s["step"], s["state"].numpy().tobytes(), s["action_chunk"].numpy().tobytes())
                      for s in make_loader(source, cameras=[], action_horizon=2))

    from_dir = contents(dataset.path)
    brace = str(shards_dir(dataset.path) / "shard-{000000..000005}.tar")
    assert contents(brace) == from_dir  # stats.json found beside the shards folder
    assert contents(sorted(shards_dir(dataset.path).glob("*.tar"))) == from_dir
    assert len(from_dir) == sum(dataset.steps().values())


def test_shuffle_changes_order_not_contents_and_is_seeded(dataset) -> None:
    def order(**kw):
        return _keys(make_loader(dataset.path, cameras=[], normalization="none", action_horizon=1, **kw))

    plain = order()
    shuffled = order(shuffle_buffer=8, seed=1)
    assert shuffled != plain and Counter(shuffled) == Counter(plain)
    assert order(shuffle_buffer=8, seed=1) == shuffled
    assert order(shuffle_buffer=8, seed=2) != shuffled

    ds = make_loader(dataset.path, cameras=[], normalization="none", shuffle_buffer=8, seed=1)
    ds.set_epoch(1)
    assert _keys(ds) != shuffled


def test_resampled_yields_exactly_epoch_length(dataset) -> None:
    ds = make_loader(dataset.path, action_horizon=2, resampled=True, epoch_length=37, shuffle_buffer=5)
    samples = _unbatch(DataLoader(ds, batch_size=4, num_workers=2))
    assert len(samples) == 37
    assert set(_keys(samples)) <= set(dataset.steps())
    assert len(list(ds)) == 37  # no workers: the same count

    endless = make_loader(dataset.path, cameras=[], normalization="none", resampled=True)
    n = 3 * sum(dataset.steps().values())
    assert len(list(itertools.islice(endless, n))) == n  # goes on past one pass over the data


def test_a_shard_cut_short_by_a_corrupt_header_raises(dataset, tmp_path) -> None:
    # Python's tarfile ends a tar quietly at an invalid header; here that would drop episode 2
    # whole, so only the manifest's sample count can tell.
    copy = tmp_path / "copy"
    shutil.copytree(dataset.path, copy)
    path = shards_dir(copy) / "shard-000000.tar"
    with tarfile.open(path) as tar:
        offset = next(m.offset for m in tar if m.name.startswith("e00000002_t0000."))
    data = bytearray(path.read_bytes())
    data[offset + 1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(DatasetError, match=r"shard-000000.tar: holds 3 samples, manifest.json lists 8"):
        list(make_loader(copy, cameras=[], normalization="none"))


def test_bad_arguments_are_named(dataset) -> None:
    with pytest.raises(ValueError, match=r"unknown cameras \['front'\].*'wrist', 'agentview'"):
        make_loader(dataset.path, cameras=["front"])
    with pytest.raises(ValueError, match="normalization must be one of"):
        make_loader(dataset.path, normalization="minmax")
    with pytest.raises(ValueError, match="resampled=True"):
        make_loader(dataset.path, epoch_length=10)
    with pytest.raises(ValueError, match="stats=DATASET_DIR"):
        make_loader("/nonexistent/shard-{0..1}.tar")
    assert isinstance(make_loader("/nonexistent/a.tar", normalization="none"), ShardDataset)
