"""A real S3-compatible server on loopback, for tests: moto's server in its own process.

    client (s3fs, boto3) ──HTTP──► Gate (a TCP relay the test can close and reopen)
                                     ──HTTP──► moto_server (subprocess, in-memory buckets)

The gate stands for the network: `gate.close()` makes the endpoint unreachable (connections
refused) while the server keeps its buckets, and `gate.open()` brings it back on the same port,
so a run can be cut off in the middle and resumed against the same data.

Credentials are checked: the server starts with IAM authorization on (after the few setup
calls that create the test user), so a wrong key is refused as it would be by AWS.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ACCESS_KEY_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
_SETUP_CALLS = 3  # create_user, create_access_key, put_user_policy: unauthenticated by design


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Gate:
    """A TCP relay from a loopback port to the server; closing it refuses new connections and
    cuts the open ones."""

    def __init__(self, upstream: int):
        self.upstream, self.port = upstream, free_port()
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self.open()

    def open(self) -> None:
        if self._listener is not None:  # open already
            return
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def close(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            _shut(listener)  # shutdown wakes the thread blocked in accept(): the port is freed
        with self._lock:
            for conn in self._conns:
                _shut(conn)
            self._conns.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # closed
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.upstream))
            except OSError:
                _shut(client)
                continue
            with self._lock:
                self._conns += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    _shut(dst)


def _shut(conn: socket.socket) -> None:
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    conn.close()


@dataclass
class S3Server:
    """A running server: `endpoint` (through the gate), `env` (what a client needs), `gate`."""

    process: subprocess.Popen
    gate: Gate
    key: str
    secret: str

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.gate.port}"

    @property
    def env(self) -> dict[str, str]:
        """Environment for a client process (the factory CLI, a Ray worker): endpoint, keys."""
        return {
            "AWS_ENDPOINT_URL_S3": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.key,
            "AWS_SECRET_ACCESS_KEY": self.secret,
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.key,
            aws_secret_access_key=self.secret,
            region_name="us-east-1",
        )

    def make_bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        return name

    def stop(self) -> None:
        self.gate.close()
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def start_s3_server(log: Path) -> S3Server:
    """Start moto's server on a free loopback port, create a user with full S3 access, return
    the server behind a gate."""
    binary = shutil.which("moto_server", path=str(Path(sys.executable).parent))
    if binary is None:
        raise RuntimeError("moto_server not installed (pip install 'moto[server]')")
    port = free_port()
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(_SETUP_CALLS)}
    process = subprocess.Popen(
        [binary, "-H", "127.0.0.1", "-p", str(port)],
        stdout=open(log, "wb"),  # noqa: SIM115 - the child owns it
        stderr=subprocess.STDOUT,
        env=env,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"moto_server did not start; see {log}") from None
            time.sleep(0.1)
    key, secret = _make_user(f"http://127.0.0.1:{port}")
    return S3Server(process, Gate(port), key, secret)


def _make_user(endpoint: str) -> tuple[str, str]:
    import boto3

    iam = boto3.client(
        "iam",
        endpoint_url=endpoint,
        aws_access_key_id="setup",
        aws_secret_access_key="setup",
        region_name="us-east-1",
    )
    iam.create_user(UserName="factory")
    made = iam.create_access_key(UserName="factory")["AccessKey"]
    iam.put_user_policy(
        UserName="factory",
        PolicyName="s3",
        PolicyDocument='{"Version": "2012-10-17", "Statement": '
        '[{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}',
    )
    return made["AccessKeyId"], made["SecretAccessKey"]
