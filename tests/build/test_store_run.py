"""`factory run --out s3://...` against a real S3-compatible server on loopback (moto over HTTP,
s3fs), on the session's real Ray cluster: workers put shards in the store themselves, the store
goes away mid-run (one line, exit 2), and the same command then finishes the dataset with the
bytes of an uninterrupted local run.

The run is the session's small Lift (tests/conftest.py: two shards of one attempt, one 32x32
camera): the outage makes three shards (the first run's two, the resumed run's one), and
rendering is what a shard costs.
"""

from __future__ import annotations

import threading

import pytest
from demofactory.cli.main import main
from demofactory.shards import load_manifest
from demofactory.shards.loader import make_loader
from demofactory.shards.store import Store

pytestmark = [pytest.mark.s3, pytest.mark.sim, pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(autouse=True)
def short_retry(monkeypatch):
    monkeypatch.setenv("DEMOFACTORY_STORE_RETRY_S", "1")  # an outage stops a test in seconds


def _close_when_stored(server, bucket: str, key: str, stop: threading.Event) -> None:
    """Close the gate once `key` is in the bucket (asked of the server directly, not through
    the gate)."""
    import boto3

    direct = boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{server.gate.upstream}",
        aws_access_key_id=server.key,
        aws_secret_access_key=server.secret,
        region_name="us-east-1",
    )
    while not stop.is_set():
        listed = direct.list_objects_v2(Bucket=bucket, Prefix=key).get("Contents", [])
        if listed:
            server.gate.close()
            return
        stop.wait(0.05)


def test_a_run_into_the_store_survives_an_outage_and_matches_a_local_run(
    s3_env, small_lift_spec, small_lift_dataset, capsys
):
    reference = small_lift_dataset  # the same spec, run into a local directory
    bucket = s3_env.make_bucket("runs")
    url = f"s3://{bucket}/lift"
    run = ["run", str(small_lift_spec), "--out", url, "--workers", "1", "--no-progress"]
    stop = threading.Event()
    watcher = threading.Thread(
        # cut once the first shard is committed in the store (its journal line is there): the
        # resumed run then redoes only the shard that was running
        target=_close_when_stored,
        args=(s3_env, bucket, "lift/journal.jsonl", stop),
    )
    watcher.start()
    try:
        code = main(run)
    finally:
        stop.set()
        watcher.join()
        s3_env.gate.open()
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    assert err[-1].startswith("error: ") and "unreachable for 1 s" in err[-1], err
    assert main(run) == 0  # the same command, the store back: resumed and finished
    capsys.readouterr()

    store = Store(url)
    local = {info.name: info.sha256 for info in load_manifest(reference).shards}
    from demofactory.shards.remote import pull_metadata

    stored = {info.name: info.sha256 for info in load_manifest(pull_metadata(store)).shards}
    assert stored == local  # the bytes of the uninterrupted local run
    assert store.read_bytes("stats.json") == (reference / "stats.json").read_bytes()
    assert store.read_bytes("episodes.jsonl") == (reference / "episodes.jsonl").read_bytes()
    assert main(["verify", url]) == 0
    assert f"ok: {url}" in capsys.readouterr().out
    steps = sum(1 for _ in make_loader(url, cameras=["agentview"], action_horizon=2))
    assert steps == load_manifest(reference).total_samples


def test_a_run_into_a_missing_bucket_is_one_line(s3_env, tiny_lift_spec, capsys):
    url = "s3://no-such-bucket/lift"
    assert main(["run", str(tiny_lift_spec), "--out", url, "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"error: {url}: bucket 'no-such-bucket' does not exist; create it first, "
        "or give the URL of an existing bucket"
    ]
