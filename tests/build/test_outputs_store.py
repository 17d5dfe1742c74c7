"""Store URLs through the real CLI against a real S3-compatible server on loopback (moto):
normalized once (`s3://bkt//lo` is `s3://bkt/lo`: the same keys, the same local copy), messages
that name the URL rather than the cache folder, and a dead endpoint that ends a reader in seconds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from demofactory.cli.main import main
from demofactory.shards.remote import local_copy_dir
from demofactory.shards.store import Store

from tests.conftest import REPO
from tests.shards.test_loader import build_dataset

pytestmark = pytest.mark.s3


def _keys(server, bucket: str) -> list[str]:
    listed = server.client().list_objects_v2(Bucket=bucket).get("Contents", [])
    return sorted(o["Key"] for o in listed)


def _upload(local: Path, url: str) -> None:
    store = Store(url)
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        store.put_file(path, path.relative_to(local).as_posix())


def test_a_double_slash_writes_the_keys_a_single_slash_reads(s3_env):
    bucket = s3_env.make_bucket("dbl")
    Store(f"s3://{bucket}//dbl/").write_bytes("manifest.json", b"{}")
    assert _keys(s3_env, bucket) == ["dbl/manifest.json"]  # not "/dbl/manifest.json"
    assert Store(f"s3://{bucket}/dbl").read_bytes("manifest.json") == b"{}"


def test_a_double_slash_url_is_the_same_dataset_and_copy(s3_env, tmp_path, capsys):
    bucket = s3_env.make_bucket("lod")
    _upload(build_dataset(tmp_path / "tiny").path, f"s3://{bucket}/lo")
    capsys.readouterr()
    assert main(["verify", f"s3://{bucket}/lo"]) == 0
    single = capsys.readouterr().out
    # Readers read a private snapshot (demofactory.shards.snapshot), never a driver's local copy:
    # the
    # double slash neither makes a second copy nor mangles one (`hards/`).
    copy = local_copy_dir(f"s3://{bucket}/lo")
    listing = lambda: sorted(str(p.relative_to(copy)) for p in copy.rglob("*"))  # noqa: E731
    before = listing() if copy.exists() else None
    assert main(["verify", f"s3://{bucket}//lo/"]) == 0
    assert capsys.readouterr().out == single  # the same dataset, named the same way
    after = listing() if copy.exists() else None
    assert after == before
    assert not any("hards" == Path(p).parts[0] for p in after or ())  # no mangled `hards/`
    assert not copy.parent.exists() or sorted(os.listdir(copy.parent)) in ([], ["lo"])


def test_a_store_error_names_the_url_not_the_cache(s3_env, tmp_path, capsys):
    bucket = s3_env.make_bucket("named")
    s3_env.client().put_object(Bucket=bucket, Key="empty/readme.txt", Body=b"not a dataset")
    for verb in ("inspect", "verify", "preview"):
        capsys.readouterr()
        assert main([verb, f"s3://{bucket}/empty"]) == 2
        err = capsys.readouterr().err.splitlines()
        lines = [e for e in err if e.startswith("error:")]  # beside the progress bar's
        assert len(lines) == 1, (verb, err)
        (line,) = lines
        assert line.startswith(f"error: s3://{bucket}/empty"), (verb, line)
        assert str(tmp_path / "cache") not in line, (verb, line)


def _silent_listener():
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)  # accepts (the kernel does) and never answers
    return listener


@pytest.mark.parametrize("endpoint", ["closed", "silent"])
def test_verify_against_a_dead_endpoint_fails_in_seconds_in_one_line(s3_env, tmp_path, endpoint):
    bucket = s3_env.make_bucket(f"dead-{endpoint}")
    _upload(build_dataset(tmp_path / "tiny").path, f"s3://{bucket}/ds")
    env = {**os.environ, "DEMOFACTORY_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(REPO)}
    env.pop("DEMOFACTORY_STORE_RETRY_S", None)  # the readers' own default, not a test's
    listener = _silent_listener() if endpoint == "silent" else None
    if listener is not None:
        env["AWS_ENDPOINT_URL_S3"] = f"http://127.0.0.1:{listener.getsockname()[1]}"
    else:
        s3_env.gate.close()
    try:
        # The timeout is the promise (seconds, not the 300 s a writer waits): a hang fails here.
        result = subprocess.run(
            [sys.executable, "-m", "demofactory.cli.main", "verify", f"s3://{bucket}/ds"],
            capture_output=True,
            text=True,
            env=env,
            timeout=45,
        )
    finally:
        s3_env.gate.open()
        if listener is not None:
            listener.close()
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and f"s3://{bucket}/ds" in lines[0], result.stderr
