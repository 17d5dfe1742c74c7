"""The streaming loader over tiny real datasets: real shards, real JPEGs, real DataLoader
workers."""

from __future__ import annotations

import dataclasses
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
from demofactory.shards import (
    DatasetError,
    Episode,
    load_manifest,
    save_manifest,
    sha256_file,
    shards_dir,
    tario,
)
from demofactory.shards.dataset import write_dataset
from demofactory.shards.loader import (
    Normalizer,
    RawEpisode,
    RawSample,
    ShardDataset,
    ShardTask,
    Split,
    _decode_jpeg,
    decode_episodes,
    load_npy,
    make_loader,
)
from demofactory.shards.stages import _jpeg_components
from demofactory.shards.tario import iter_tar
from PIL import Image
from torch.utils.data import DataLoader

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
        actions=rng.normal(
            loc=np.arange(ACTION_DIM), scale=0.5 + np.arange(ACTION_DIM), size=(length, ACTION_DIM)
        ),
        states=rng.normal(loc=-1.0, scale=3.0, size=(length, STATE_DIM)),
        sim_states=rng.normal(size=(length, 5)),
        images={camera: [_jpeg(rng) for _ in range(length)] for camera in CAMERAS},
        provenance={"source_demo": "demo_0"},
    )


def build_dataset(root: Path, layout=LAYOUT, seed: int = 0) -> BuiltDataset:
    """Write a whole dataset (shards, manifest, stats, episodes, dataset_info) under `root`."""
    rng = np.random.default_rng(seed)
    episodes: dict[int, Episode] = {}
    index = 0
    for shard, lengths in enumerate(layout):
        for length in lengths:
            episodes[index] = _episode(index, shard, length, rng)
            index += 2  # gaps in the global indices are allowed
    cameras = [{"name": c, "width": WIDTH, "height": HEIGHT, "format": "jpg"} for c in CAMERAS]
    write_dataset(
        root, list(episodes.values()), {"name": "tiny", "fps": 20, "cameras": cameras}, len(layout)
    )
    return BuiltDataset(root, episodes)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> BuiltDataset:
    return build_dataset(tmp_path_factory.mktemp("loader") / "tiny")


def _unbatch(batches) -> list[dict]:
    """DataLoader batches (default collation) -> one dict per sample, tensors per sample."""
    samples = []
    for batch in batches:
        for i in range(len(batch["episode"])):
            samples.append(
                {
                    "episode": int(batch["episode"][i]),
                    "step": int(batch["step"][i]),
                    "instruction": batch["instruction"][i],
                    "state": batch["state"][i],
                    "action_chunk": batch["action_chunk"][i],
                    "action_mask": batch["action_mask"][i],
                    "images": {c: images[i] for c, images in batch["images"].items()},
                }
            )
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
def test_fewer_shards_than_splits_still_exactly_once(
    dataset, n_shards, world_size, num_workers, all_busy
) -> None:
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
    expected = Counter(
        {
            (ep.index, t): 1
            for ep in dataset.episodes.values()
            if f"shard-{ep.shard:06d}.tar" in names
            for t in range(ep.length)
        }
    )
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
        assert s["action_chunk"].dtype == torch.float32 and s["action_chunk"].shape == (
            horizon,
            ACTION_DIM,
        )
        assert s["action_mask"].dtype == torch.bool and s["action_mask"].shape == (horizon,)
        rows = [min(t + k, ep.length - 1) for k in range(horizon)]
        np.testing.assert_array_equal(s["action_chunk"].numpy(), ep.actions[rows])

    floats = next(
        iter(
            make_loader(
                dataset.path, cameras=["agentview"], normalization="none", image_dtype="float32"
            )
        )
    )
    assert list(floats["images"]) == ["agentview"]
    image = floats["images"]["agentview"]
    assert image.dtype == torch.float32 and 0.0 <= image.min() and image.max() <= 1.0
    first = dataset.episodes[floats["episode"]].images["agentview"][floats["step"]]
    reference = np.asarray(Image.open(io.BytesIO(first)).convert("RGB")).transpose(2, 0, 1) / 255.0
    np.testing.assert_allclose(image.numpy(), reference, atol=1e-6)


def test_action_chunks_at_the_episode_end(dataset) -> None:
    by_key = {
        (s["episode"], s["step"]): s
        for s in make_loader(dataset.path, action_horizon=4, normalization="none")
    }
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
    np.testing.assert_allclose(
        ds.normalizer.unnormalize("action", y)[inside], x[inside], rtol=1e-5, atol=1e-5
    )


def test_brace_pattern_and_path_list_match_the_directory(dataset) -> None:
    def contents(source):
        return sorted(
            (
                s["episode"],
                s["step"],
                s["state"].numpy().tobytes(),
                s["action_chunk"].numpy().tobytes(),
            )
            for s in make_loader(source, cameras=[], action_horizon=2)
        )

    from_dir = contents(dataset.path)
    brace = str(shards_dir(dataset.path) / "shard-{000000..000005}.tar")
    assert contents(brace) == from_dir  # stats.json found beside the shards folder
    assert contents(sorted(shards_dir(dataset.path).glob("*.tar"))) == from_dir
    assert len(from_dir) == sum(dataset.steps().values())


def test_shuffle_changes_order_not_contents_and_is_seeded(dataset) -> None:
    def order(**kw):
        return _keys(
            make_loader(dataset.path, cameras=[], normalization="none", action_horizon=1, **kw)
        )

    plain = order()
    shuffled = order(shuffle_buffer=8, seed=1)
    assert shuffled != plain and Counter(shuffled) == Counter(plain)
    assert order(shuffle_buffer=8, seed=1) == shuffled
    assert order(shuffle_buffer=8, seed=2) != shuffled

    ds = make_loader(dataset.path, cameras=[], normalization="none", shuffle_buffer=8, seed=1)
    ds.set_epoch(1)
    assert _keys(ds) != shuffled


def test_resampled_yields_exactly_epoch_length(dataset) -> None:
    ds = make_loader(
        dataset.path, action_horizon=2, resampled=True, epoch_length=37, shuffle_buffer=5
    )
    samples = _unbatch(DataLoader(ds, batch_size=4, num_workers=2))
    assert len(samples) == 37
    assert set(_keys(samples)) <= set(dataset.steps())
    assert len(list(ds)) == 37  # no workers: the same count

    endless = make_loader(dataset.path, cameras=[], normalization="none", resampled=True)
    n = 3 * sum(dataset.steps().values())
    assert len(list(itertools.islice(endless, n))) == n  # goes on past one pass over the data


def _relist(dataset_dir: Path, path: Path) -> None:
    """Record a damaged shard's size and sha256 in the manifest, as if it had been written so
    (the loader checks both before reading a shard; these tests are about what it checks after)."""
    manifest = load_manifest(dataset_dir)
    entry = manifest.by_name()[path.name]
    fixed = dataclasses.replace(entry, bytes=path.stat().st_size, sha256=sha256_file(path))
    save_manifest(dataset_dir, manifest.with_shard(fixed))


def test_a_damaged_shard_is_refused_before_it_is_read(dataset, tmp_path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(dataset.path, copy)
    path = shards_dir(copy) / "shard-000000.tar"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(
        DatasetError, match=r"shard-000000.tar: sha256 does not match manifest.json"
    ):
        list(make_loader(copy, cameras=[], normalization="none"))


def test_a_shard_with_a_corrupt_header_raises(dataset, tmp_path) -> None:
    # Python's tarfile would end the tar quietly at this header and drop episode 2 whole;
    # demofactory.shards.tario checks every header's checksum.
    copy = tmp_path / "copy"
    shutil.copytree(dataset.path, copy)
    path = shards_dir(copy) / "shard-000000.tar"
    with tarfile.open(path) as tar:
        offset = next(m.offset for m in tar if m.name.startswith("e00000002_t0000."))
    data = bytearray(path.read_bytes())
    data[offset + 1] ^= 0xFF
    path.write_bytes(bytes(data))
    _relist(copy, path)  # past the manifest's checksum: the reader's own check is what is tested
    with pytest.raises(
        DatasetError,
        match=rf"shard-000000.tar: not a readable tar file: header at byte {offset}: "
        r"bad checksum \(\d+ stored, \d+ computed\)",
    ):
        list(make_loader(copy, cameras=[], normalization="none"))


def test_a_valid_shard_short_of_its_manifest_count_raises(dataset, tmp_path) -> None:
    # A readable tar that lacks episode 2 (cut at a member boundary, end blocks rewritten):
    # only the manifest's sample count can tell.
    copy = tmp_path / "copy"
    shutil.copytree(dataset.path, copy)
    path = shards_dir(copy) / "shard-000000.tar"
    with tarfile.open(path) as tar:
        kept = [(m, tar.extractfile(m).read()) for m in tar if not m.name.startswith("e00000002_")]
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for member, data in kept:
            tar.addfile(member, io.BytesIO(data))
    _relist(copy, path)  # past the manifest's checksum: only its sample count can tell
    with pytest.raises(
        DatasetError, match=r"shard-000000.tar: holds 3 samples, manifest.json lists 8"
    ):
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


# ---------------------------------------------------------------- demofactory.shards.tario


class _Trickle:
    """A stream that returns at most `step` bytes a read, like a pipe or a socket."""

    def __init__(self, data: bytes, step: int):
        self.data, self.step = data, step

    def read(self, n: int = -1) -> bytes:
        n = self.step if n is None or n < 0 else min(n, self.step)
        chunk, self.data = self.data[:n], self.data[n:]
        return chunk


def _tar_bytes(members, tar_format: int, pax_headers=None) -> bytes:
    """A tar written by Python's tarfile; members: (name, data) files, or (name, DIRTYPE |
    SYMTYPE)."""
    buffer = io.BytesIO()
    with tarfile.open(
        fileobj=buffer, mode="w", format=tar_format, encoding="utf-8", pax_headers=pax_headers
    ) as tar:
        for name, content in members:
            info = tarfile.TarInfo(name)
            if content in (tarfile.DIRTYPE, tarfile.SYMTYPE):
                info.type = content
                info.linkname = "a.txt" if content == tarfile.SYMTYPE else ""
                tar.addfile(info)
            else:
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def _tarfile_files(data: bytes) -> list[tuple[str, bytes]]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r|") as tar:
        return [(m.name, tar.extractfile(m).read()) for m in tar if m.isfile()]


_PLAIN = [
    ("a.txt", b"x"),
    ("empty", b""),
    ("dir", tarfile.DIRTYPE),
    ("dir/block", bytes(range(256)) * 2),  # exactly one block: no padding
    ("link", tarfile.SYMTYPE),
    ("big", np.random.default_rng(0).bytes(3 * 1024 * 1024 + 7)),  # spans several chunks
]
# ustar: prefix + name; pax, GNU: extended
_PREFIXED = [("dir/" + "p" * 120 + "/file.bin", b"\xff" * 513)]
_EXTENDED = [
    ("n" * 150 + ".jpg", b"long name"),  # pax: an x header; GNU: an L header
    ("caf\u00e9.json", b"{}"),  # pax: an x header (not ASCII)
    ("z.npy", b"after the extension headers"),
]
_USTAR, _GNU, _PAX = tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT


@pytest.mark.parametrize(
    ("tar_format", "members", "pax_headers", "extended"),
    [
        (_USTAR, _PLAIN + _PREFIXED, None, False),
        (_GNU, _PLAIN, None, False),
        (_PAX, _PLAIN, None, False),
        (_GNU, _PLAIN + _PREFIXED + _EXTENDED, None, True),
        (_PAX, _PLAIN + _PREFIXED + _EXTENDED, None, True),
        (_PAX, _PLAIN, {"comment": "a global header"}, True),
    ],
)
@pytest.mark.parametrize("step", [None, 1000])
def test_tar_reader_matches_tarfile(
    monkeypatch, tar_format, members, pax_headers, extended, step
) -> None:
    calls = []
    original = tario._extend
    monkeypatch.setattr(tario, "_extend", lambda *args: calls.append(1) or original(*args))
    data = _tar_bytes(members, tar_format, pax_headers)
    stream = io.BytesIO(data) if step is None else _Trickle(data, step)  # step: short reads
    read = list(iter_tar(stream, "t.tar"))
    assert read == _tarfile_files(data)
    assert [name for name, _ in read][:3] == ["a.txt", "empty", "dir/block"]
    assert bool(calls) == extended  # pax or GNU extension headers read, not passed over


def test_tar_reader_reads_write_shard_output_without_extension_headers(
    dataset, monkeypatch
) -> None:
    # write_shard asks for PAX, but its short ASCII names need no extension header: every
    # member is a plain ustar header.
    monkeypatch.setattr(
        "demofactory.shards.tario._extend",
        lambda *args: pytest.fail("an extension header in a shard"),
    )
    for shard in (0, 2, 4):  # shard 4 is an empty tar
        path = dataset.shard(shard)
        with open(path, "rb") as f:
            read = list(iter_tar(f, str(path)))
        assert read == _tarfile_files(path.read_bytes())
        assert len(read) == 6 * sum(LAYOUT[shard])  # 2 cameras, 3 arrays, meta per step


def test_tar_reader_accepts_a_signed_checksum() -> None:
    # Some old tars sum the header as signed chars; tarfile accepts both, and so does iter_tar.
    data = bytearray(_tar_bytes([("x" * 10, b"abc")], tarfile.USTAR_FORMAT))
    data[0] = 0xE9  # a latin-1 name byte: the signed sum is 256 lower
    data[148:156] = b" " * 8
    signed = sum(b - 256 if b >= 128 else b for b in data[:512])
    data[148:156] = b"%06o\0 " % signed
    assert list(iter_tar(io.BytesIO(bytes(data)), "t.tar")) == [("\udce9" + "x" * 9, b"abc")]


def test_tar_reader_refuses_a_bad_checksum() -> None:
    data = bytearray(_tar_bytes([("a.txt", b"abc"), ("b.txt", b"def")], tarfile.USTAR_FORMAT))
    data[1024 + 2] ^= 0x01  # b.txt's header: one bit of its name
    reader = iter_tar(io.BytesIO(bytes(data)), "t.tar")
    assert next(reader) == ("a.txt", b"abc")
    with pytest.raises(
        DatasetError, match=r"^t.tar: not a readable tar file: header at byte 1024: bad checksum"
    ):
        next(reader)
    data[1024 + 2] ^= 0x01
    for size in (b"00000000z03\0", b"-0000000003\0", b"\xff" * 12):  # checksums fixed up
        data[1024 + 124 : 1024 + 136] = size
        data[1024 + 148 : 1024 + 156] = b" " * 8
        data[1024 + 148 : 1024 + 156] = b"%06o\0 " % sum(data[1024:1536])
        with pytest.raises(
            DatasetError, match=r"header at byte 1024: size field .* is not an octal number >= 0"
        ):
            list(iter_tar(io.BytesIO(bytes(data)), "t.tar"))


@pytest.mark.parametrize(
    ("cut", "message"),
    [
        (0, "the stream is empty"),
        (300, "the stream ends at byte 300 without the end-of-archive block"),
        (512 + 2, r"member a.txt \(header at byte 0\) has 2 of its 3 bytes"),
        (1536 + 100, r"member b.bin \(header at byte 1024\) has 100 of its 600 bytes"),
        (1024 + 1536, "the stream ends at byte 2560 without the end-of-archive block"),
    ],
)
def test_tar_reader_refuses_a_truncated_archive(cut, message) -> None:
    data = _tar_bytes([("a.txt", b"abc"), ("b.bin", b"\x01" * 600)], tarfile.USTAR_FORMAT)
    with pytest.raises(DatasetError, match=rf"^t.tar: truncated tar file: {message}"):
        list(iter_tar(io.BytesIO(data[:cut]), "t.tar"))


def test_a_truncated_shard_names_the_shard(dataset, tmp_path) -> None:
    path = tmp_path / "shard-000000.tar"
    path.write_bytes(dataset.shard(0).read_bytes()[:40_000])
    with pytest.raises(DatasetError, match=rf"^{path}: truncated tar file"):
        list(make_loader(path, cameras=[], normalization="none"))


# ---------------------------------------------------------------- .npy members and JPEGs


def _npy_bytes(array: np.ndarray, version=None, allow_pickle: bool = False) -> bytes:
    buffer = io.BytesIO()
    if version is None:
        np.save(buffer, array, allow_pickle=allow_pickle)
    else:
        np.lib.format.write_array(buffer, array, version=version, allow_pickle=allow_pickle)
    return buffer.getvalue()


_ARRAYS = [
    np.arange(7, dtype=np.float32),
    np.linspace(-1, 1, 12).reshape(3, 4),
    np.asfortranarray(np.arange(6, dtype=np.int16).reshape(2, 3)),
    np.arange(5, dtype=">f8"),
    np.array([True, False, True]),
    np.array(3, dtype=np.uint8),
    np.zeros((0, 5), dtype=np.float32),
    np.array([(1, 2.5)], dtype=[("i", "<i4"), ("f", "<f8")]),
]


@pytest.mark.filterwarnings("ignore:Stored array in format 3.0")
def test_npy_members_parse_like_np_load() -> None:
    # Twice round, so the second reads every header from the cache; interleaved, so a cached
    # header of one array must not be used for another.
    cases = [(a, None) for a in _ARRAYS] + [(_ARRAYS[1], (2, 0))]
    # np.save writes version 3.0
    cases.append((np.array([(1,)], dtype=[("\u00fc\u03c0", "<i4")]), None))
    for _ in range(2):
        for array, version in cases:
            loaded = load_npy(_npy_bytes(array, version))
            assert loaded.dtype == array.dtype and loaded.shape == array.shape
            np.testing.assert_array_equal(loaded, array)
            assert loaded.flags.c_contiguous == array.flags.c_contiguous  # Fortran order kept
            assert loaded.flags.f_contiguous == array.flags.f_contiguous


def test_npy_members_that_are_pickles_or_broken_are_refused() -> None:
    pickled = _npy_bytes(np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="object array .* pickled objects are refused"):
        load_npy(pickled)
    with pytest.raises(
        ValueError, match="holds 8 bytes after its header, float32 \\(7,\\) needs 28"
    ):
        load_npy(_npy_bytes(np.arange(7, dtype=np.float32))[:-20])
    with pytest.raises(ValueError, match="not a .npy file"):
        load_npy(b'{"step": 0}')

    # In the loader: a DatasetError naming the shard and the member.
    task = ShardTask("shard-000009.tar")
    members = {"action.npy": pickled, "state.npy": _npy_bytes(np.zeros(3))}
    episode = RawEpisode(task, 0, 0, "lift", (RawSample(task, "e00000000_t0000", members),))
    with pytest.raises(
        DatasetError, match=r"^shard-000009.tar: e00000000_t0000.action.npy: holds an object array"
    ):
        list(decode_episodes([episode], cameras=[], normalizer=Normalizer("none", None)))


@pytest.mark.parametrize("mode", ["RGB", "L", "CMYK"])
def test_jpegs_of_any_mode_decode_to_rgb(mode) -> None:
    pixels = np.random.default_rng(1).integers(0, 256, size=(HEIGHT, WIDTH, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).convert(mode).save(buffer, format="JPEG", quality=90)
    reference = np.asarray(Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")).transpose(
        2, 0, 1
    )
    image = _decode_jpeg(buffer.getvalue(), "uint8")
    assert image.shape == (3, HEIGHT, WIDTH) and image.is_contiguous()
    np.testing.assert_array_equal(image.numpy(), reference)
    image[0, 0, 0] = 0  # a writable copy, not a view of PIL's bytes


@pytest.mark.parametrize(
    "options",
    [
        {"quality": 90},  # the factory's frames: PIL's defaults, 4:2:0 chroma
        {"quality": 75, "subsampling": 0},  # 4:4:4
        {"quality": 95, "subsampling": 1},  # 4:2:2
        {"quality": 90, "progressive": True},
        {"quality": 90, "optimize": True, "size": (37, 23)},  # odd sizes: edge upsampling
    ],
)
def test_the_fast_jpeg_path_gives_pils_pixels(options) -> None:
    # Colour frames decode through OpenCV; the pixels must be PIL's, bit for bit.
    options = dict(options)
    width, height = options.pop("size", (84, 84))
    y, x = np.mgrid[0:height, 0:width]
    noise = np.random.default_rng(2).integers(0, 60, size=(height, width, 3))
    pixels = np.clip(np.stack([3 * x, 4 * y, 2 * (x + y)], -1) + noise, 0, 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", **options)
    data = buffer.getvalue()
    assert data.endswith(b"\xff\xd9") and _jpeg_components(data) == 3  # takes the fast path
    reference = np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).transpose(2, 0, 1)
    np.testing.assert_array_equal(_decode_jpeg(data, "uint8").numpy(), reference)
    with pytest.raises(OSError, match="truncated"):  # cut short: refused, not decoded in part
        _decode_jpeg(data[: len(data) // 2], "uint8")


def test_make_loader_takes_loader_config_fields_with_their_defaults_and_documents_each():
    import inspect

    from demofactory.shards.loader import LoaderConfig

    params = inspect.signature(make_loader).parameters
    fields = {f.name: f for f in dataclasses.fields(LoaderConfig)}
    assert set(params) - {"source", "stats"} == set(fields)
    for name, field in fields.items():
        if field.default is not dataclasses.MISSING:
            assert params[name].default == field.default, name
        # documented once, in LoaderConfig, and so in make_loader's help too
        assert f"    {name}:" in LoaderConfig.__doc__, name
        assert f"    {name}:" in make_loader.__doc__, name
    assert params["cameras"].default is None  # make_loader: dataset_info.json's cameras
