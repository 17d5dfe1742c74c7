"""The episode shard layout: the same episodes written one sample a step and one sample an
episode read back as the same steps, batches, splits, statistics and exports."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from demofactory.shards import DatasetError, Episode, shards_dir, tario
from demofactory.shards.dataset import write_dataset
from demofactory.shards.export_source import load_source, read_episodes
from demofactory.shards.format import encode_depth_png, encode_segmentation_png
from demofactory.shards.loader import make_loader
from demofactory.shards.manifest import load_manifest
from demofactory.shards.shard_layout import dataset_shard_layout, episode_key
from demofactory.shards.verify import verify_dataset
from demofactory.shards.writer import write_shard
from demofactory.specs.spec import SpecError, load_spec
from torch.utils.data import DataLoader

from tests.conftest import SPECS
from tests.shards.test_loader import (
    ACTION_DIM,
    CAMERAS,
    HEIGHT,
    LAYOUT,
    STATE_DIM,
    WIDTH,
    BuiltDataset,
    build_dataset,
)


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> tuple[BuiltDataset, BuiltDataset]:
    """One set of episodes (one shard empty), written in the step and in the episode layout."""
    root = tmp_path_factory.mktemp("layouts")
    episodes = build_dataset(root / "source").episodes
    info = {
        "name": "tiny",
        "fps": 20,
        "cameras": [
            {"name": c, "width": WIDTH, "height": HEIGHT, "format": "jpg"} for c in CAMERAS
        ],
        "state": {"dim": STATE_DIM, "layout": [["state", STATE_DIM]]},
        "action": {"dim": ACTION_DIM, "layout": [["action", ACTION_DIM]]},
    }
    for layout in ("step", "episode"):
        write_dataset(root / layout, list(episodes.values()), info, len(LAYOUT), layout=layout)
    return BuiltDataset(root / "step", episodes), BuiltDataset(root / "episode", episodes)


def _tar_names(path: Path) -> list[str]:
    with tarfile.open(path) as tar:
        return tar.getnames()


def test_episode_shards_read_as_the_step_shards_byte_for_byte(both) -> None:
    step, episode = both
    steps, episodes = load_manifest(step.path).shards, load_manifest(episode.path).shards
    assert [(s.name, s.samples, s.episodes) for s in steps] == [
        (s.name, s.samples, s.episodes) for s in episodes
    ]
    for i, info in enumerate(episodes):
        with open(step.shard(i), "rb") as a, open(episode.shard(i), "rb") as b:
            assert list(tario.iter_steps(b, "episode")) == list(tario.iter_tar(a, "step"))
        names = _tar_names(episode.shard(i))
        assert {n.partition(".")[0] for n in names} == {
            episode_key(ep.index) for ep in episode.episodes.values() if ep.shard == i
        }
        if info.samples:
            assert info.bytes < steps[i].bytes  # fewer headers, less padding
    for name in ("stats.json", "episodes.jsonl"):
        assert (step.path / name).read_bytes() == (episode.path / name).read_bytes()
    info = json.loads((episode.path / "dataset_info.json").read_text())
    assert dataset_shard_layout(info) == "episode"
    assert verify_dataset(episode.path) == []


def _batches(path: Path, num_workers: int, **options) -> list[dict]:
    loader = make_loader(path, action_horizon=3, shuffle_buffer=7, seed=3, **options)
    return list(DataLoader(loader, batch_size=4, num_workers=num_workers))


def _assert_same(a, b) -> None:
    if isinstance(a, dict):
        assert list(a) == list(b)
        for key in a:
            _assert_same(a[key], b[key])
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b)
    else:
        assert a == b


@pytest.mark.parametrize(("world_size", "num_workers"), [(1, 0), (2, 2)])
def test_loader_gives_the_same_batches(both, monkeypatch, world_size, num_workers) -> None:
    step, episode = both
    for rank in range(world_size):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", str(world_size))
        a = _batches(step.path, num_workers, extra_keys=["sim_state"])
        b = _batches(episode.path, num_workers, extra_keys=["sim_state"])
        assert len(a) == len(b) > 0
        for batch_a, batch_b in zip(a, b, strict=True):
            _assert_same(batch_a, batch_b)


def test_resampled_loader_gives_the_same_samples(both) -> None:
    step, episode = both
    a, b = (
        list(make_loader(d.path, cameras=[], resampled=True, epoch_length=40, seed=5)) for d in both
    )
    assert len(a) == len(b) == 40
    for x, y in zip(a, b, strict=True):
        _assert_same(x, y)


def test_exports_read_the_same_episodes(both) -> None:
    step, episode = both
    a, b = (list(read_episodes(load_source(d.path))) for d in both)
    assert [e.record for e in a] == [e.record for e in b]
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x.sim_states, y.sim_states)
        assert x.frames == y.frames


def test_depth_and_segmentation_members(tmp_path) -> None:
    rng = np.random.default_rng(4)
    length = 3
    ep = Episode(
        index=7,
        shard=0,
        instruction='lift the "red" cube \u2192 up',  # escapes in meta.json
        seed=1,
        actions=rng.normal(size=(length, 7)),
        states=rng.normal(size=(length, 9)),
        sim_states=rng.normal(size=(length, 4)),
        images={"cam": [b"\xff\xd8jpeg%d\xff\xd9" % t for t in range(length)]},
        provenance={},
        depth={"cam": [encode_depth_png(rng.uniform(0.1, 2, (4, 5))) for _ in range(length)]},
        segmentation={
            "cam": [encode_segmentation_png(rng.integers(0, 3, (4, 5)), 8) for _ in range(length)]
        },
    )
    for layout in ("step", "episode"):
        (tmp_path / layout).mkdir()
        write_shard([ep], tmp_path / layout, 0, layout)
    with open(tmp_path / "step" / "shard-000000.tar", "rb") as a:
        with open(tmp_path / "episode" / "shard-000000.tar", "rb") as b:
            assert list(tario.iter_steps(b, "e")) == list(tario.iter_tar(a, "s"))
    assert "e00000007.t0002.cam_depth.png" in _tar_names(tmp_path / "episode" / "shard-000000.tar")


def _rewrite(src: Path, dst: Path, change) -> None:
    """Copy the tar `src` to `dst`, passing each (name, data) through `change`."""
    with tarfile.open(src) as tar, tarfile.open(dst, "w", format=tarfile.PAX_FORMAT) as out:
        for member in tar.getmembers():
            name, data = change(member.name, tar.extractfile(member).read())
            info = tarfile.TarInfo(name)
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda n, d: (n, d[:-28]) if n.endswith("action.npy") else (n, d),
            r"episode sample e00000000: action.npy",
        ),
        (
            lambda n, d: (n.replace("t0002.", "t0009."), d),
            r"episode sample e00000000: member t0009.agentview.jpg is past the episode's 3 steps",
        ),
        (
            lambda n, d: (n.replace("episode.json", "x.json"), d),
            r"episode sample e00000000: no episode.json",
        ),
    ],
)
def test_a_damaged_episode_sample_names_itself(both, tmp_path, change, message) -> None:
    step, episode = both
    damaged = tmp_path / "shard.tar"
    _rewrite(episode.shard(0), damaged, change)
    with pytest.raises(DatasetError, match=message):
        list(tario.read_samples(damaged))


def test_verify_reports_a_damaged_episode_shard(both, tmp_path) -> None:
    _, episode = both
    copy = tmp_path / "copy"
    shutil.copytree(episode.path, copy)
    _rewrite(
        episode.shard(0),
        shards_dir(copy) / "shard-000000.tar",
        lambda n, d: (
            (n, json.dumps({"episode": 0, "length": 2}).encode())
            if n.endswith("episode.json")
            else (n, d)
        ),
    )
    problems = verify_dataset(copy)
    assert any("shard-000000.tar" in p and "episode.json must be an object" in p for p in problems)


def test_spec_field_and_dataset_info() -> None:
    spec = load_spec(SPECS / "lift.yaml", {"output.shard_layout": "episode"})
    assert spec.output.shard_layout == "episode"
    assert load_spec(SPECS / "lift.yaml").output.shard_layout == "step"
    with pytest.raises(SpecError, match="shard_layout"):
        load_spec(SPECS / "lift.yaml", {"output.shard_layout": "frames"})
    assert dataset_shard_layout(None) == "step"
    assert dataset_shard_layout({"spec": {"output": {"shard_layout": "episode"}}}) == "episode"
    with pytest.raises(DatasetError, match="shard_layout"):
        dataset_shard_layout({"shard_layout": "frames"})
