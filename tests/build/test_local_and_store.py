"""One suite, a local folder and the object store alike: resume, repair (same-size damage too),
refusals, damage reaching no reader, and readers in a loop beside a `factory run` extending the
dataset.

Each case runs twice: on a copy of the session's small Lift dataset (tests/conftest.py: two
shards of one attempt, one 32x32 camera) in a folder, and on the same files put in a real
S3-compatible server on loopback (moto over HTTP, s3fs). Every command is the real CLI
(`demofactory.cli.main.main`, on the session's Ray cluster); the concurrent readers are a real
subprocess
running the real CLI and loader in a loop.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from demofactory.cli.main import main
from demofactory.shards import DatasetError, load_manifest
from demofactory.shards.loader import make_loader
from demofactory.shards.snapshot import reading
from demofactory.shards.store import Store

pytestmark = [pytest.mark.sim, pytest.mark.ray, pytest.mark.slow]

REPO = Path(__file__).parents[2]
RUN = ("--workers", "1", "--no-progress")


@dataclass
class Place:
    """Where the dataset under test lives: `url` is what every command is given."""

    url: str
    folder: Path | None = None  # local
    store: Store | None = None  # in the store

    def read(self, name: str) -> bytes | None:
        if self.store is not None:
            return self.store.read_bytes(name)
        path = self.folder / name
        return path.read_bytes() if path.is_file() else None

    def write(self, name: str, data: bytes) -> None:
        if self.store is not None:
            self.store.write_bytes(name, data)
        else:
            (self.folder / name).write_bytes(data)

    def files(self) -> dict[str, bytes]:
        """Every object or file of the dataset (not the driver's lock), by name."""
        if self.store is not None:
            return {n: self.store.read_bytes(n) for n in self.store.list()}
        return {
            p.relative_to(self.folder).as_posix(): p.read_bytes()
            for p in self.folder.rglob("*")
            if p.is_file() and p.name != ".lock"
        }


@pytest.fixture(params=["local", pytest.param("store", marks=pytest.mark.s3)])
def place(request, tmp_path, small_lift_dataset) -> Place:
    files = [
        p
        for p in sorted(small_lift_dataset.rglob("*"))
        if p.is_file() and not p.name.startswith(".")
    ]
    if request.param == "local":
        folder = tmp_path / "small_lift"
        for path in files:
            target = folder / path.relative_to(small_lift_dataset)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
        return Place(str(folder), folder=folder)
    s3_env = request.getfixturevalue("s3_env")
    request.getfixturevalue("short_retry")
    url = f"s3://{s3_env.make_bucket('suite')}/small_lift"
    store = Store(url)
    for path in files:
        store.put_file(path, path.relative_to(small_lift_dataset).as_posix())
    return Place(url, store=store)


@pytest.fixture
def short_retry(monkeypatch):
    monkeypatch.setenv("DEMOFACTORY_STORE_RETRY_S", "2")


def _flip_in_npy(data: bytes) -> bytes:
    """One byte flipped inside the float values of the first action.npy member: same size."""
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("action.npy"))
    flipped = bytearray(data)
    flipped[member.offset_data + member.size - 3] ^= 0x40
    return bytes(flipped)


def _consistent(place: Place) -> None:
    """The dataset's manifest, episodes.jsonl and stats.json describe the same episodes, and no
    journal is left."""
    with reading(place.url, shards=False) as snapshot:
        manifest = load_manifest(snapshot)
        episodes = (snapshot / "episodes.jsonl").read_text().splitlines()
        stats = json.loads((snapshot / "stats.json").read_text())
    assert len(episodes) == manifest.total_episodes == stats["episodes"]
    assert place.read("journal.jsonl") is None


def test_same_size_damage_reaches_no_reader_and_a_rerun_redoes_it(
    place, small_lift_spec, small_lift_dataset, capsys
):
    name = next(i.name for i in load_manifest(small_lift_dataset).shards if i.samples)
    key = f"shards/{name}"
    good = place.read(key)
    damaged = _flip_in_npy(good)
    assert len(damaged) == len(good) and damaged != good
    place.write(key, damaged)

    assert main(["verify", place.url]) == 2
    err = capsys.readouterr().err
    assert name in err and err.strip().splitlines()[-1].startswith(f"error: {place.url}: ")
    with pytest.raises(DatasetError, match=name):
        for _ in make_loader(place.url, cameras=["agentview"], action_horizon=2):
            pass

    run = ["run", str(small_lift_spec), "--out", place.url, *RUN]
    assert main(run) == 0  # the message's promise: `factory run` redoes it
    capsys.readouterr()
    assert place.read(key) == good  # the same bytes again: shards are deterministic
    assert main(["verify", place.url]) == 0
    assert f"ok: {place.url}" in capsys.readouterr().out
    _consistent(place)


def test_refused_runs_change_nothing(place, small_lift_spec, capsys):
    before = place.files()
    for extra, expected in (
        (["--attempts", "1"], "would drop 1 finished shard(s)"),
        (["--seed", "7"], "holds a different dataset"),
    ):
        assert main(["run", str(small_lift_spec), "--out", place.url, *extra, *RUN]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and expected in err[0], err
    assert place.files() == before
    assert main(["verify", place.url]) == 0


def test_a_resumed_run_after_a_lost_shard_keeps_the_others(
    place, small_lift_spec, small_lift_dataset, capsys
):
    names = [i.name for i in load_manifest(small_lift_dataset).shards]
    kept = {n: place.read(f"shards/{n}") for n in names}
    if place.store is not None:
        place.store.delete(f"shards/{names[-1]}")
    else:
        (place.folder / "shards" / names[-1]).unlink()
    assert main(["verify", place.url]) == 2
    capsys.readouterr()
    assert main(["run", str(small_lift_spec), "--out", place.url, *RUN]) == 0
    capsys.readouterr()
    assert {n: place.read(f"shards/{n}") for n in names} == kept
    assert main(["verify", place.url]) == 0
    capsys.readouterr()


# The readers' loop: inspect, verify and the loader, again and again until STOP exists; one JSON
# line a call in LOG (what it returned, its last stderr line, the steps the loader yielded).
_READERS = textwrap.dedent(
    """
    import contextlib, io, json, sys
    from pathlib import Path
    from demofactory.cli.main import main
    from demofactory.shards.loader import make_loader

    url, stop, log = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])

    def record(entry):
        with open(log, "a") as f:
            f.write(json.dumps(entry) + "\\n")

    while not stop.exists():
        for command in (["inspect", url], ["verify", url]):
            err = io.StringIO()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                code = main(command)
            lines = err.getvalue().strip().splitlines()
            record({"command": command[0], "code": code, "err": lines[-3:]})
        try:
            steps = sum(1 for _ in make_loader(url, cameras=["agentview"], action_horizon=2))
            record({"command": "loader", "code": 0, "steps": steps})
        except Exception as err:
            record({"command": "loader", "code": 2, "err": [f"{type(err).__name__}: {err}"]})
    """
)


def test_readers_in_a_loop_beside_a_run_that_extends_the_dataset(
    place, small_lift_spec, tmp_path, capsys
):
    stop, log = tmp_path / "stop", tmp_path / "readers.jsonl"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    readers = subprocess.Popen(
        [sys.executable, "-c", _READERS, place.url, str(stop), str(log)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 180
        while not (log.exists() and log.read_text().count("\n") >= 3):  # one whole round first
            assert readers.poll() is None, readers.stderr.read()
            assert time.monotonic() < deadline, "the readers never read"
            time.sleep(0.2)
        steps_before = load_steps(place)
        started = log.read_text().count("\n")
        run = ["run", str(small_lift_spec), "--out", place.url, "--attempts", "4", *RUN]
        assert main(run) == 0  # the readers never got in the writer's way
        capsys.readouterr()
        during = log.read_text().count("\n")
        assert during > started  # they read while it ran
        while log.read_text().count("\n") < during + 3:  # one more round, after the run
            assert readers.poll() is None, readers.stderr.read()
            time.sleep(0.2)
    finally:
        stop.touch()
        readers.wait(timeout=180)
    assert readers.returncode == 0, readers.stderr.read()

    steps_after = load_steps(place)
    assert steps_after > steps_before
    results = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(results) >= 6
    for result in results:  # each read saw one whole dataset, or said in one line it could not
        if result["code"] != 0:
            assert result["code"] == 2, result
            assert "a `factory run` is writing this dataset" in result["err"][-1], result
        elif result["command"] == "loader":
            assert result["steps"] in (steps_before, steps_after), result
    assert results[-1]["code"] == 0
    assert main(["verify", place.url]) == 0
    capsys.readouterr()
    assert len(load_manifest_of(place).shards) == 4
    _consistent(place)


def load_manifest_of(place: Place):
    with reading(place.url, shards=False) as snapshot:
        return load_manifest(snapshot)


def load_steps(place: Place) -> int:
    return load_manifest_of(place).total_samples
