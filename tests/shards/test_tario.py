"""One strict tar reader (`demofactory.shards.tario`) behind every path that reads shards.

A tiny real dataset is written with the project's writer, one shard of it is damaged in four
ways, and the damaged shard is fed to each reader: the training loader, verify, stats, preview
and the two exports. Each must fail with the same `TarFormatError` (the shard's path, the byte
offset, the member), none may quietly return fewer samples. The damaged shard is re-listed in
manifest.json (size and sha256), as if written so: the manifest's checksum would otherwise
refuse it before any tar header is parsed, and the tar reader is what is tested here.
"""

from __future__ import annotations

import dataclasses
import io
import pickle
import re
import shutil
import tarfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import webdataset as wds
from demofactory.build.preview import write_episode_videos
from demofactory.shards import (
    DatasetError,
    Episode,
    load_manifest,
    save_manifest,
    sha256_file,
    shards_dir,
)
from demofactory.shards.dataset import write_dataset
from demofactory.shards.export_lerobot import export_lerobot
from demofactory.shards.export_robomimic import export_robomimic
from demofactory.shards.loader import make_loader
from demofactory.shards.stats import compute_stats
from demofactory.shards.tario import TarFormatError, iter_tar, read_samples
from demofactory.shards.verify import verify_dataset
from PIL import Image

WIDTH, HEIGHT = 16, 12
LENGTHS = (3, 4, 2)  # episodes 0, 1, 2 of shard 0: 9 samples, 6 members each
SHARD = "shard-000000.tar"


def _jpeg(value: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (WIDTH, HEIGHT), (value, 255 - value, 90)).save(buffer, format="JPEG")
    return buffer.getvalue()


def _build(root: Path) -> Path:
    rng = np.random.default_rng(0)
    episodes = [
        Episode(
            index=index,
            shard=0,
            instruction="lift the cube",
            seed=10 + index,
            actions=rng.uniform(-1, 1, size=(length, 7)),
            states=rng.normal(size=(length, 9)),
            sim_states=rng.normal(size=(length, 5)),
            images={"scene": [_jpeg(20 * index + t) for t in range(length)]},
            provenance={"source_demo": "demo_1"},
        )
        for index, length in enumerate(LENGTHS)
    ]
    task = {"env": "Lift", "robot": "Panda", "controller": "OSC_POSE", "control_freq": 10}
    info = {
        "name": "tiny",
        "fps": 10,
        "env": "Lift",
        "robot": "Panda",
        "cameras": [{"name": "scene", "width": WIDTH, "height": HEIGHT, "format": "jpg"}],
        "state": {"dim": 9, "layout": [["eef_pos", 3], ["eef_quat_xyzw", 4], ["gripper_qpos", 2]]},
        "action": {"dim": 7, "layout": [["delta_pos", 3], ["delta_axis_angle", 3], ["gripper", 1]]},
        "sim_state": {"dim": 5, "layout": "time, qpos, qvel (MuJoCo, flattened)"},
        "spec": {"name": "tiny", "task": {**task, "horizon": 50}},
    }
    write_dataset(root, episodes, info)
    return root


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    return _build(tmp_path_factory.mktemp("tario") / "tiny")


def _headers(data: bytes) -> list[tuple[str, int, int]]:
    """(name, header offset, size) of each member, as the writer laid them out."""
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return [(m.name, m.offset, m.size) for m in tar]


# ---------------------------------------------------------------- four kinds of damage
# Each takes the shard's bytes and returns the damaged bytes and the reason iter_tar must give.


def _flipped_header_byte(data: bytes) -> tuple[bytes, str]:
    headers = _headers(data)
    _, at, _ = headers[len(headers) // 2]
    damaged = bytearray(data)
    damaged[at + 1] ^= 0xFF  # one byte of the name: the checksum no longer holds
    return bytes(damaged), rf"not a readable tar file: header at byte {at}: bad checksum"


def _truncated_last_member(data: bytes) -> tuple[bytes, str]:
    name, at, size = _headers(data)[-1]
    cut = at + 512 + size // 2
    return data[:cut], rf"truncated tar file: member {re.escape(name)} \(header at byte {at}\) "


def _bad_size_field(data: bytes) -> tuple[bytes, str]:
    headers = _headers(data)
    _, at, _ = headers[len(headers) // 2]
    damaged = bytearray(data)
    damaged[at + 124 : at + 136] = b"0000000z012\0"
    damaged[at + 148 : at + 156] = b" " * 8  # a checksum that holds: the size field is tested
    damaged[at + 148 : at + 156] = b"%06o\0 " % sum(damaged[at : at + 512])
    return bytes(
        damaged
    ), rf"not a readable tar file: header at byte {at}: size field .* is not an octal"


def _zeroed_header(data: bytes) -> tuple[bytes, str]:
    # An all-zero block is the end of an archive: tarfile stops there without a word.
    headers = _headers(data)
    _, at, _ = headers[len(headers) // 2]
    damaged = bytearray(data)
    damaged[at : at + 512] = bytes(512)
    return bytes(
        damaged
    ), rf"not a readable tar file: an all-zero block at byte {at} ends the archive, yet"


DAMAGE = [_flipped_header_byte, _truncated_last_member, _bad_size_field, _zeroed_header]


def _damaged_copy(clean: Path, tmp_path: Path, damage) -> tuple[Path, Path, str]:
    """A copy of the dataset with shard 0 damaged and re-listed: (dir, shard path, reason)."""
    root = tmp_path / "tiny"
    shutil.copytree(clean, root)
    shard = shards_dir(root) / SHARD
    data, reason = damage(shard.read_bytes())
    shard.write_bytes(data)
    manifest = load_manifest(root)
    entry = dataclasses.replace(
        manifest.by_name()[SHARD], bytes=shard.stat().st_size, sha256=sha256_file(shard)
    )
    save_manifest(root, manifest.with_shard(entry))
    return root, shard, reason


# ---------------------------------------------------------------- every reader


def _loader(root: Path, tmp_path: Path) -> object:
    return list(make_loader(root, cameras=[], normalization="none"))


def _stats(root: Path, tmp_path: Path) -> object:
    return compute_stats(root, [SHARD])


def _preview(root: Path, tmp_path: Path) -> object:
    return write_episode_videos(root, tmp_path / "preview", episode=len(LENGTHS) - 1)


def _lerobot(root: Path, tmp_path: Path) -> object:
    return export_lerobot(root, tmp_path / "lerobot")


def _robomimic(root: Path, tmp_path: Path) -> object:
    return export_robomimic(root, tmp_path / "out.hdf5")


READERS: dict[str, Callable[[Path, Path], object]] = {
    "loader": _loader,
    "stats": _stats,
    "preview": _preview,
    "lerobot": _lerobot,
    "robomimic": _robomimic,
}


def test_the_clean_dataset_reads_whole_on_every_path(clean, tmp_path) -> None:
    # The baseline: what the damaged copies below must not quietly fall short of.
    assert verify_dataset(clean) == []
    assert len(_loader(clean, tmp_path)) == sum(LENGTHS)
    assert _stats(clean, tmp_path)["action"].count == sum(LENGTHS)
    assert len(_preview(clean, tmp_path)) == 1
    assert _lerobot(clean, tmp_path)["frames"] == sum(LENGTHS)
    assert _robomimic(clean, tmp_path)["total"] == sum(LENGTHS)


def test_read_samples_matches_webdataset(clean) -> None:
    shard = shards_dir(clean) / SHARD
    ours = [(s.key, dict(s.members)) for s in read_samples(shard)]
    theirs = [
        (s["__key__"], {k: v for k, v in s.items() if not k.startswith("__")})
        for s in wds.WebDataset([str(shard)], shardshuffle=False)
    ]
    assert len(ours) == sum(LENGTHS)
    assert ours == theirs
    only = [dict(s.members) for s in read_samples(shard, lambda suffix: suffix == "action.npy")]
    assert only == [{"action.npy": members["action.npy"]} for _, members in theirs]


@pytest.mark.parametrize("damage", DAMAGE, ids=lambda f: f.__name__.strip("_"))
def test_the_tar_reader_names_the_shard_offset_and_member(clean, tmp_path, damage) -> None:
    _, shard, reason = _damaged_copy(clean, tmp_path, damage)
    with open(shard, "rb") as stream, pytest.raises(TarFormatError) as caught:
        list(iter_tar(stream, str(shard)))
    assert caught.value.source == str(shard)
    assert re.match(reason, caught.value.reason), caught.value.reason
    assert str(caught.value) == f"{shard}: {caught.value.reason}"


def test_tarfile_alone_would_end_quietly(clean, tmp_path) -> None:
    # Why the reader is strict: Python's tarfile ends the archive at the damaged header.
    _, shard, _ = _damaged_copy(clean, tmp_path, _zeroed_header)
    with tarfile.open(shard) as tar:
        assert 0 < len(tar.getmembers()) < 6 * sum(LENGTHS)


@pytest.mark.parametrize("damage", DAMAGE, ids=lambda f: f.__name__.strip("_"))
@pytest.mark.parametrize("reader", READERS, ids=str)
def test_every_reader_raises_the_same_error(clean, tmp_path, damage, reader) -> None:
    root, shard, _ = _damaged_copy(clean, tmp_path, damage)
    with open(shard, "rb") as stream, pytest.raises(TarFormatError) as direct:
        list(iter_tar(stream, str(shard)))
    expected = str(direct.value)  # "<shard path>: <reason with offset and member>"
    # The exports put the dataset's path in front (a DatasetError still); the rest raise the
    # reader's TarFormatError itself.
    with pytest.raises(DatasetError) as caught:
        READERS[reader](root, tmp_path)
    assert expected in str(caught.value)
    if reader not in ("lerobot", "robomimic"):
        assert type(caught.value) is TarFormatError


@pytest.mark.parametrize("damage", DAMAGE, ids=lambda f: f.__name__.strip("_"))
def test_verify_reports_the_error_as_the_shards_problem(clean, tmp_path, damage) -> None:
    root, shard, _ = _damaged_copy(clean, tmp_path, damage)
    with open(shard, "rb") as stream, pytest.raises(TarFormatError) as direct:
        list(iter_tar(stream, str(shard)))
    problems = verify_dataset(root)
    assert f"shards/{SHARD}: {direct.value.reason}" in problems, problems
    assert problems[-1].startswith("stats.json: not checked")


def test_the_error_is_a_dataset_error_that_pickles() -> None:
    error = TarFormatError("shards/shard-000000.tar", "truncated tar file: the stream is empty")
    assert isinstance(error, DatasetError)
    copy = pickle.loads(pickle.dumps(error))  # Ray carries errors between processes
    assert (type(copy), copy.source, copy.reason, str(copy)) == (
        TarFormatError,
        error.source,
        error.reason,
        str(error),
    )


# ---------------------------------------------------------------- pax and GNU extension headers


def _extended_tar(tar_format: int) -> bytes:
    """A tar whose first member needs an extension header (a long name), then two plain ones."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tar_format, encoding="utf-8") as tar:
        for name, data in (("n" * 150 + ".jpg", b"long"), ("a.npy", b"x" * 700), ("b.json", b"{}")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.mark.parametrize("tar_format", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT], ids=["pax", "gnu"])
def test_a_corrupt_header_after_an_extension_header_is_refused(tar_format) -> None:
    # tarfile, which once read these archives from the first extension header on, ends them
    # quietly at the corrupt header of b.json; the strict reader reads extensions itself.
    data = bytearray(_extended_tar(tar_format))
    at = next(offset for name, offset, _ in _headers(bytes(data)) if name == "b.json")
    assert [n for n, _ in iter_tar(io.BytesIO(bytes(data)), "t.tar")][1:] == ["a.npy", "b.json"]
    data[at + 1] ^= 0xFF
    with tarfile.open(fileobj=io.BytesIO(bytes(data))) as tar:
        assert [m.name for m in tar][1:] == ["a.npy"]  # quietly one short
    with pytest.raises(TarFormatError, match=rf"^t.tar: .* header at byte {at}: bad checksum"):
        list(iter_tar(io.BytesIO(bytes(data)), "t.tar"))


@pytest.mark.parametrize(
    ("records", "at", "message"),  # at: the pax header (0), or the member it extends (1024)
    [
        (b"30 path=short\n", 0, "malformed pax record at byte 0"),
        (b"13 path=abc\n", 0, "malformed pax record at byte 0"),
        (b"x path=abc\n", 0, "malformed pax record at byte 0"),
        (b"11 size=-1\n", 1024, r"pax size '-1' is not a number >= 0"),
        (b"23 GNU.sparse.size=100\n", 1024, "a GNU sparse file"),
    ],
)
def test_malformed_or_sparse_pax_fields_are_refused(records, at, message) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        pax = tarfile.TarInfo("PaxHeaders/a.txt")
        pax.type, pax.size = tarfile.XHDTYPE, len(records)
        tar.addfile(pax, io.BytesIO(records))
        info = tarfile.TarInfo("a.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"abc"))
    with pytest.raises(TarFormatError, match=rf"^t.tar: .*header at byte {at}: {message}"):
        list(iter_tar(io.BytesIO(buffer.getvalue()), "t.tar"))
