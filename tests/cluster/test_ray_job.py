"""The README's cluster path as a user walks it (issue 17): a head node with Ray's token
authentication on, `ray job submit ... -- factory run SPEC --address auto`, the dataset it wrote
read back; and a `factory run` that would not send the token, stopped in one line.

The head node is the real `ray` CLI of this venv (`ray start --head --block`, dashboard and job
server included), on free ports, with HOME in a temporary directory: its token never touches
~/.ray. It is stopped by PID (`ray stop` would stop every Ray cluster on the machine).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from demofactory.cluster.local import NODE_PORT_FLAGS, free_ports
from demofactory.cluster.reaper import descendants, start_time

from tests.cli.test_cli_errors import assert_user_error
from tests.conftest import write_spec

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.sim]  # the job builds a Lift env

RAY = Path(sys.executable).with_name("ray")  # this venv's, as `. .venv/bin/activate` gives it
FACTORY = Path(sys.executable).with_name("factory")
START_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Head:
    env: dict  # the user's shell after the README's steps (venv on PATH, RAY_AUTH_MODE=token)
    gcs: str  # 127.0.0.1:PORT
    dashboard: str  # http://127.0.0.1:PORT
    token: str


def _user_env(home: Path) -> dict:
    """A shell with none of this test process's Ray settings (ray.init here sets RAY_AUTH_MODE,
    conftest RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER), the venv activated, HOME in `home`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["HOME"] = str(home)
    env["PATH"] = f"{RAY.parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("MUJOCO_GL", "egl")
    return env


def _start_head(env: dict, temp_dir: Path, gcs_port: int, dashboard_port: int):
    log = temp_dir / "head.log"
    ports = (*NODE_PORT_FLAGS, "ray-client-server-port")
    # All drawn at once, all different: drawn one at a time the OS may hand out a port twice.
    chosen = free_ports(len(ports), taken=(gcs_port, dashboard_port))
    with open(log, "w") as out:
        head = subprocess.Popen(
            [
                RAY,
                "start",
                "--head",
                "--block",
                "--num-cpus=2",
                "--num-gpus=0",
                f"--port={gcs_port}",
                "--include-dashboard=true",
                "--dashboard-host=127.0.0.1",
                f"--dashboard-port={dashboard_port}",
                f"--temp-dir={temp_dir}",
                "--disable-usage-stats",
                "--min-worker-port=0",
                "--max-worker-port=0",
                *(f"--{name}={port}" for name, port in zip(ports, chosen, strict=True)),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    while "Ray runtime started" not in log.read_text():
        if head.poll() is not None or time.monotonic() > deadline:
            _stop(head)
            pytest.fail(f"ray start --head did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    return head


def _stop(head: subprocess.Popen) -> None:
    """SIGTERM to `ray start --block` ends its node; SIGKILL what of it is left after 20 s."""
    ours = descendants(head.pid)
    if head.poll() is None:
        head.send_signal(signal.SIGTERM)
    try:
        head.wait(20)
    except subprocess.TimeoutExpired:
        head.kill()
        head.wait()
    for pid, t in ours.items():
        if start_time(pid) == t:
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    env = _user_env(home)
    # The README's steps: a token in ~/.ray/auth_token, RAY_AUTH_MODE=token, `ray start --head`.
    subprocess.run(
        [RAY, "get-auth-token", "--generate"], env=env, check=True, capture_output=True, timeout=60
    )
    env["RAY_AUTH_MODE"] = "token"
    temp_dir = Path(tempfile.mkdtemp(prefix="rayj", dir="/tmp"))  # short: Ray's socket paths
    gcs_port, dashboard_port = free_ports(2)
    process = _start_head(env, temp_dir, gcs_port, dashboard_port)
    try:
        yield Head(
            env=env,
            gcs=f"127.0.0.1:{gcs_port}",
            dashboard=f"http://127.0.0.1:{dashboard_port}",
            token=(home / ".ray" / "auth_token").read_text().strip(),
        )
    finally:
        _stop(process)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _jobs_status(head: Head, token: str | None) -> int:
    request = urllib.request.Request(f"{head.dashboard}/api/jobs/")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code


def test_job_server_wants_the_token(head):
    assert _jobs_status(head, None) == 401  # authentication is on
    assert _jobs_status(head, "not-the-token") == 403
    assert _jobs_status(head, head.token) == 200


def test_submitted_job_writes_a_dataset_that_verifies(head, tmp_path):
    from demofactory.shards import load_episodes, load_manifest
    from demofactory.shards.verify import verify_dataset

    workdir = tmp_path / "job"  # what --working-dir uploads: the spec alone (demo paths absolute)
    workdir.mkdir()
    write_spec(
        workdir / "spec.yaml",
        task={"horizon": 400},
        generation={"attempts": 4, "attempts_per_shard": 2},
        cameras=[],  # physics only, like tests/cluster/test_cluster_faults.py: the cost is Ray's
    )
    out = tmp_path / "ds"  # absolute: the job runs in a copy of the working dir
    submit = subprocess.run(
        [
            RAY,
            "job",
            "submit",
            "--address",
            head.dashboard,
            "--submission-id",
            "demofactory-test",
            "--working-dir",
            ".",
            "--",
            "factory",
            "run",
            "spec.yaml",
            "--address",
            "auto",
            "--out",
            str(out),
            "--attempts",
            "2",
            "--no-progress",
        ],
        cwd=workdir,
        env=head.env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert submit.returncode == 0, (submit.stdout + submit.stderr)[-4000:]
    logs = subprocess.run(
        [RAY, "job", "logs", "--address", head.dashboard, "demofactory-test"],
        env=head.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert logs.returncode == 0 and "2 of 2 planned" in logs.stdout, logs.stdout + logs.stderr

    (shard,) = load_manifest(out).shards  # 2 attempts: one shard of the spec's 2
    generation = json.loads((out / "generation.json").read_text())["shards"]
    assert list(generation) == [shard.name] and generation[shard.name]["attempts"] == 2
    episodes = load_episodes(out)
    assert episodes, "Lift's 2 attempts from this seed succeed: a job that wrote none is wrong"
    assert len(episodes) == shard.episodes and sum(e.length for e in episodes) == shard.samples
    assert verify_dataset(out) == []  # checksums, sample counts, episodes, stats


def test_run_without_the_token_mode_stops_in_one_line(head, tmp_path):
    spec = write_spec(tmp_path / "spec.yaml", task={"horizon": 400}, cameras=[])
    env = {k: v for k, v in head.env.items() if k != "RAY_AUTH_MODE"}  # the export forgotten
    result = subprocess.run(
        [FACTORY, "run", str(spec), "--out", str(tmp_path / "out"), "--address", head.gcs],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert_user_error(result, f"--address {head.gcs}", "RAY_AUTH_MODE", "ray get-auth-token")
    assert not (tmp_path / "out").exists()


# In a fresh process each: Ray reads RAY_AUTH_MODE and the token once per process.
_PROBE = """
import sys
from demofactory.cluster.errors import ClusterAddressError
from demofactory.cluster.runner import ClusterConfig, connect
try:
    connect(ClusterConfig(workers=1, address=sys.argv[1]))
except ClusterAddressError as err:
    print(err)
else:
    print("ok")
"""


@pytest.mark.parametrize(
    "address, auth, expected",
    [
        ("gcs", {"RAY_AUTH_MODE": "token"}, "ok"),
        ("gcs", {"RAY_AUTH_TOKEN": "not-the-token"}, "refuses this process's auth token"),
        ("gcs", {"HOME": "/nonexistent"}, "RAY_AUTH_MODE=token but no token"),
        ("gcs", {"RAY_AUTH_TOKEN_PATH": "/nonexistent"}, "RAY_AUTH_MODE=token but no token"),
        ("auto", {"HOME": "/nonexistent"}, "no Ray auth token to send"),  # ray.init's check
    ],  # RAY_AUTH_MODE unset: test_run_without_the_token_mode_stops_in_one_line
)
def test_connect_names_the_token_problem_in_one_line(head, address, auth, expected):
    flag = f"--address {head.gcs}" if address == "gcs" else "--address auto"
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, head.gcs if address == "gcs" else "auto"],
        env=head.env | {"RAY_ADDRESS": head.gcs} | auth,  # RAY_ADDRESS: as in a job
        cwd=Path(__file__).parents[2],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    if expected == "ok":
        assert result.stdout.strip() == "ok", result.stdout
    else:  # one line, Ray's own warnings about the refusal muted
        assert result.stderr == "" and result.stdout.count("\n") == 1, result.stderr
        assert result.stdout.startswith(f"{flag}: ") and expected in result.stdout
        assert "ray get-auth-token" in result.stdout
