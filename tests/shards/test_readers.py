"""Readers beside a writer: each on a private snapshot, never the writer's files; a dataset a run
is writing is one line; the stored loader checks sha256 as the local one does.

Real datasets (tests/shards/test_loader.py's build_dataset), a real writer in a subprocess
holding the real lock (demofactory.build.run.lock_output_dir) and appending a real journal line,
a real S3-compatible server on loopback for the store's cases. The whole loop with a real
`factory run` is in tests/build/test_local_and_store.py.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest
from demofactory.cli.main import main
from demofactory.shards import DatasetError, load_manifest
from demofactory.shards.loader import make_loader
from demofactory.shards.remote import local_copy_dir
from demofactory.shards.snapshot import reading
from demofactory.shards.store import Store

from tests.shards.test_loader import build_dataset

# A writer as `factory run` is one: DIR/.lock held, one shard committed to the journal (a copy of
# shard 0's entry under a new name), then it waits until its stdin closes.
_WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from demofactory.build.run import lock_output_dir
    from demofactory.shards import load_manifest
    from demofactory.shards.journal import JournalWriter
    from demofactory.shards.writer import ShardInfo

    out = Path(sys.argv[1])
    with lock_output_dir(out):
        first = load_manifest(out).shards[0].to_json()
        journal = JournalWriter(out)
        journal.add(ShardInfo.from_json({**first, "name": "shard-000099.tar"}), {"attempts": 1})
        journal.sync()
        print("writing", flush=True)
        sys.stdin.read()
    """
)


@pytest.fixture
def tiny(tmp_path):
    return build_dataset(tmp_path / "tiny")


def _start_writer(dataset: Path) -> subprocess.Popen:
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(dataset)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdout.readline().strip() == "writing"
    return writer


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_readers_of_a_dataset_a_run_is_writing_say_so_in_one_line(tiny, capsys, tmp_path):
    before = {p.name: p.read_bytes() for p in tiny.path.iterdir() if p.is_file()}
    writer = _start_writer(tiny.path)
    try:
        for command in (
            ["verify", str(tiny.path)],
            ["export", str(tiny.path), "--to", "robomimic", str(tmp_path / "x.hdf5")],
            ["preview", str(tiny.path), "--out", str(tmp_path / "preview")],
            ["train-eval", str(tiny.path), "--spec", str(tmp_path / "spec.yaml")],
        ):
            assert main(command) == 2
            line = _one_line(capsys)
            assert line.startswith(f"error: {tiny.path}: a `factory run` is writing this dataset")
            assert f"pid {writer.pid}" in line
        with pytest.raises(DatasetError, match="is writing this dataset"):
            make_loader(tiny.path, normalization="none")
        # the snapshot `inspect` reads holds what the run has committed so far
        with reading(tiny.path, shards=False, partial=True) as snapshot:
            assert "shard-000099.tar" in load_manifest(snapshot).by_name()
    finally:
        writer.stdin.close()
        writer.wait(timeout=60)
    assert not (tmp_path / "x.hdf5").exists() and not (tmp_path / "preview").exists()
    # the writer stopped without folding its journal in: the way out, in one line
    assert main(["verify", str(tiny.path)]) == 2
    assert "stopped before it finished" in _one_line(capsys)
    assert {p.name: p.read_bytes() for p in tiny.path.iterdir() if p.is_file()} == {
        **before,
        "journal.jsonl": (tiny.path / "journal.jsonl").read_bytes(),
        ".lock": (tiny.path / ".lock").read_bytes(),
    }  # readers wrote nothing, and left nothing behind


def test_a_reader_names_the_dataset_not_its_snapshot(tiny, capsys):
    (tiny.path / "stats.json").write_text("{not json")
    assert main(["verify", str(tiny.path)]) == 2
    err = capsys.readouterr().err
    assert "snapshot-" not in err and f"{tiny.path}/stats.json" in err


def test_a_file_removed_while_the_snapshot_lists_the_folder_is_taken_again(
    tiny, capsys, monkeypatch
):
    # A run folding its journal in removes journal.jsonl: between the reader's listing of the
    # folder and its stat of that file (the CI failure of 5becf4f: "journal.jsonl: No such file").
    journal = tiny.path / "journal.jsonl"
    journal.write_text("")
    real_stat, removed = Path.stat, []

    def stat(self, *args, **kwargs):
        if self == journal and not removed:
            removed.append(self)
            journal.unlink()
        return real_stat(self, *args, **kwargs)

    monkeypatch.setattr(Path, "stat", stat)
    assert main(["verify", str(tiny.path)]) == 0, capsys.readouterr().err
    assert removed == [journal]
    assert "No such file" not in capsys.readouterr().err


def test_snapshots_are_removed_when_the_reader_ends(tiny, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("DEMOFACTORY_CACHE", str(tmp_path / "cache"))
    # a reader killed outright leaves its snapshot: the next reader removes it
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    orphan = (
        tmp_path / "cache" / "readers" / f"snapshot-{socket.gethostname()}-{ended.stdout.strip()}-x"
    )
    (orphan / "shards").mkdir(parents=True)
    assert main(["verify", str(tiny.path)]) == 0
    assert sum(1 for _ in make_loader(tiny.path, normalization="none")) > 0
    assert list((tmp_path / "cache" / "readers").iterdir()) == []


def _flip_in_npy(data: bytes) -> bytes:
    """One byte flipped inside the float values of the first action.npy member: same size."""
    import io

    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("action.npy"))
    flipped = bytearray(data)
    flipped[member.offset_data + member.size - 3] ^= 0x40
    return bytes(flipped)


def _upload(local_dir: Path, url: str) -> Store:
    store = Store(url)
    for path in sorted(p for p in local_dir.rglob("*") if p.is_file()):
        store.put_file(path, path.relative_to(local_dir).as_posix())
    return store


@pytest.mark.s3
def test_the_stored_loader_checks_sha256_before_a_sample_is_yielded(s3_env, tiny):
    bucket = s3_env.make_bucket("flip")
    url = f"s3://{bucket}/tiny"
    store = _upload(tiny.path, url)
    name = "shards/shard-000000.tar"
    damaged = _flip_in_npy(store.read_bytes(name))
    assert len(damaged) == store.size(name)
    store.write_bytes(name, damaged)
    loader = make_loader(url, action_horizon=2, normalization="none")
    yielded = []
    with pytest.raises(DatasetError, match=f"{url}/{name}: not the bytes manifest.json lists"):
        for item in loader:
            yielded.append(int(item["episode"]))
    assert yielded == []  # shard 0 comes first: nothing of it reached training
    # the healthy shards still stream, checked, from the object cache
    store.put_file(tiny.path / name, name)
    assert sum(1 for _ in make_loader(url, action_horizon=2, normalization="none")) == sum(
        tiny.steps().values()
    )


@pytest.mark.s3
def test_readers_never_touch_a_drivers_local_copy(s3_env, tiny, capsys):
    bucket = s3_env.make_bucket("copy")
    url = f"s3://{bucket}/tiny"
    _upload(tiny.path, url)
    # the driver's copy as a running `factory run` holds it: files the store does not have yet
    driver = local_copy_dir(url)
    shutil.copytree(tiny.path, driver, ignore=shutil.ignore_patterns("*.tar"))
    (driver / "journal.jsonl").write_text("")
    (driver / "generation.json").write_text('{"shards": {}}\n')
    before = {p.relative_to(driver): p.read_bytes() for p in driver.rglob("*") if p.is_file()}
    assert main(["verify", url]) == 0
    assert sum(1 for _ in make_loader(url, action_horizon=2, normalization="none")) > 0
    capsys.readouterr()
    assert {p.relative_to(driver): p.read_bytes() for p in driver.rglob("*") if p.is_file()} == (
        before
    )


_DRIVER = textwrap.dedent(
    """
    import sys
    from demofactory.build.stored_run import StoredDataset

    with StoredDataset(sys.argv[1]) as stored:
        (stored.local / "journal.jsonl").write_text("")  # committed here, not synced yet
        print("driving", flush=True)
        sys.stdin.read()
    """
)


@pytest.mark.s3
def test_a_second_driver_of_a_url_leaves_the_first_ones_copy_alone(
    s3_env, tiny, tiny_lift_spec, capsys
):
    bucket = s3_env.make_bucket("drivers")
    url = f"s3://{bucket}/tiny"
    _upload(tiny.path, url)
    first = subprocess.Popen(
        [sys.executable, "-c", _DRIVER, url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert first.stdout.readline().strip() == "driving"
        copy = local_copy_dir(url)
        before = {p.name: p.read_bytes() for p in copy.iterdir() if p.is_file()}
        assert main(["run", str(tiny_lift_spec), "--out", url, "--no-progress"]) == 2
        line = _one_line(capsys)
        assert line.startswith(f"error: {url}: another `factory run` is writing this dataset")
        assert {p.name: p.read_bytes() for p in copy.iterdir() if p.is_file()} == before
    finally:
        first.stdin.close()
        first.wait(timeout=60)


def test_inspect_of_a_dataset_recording_no_spec_is_one_line(tmp_path, capsys):
    import json

    from demofactory.cli.main import main

    from tests.shards.test_loader import build_dataset

    path = build_dataset(tmp_path / "tiny").path
    info_file = path / "dataset_info.json"
    info = json.loads(info_file.read_text())
    info.pop("spec", None)
    info_file.write_text(json.dumps(info))
    capsys.readouterr()
    assert main(["inspect", str(path)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert "dataset_info.json" in err[0] and "no spec recorded" in err[0], err
    assert "Traceback" not in err[0]
