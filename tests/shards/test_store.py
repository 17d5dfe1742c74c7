"""demofactory.shards.store against a real S3-compatible server on loopback (moto, over HTTP, via
s3fs)."""

from __future__ import annotations

import time

import pytest
from demofactory.shards.store import Store, StoreError, StoreUnavailable, is_remote

pytestmark = pytest.mark.s3


def test_is_remote():
    assert is_remote("s3://bucket/prefix") and is_remote("file:///tmp/x")
    assert not is_remote("out/lift") and not is_remote("/abs/path") and not is_remote("C:/data")


def test_round_trip(s3_env, tmp_path):
    bucket = s3_env.make_bucket("roundtrip")
    store = Store(f"s3://{bucket}/runs/a/")
    assert store.url == f"s3://{bucket}/runs/a"
    assert store.read_bytes("manifest.json") is None and store.size("x") is None
    store.write_bytes("manifest.json", b'{"a": 1}')
    local = tmp_path / "shard.tar"
    local.write_bytes(bytes(range(256)) * 1000)
    store.put_file(local, "shards/shard-000000.tar")
    assert store.read_bytes("manifest.json") == b'{"a": 1}'
    assert store.size("shards/shard-000000.tar") == 256_000
    assert store.list() == ["manifest.json", "shards/shard-000000.tar"]
    assert store.list("shards") == ["shards/shard-000000.tar"]
    with store.open_read("shards/shard-000000.tar") as stream:
        assert stream.read() == local.read_bytes()
    store.get_file("shards/shard-000000.tar", tmp_path / "back.tar")
    assert (tmp_path / "back.tar").read_bytes() == local.read_bytes()
    store.delete("shards/shard-000000.tar")
    store.delete("shards/shard-000000.tar")  # already gone: fine
    assert store.list("shards") == []


def test_missing_bucket_is_one_line(s3_env):
    with pytest.raises(StoreError, match=r"s3://no-such-bucket/x: bucket 'no-such-bucket' does "):
        Store("s3://no-such-bucket/x")


def test_wrong_credentials_are_one_line(s3_env, monkeypatch):
    bucket = s3_env.make_bucket("creds")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    import fsspec

    fsspec.filesystem("s3").clear_instance_cache()
    with pytest.raises(
        StoreError, match=rf"s3://{bucket}/p: access denied .*check the credentials"
    ):
        Store(f"s3://{bucket}/p")


def test_unreachable_endpoint_retries_then_stops(s3_env):
    bucket = s3_env.make_bucket("outage")
    store = Store(f"s3://{bucket}/p", retry_s=1.5)
    store.write_bytes("a", b"1")
    s3_env.gate.close()
    try:
        start = time.monotonic()
        with pytest.raises(StoreUnavailable, match=rf"s3://{bucket}/p: unreachable for 1.5 s"):
            store.read_bytes("a")
        assert time.monotonic() - start >= 1.0  # it retried before giving up
    finally:
        s3_env.gate.open()
    assert store.read_bytes("a") == b"1"  # back: the same store, the same data


def test_outage_shorter_than_the_retry_time_is_ridden_out(s3_env):
    import threading

    bucket = s3_env.make_bucket("blip")
    store = Store(f"s3://{bucket}/p", retry_s=30)
    s3_env.gate.close()
    reopen = threading.Timer(1.0, s3_env.gate.open)
    reopen.start()
    try:
        store.write_bytes("during", b"x")  # retried until the gate opens again
    finally:
        reopen.join()
    assert store.read_bytes("during") == b"x"


def test_bad_retry_setting(monkeypatch, s3_env):
    monkeypatch.setenv("DEMOFACTORY_STORE_RETRY_S", "soon")
    with pytest.raises(StoreError, match="DEMOFACTORY_STORE_RETRY_S='soon': expected seconds"):
        Store("s3://whatever/x")


def test_unknown_protocol():
    with pytest.raises(StoreError, match=r"nope://b/x: cannot open this URL"):
        Store("nope://b/x")
