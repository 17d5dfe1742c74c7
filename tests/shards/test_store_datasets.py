"""Datasets in object storage, read back: the loader streams them, `verify`, `inspect` and the
exports work on them. A real S3-compatible server on loopback (moto over HTTP, via s3fs)."""

from __future__ import annotations

import pytest
from demofactory.cli.main import main
from demofactory.shards.loader import make_loader
from demofactory.shards.store import Store

from tests.shards.test_loader import build_dataset

pytestmark = pytest.mark.s3


@pytest.fixture(autouse=True)
def short_retry(monkeypatch):
    monkeypatch.setenv("DEMOFACTORY_STORE_RETRY_S", "2")  # an outage stops a test in seconds


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    return build_dataset(tmp_path_factory.mktemp("stored") / "tiny")


def _upload(local_dir, url: str) -> Store:
    store = Store(url)
    for path in sorted(p for p in local_dir.rglob("*") if p.is_file()):
        store.put_file(path, path.relative_to(local_dir).as_posix())
    return store


def _contents(source, cameras):
    return sorted(
        (
            int(s["episode"]),
            int(s["step"]),
            s["state"].numpy().tobytes(),
            s["action_chunk"].numpy().tobytes(),
            *(s["images"][c].numpy().tobytes() for c in cameras),
        )
        for s in make_loader(source, cameras=cameras, action_horizon=3)
    )


def test_the_loader_streams_a_stored_dataset(s3_env, local):
    bucket = s3_env.make_bucket("loader")
    _upload(local.path, f"s3://{bucket}/runs/tiny")
    cameras = ["agentview"]
    stored = _contents(f"s3://{bucket}/runs/tiny", cameras)
    assert stored == _contents(local.path, cameras)
    assert len(stored) == sum(local.steps().values())


def test_verify_a_stored_dataset(s3_env, local, capsys):
    bucket = s3_env.make_bucket("verify")
    url = f"s3://{bucket}/tiny"
    store = _upload(local.path, url)
    assert main(["verify", url]) == 0
    assert f"ok: {url}" in capsys.readouterr().out
    # one flipped byte in the stored shard: verify finds it (the local copy is refreshed)
    name = "shards/shard-000001.tar"
    data = bytearray(store.read_bytes(name))
    data[len(data) // 2] ^= 0xFF
    store.write_bytes(name, bytes(data))
    assert main(["verify", url]) == 2
    err = capsys.readouterr().err
    assert "shard-000001.tar" in err and f"error: {url}: " in err


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("s3://no-such-bucket/tiny", "bucket 'no-such-bucket' does not exist"),
        ("nope://bucket/tiny", "cannot open this URL"),
    ],
)
def test_a_bad_dataset_url_is_one_line(s3_env, capsys, url, expected):
    assert main(["verify", url]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {url}: ") and expected in err[0]


def test_an_unreachable_store_is_one_line(s3_env, local, capsys):
    bucket = s3_env.make_bucket("down")
    _upload(local.path, f"s3://{bucket}/tiny")
    s3_env.gate.close()
    try:
        assert main(["inspect", f"s3://{bucket}/tiny"]) == 2
    finally:
        s3_env.gate.open()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"s3://{bucket}/tiny: unreachable for 2 s" in err[0]
