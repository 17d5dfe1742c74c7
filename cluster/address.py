"""`--address` checked before Ray is asked: Ray's own connect retries for minutes when nothing
is there, and for half a minute when the cluster wants an auth token this process does not send.

factory run SPEC --address 10.0.0.5:6379   # nothing listening: one line within PROBE_TIMEOUT_S
RAY_AUTH_MODE=disabled factory run SPEC --address HEAD:6379   # a token cluster: one line at once

Ray 2.60's token authentication: `ray start --head` turns it on when a token exists (RAY_AUTH_TOKEN,
RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token; a local `ray.init()` writes the last), and then every
client must send it. A client sends it only with RAY_AUTH_MODE=token (or, for `ray.init("auto")`,
when it finds a token), never to an address it was given otherwise.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys

from demofactory.cluster.errors import ClusterAddressError
from ray._raylet import (
    AuthenticationMode,
    AuthenticationTokenLoader,
    InnerGcsClient,
    get_authentication_mode,
)
from ray.exceptions import AuthenticationError, RayError

START_HINT = (
    "start one with `ray start --head` and pass the address it prints, "
    "or leave --address out for a local one"
)
TOKEN_HINT = (
    "export RAY_AUTH_MODE=token with the cluster's token in ~/.ray/auth_token, "
    "$RAY_AUTH_TOKEN_PATH or $RAY_AUTH_TOKEN (`ray get-auth-token` on the head node prints it)"
)
PROBE_TIMEOUT_S = 3.0  # a head node answers at once


def probe_address(address: str, flag: str) -> None:
    """A ClusterAddressError within seconds when nothing listens at a HOST:PORT address, or when
    the Ray cluster there refuses this process's auth token (`flag` names where it came from)."""
    host, sep, port = address.rpartition(":")
    if address == "auto" or "://" in address or not sep or not port.isdigit():
        return  # "auto", ray:// clients: Ray's own lookup, which fails fast
    try:
        conn = socket.create_connection(
            (host.strip("[]") or "127.0.0.1", int(port)), timeout=PROBE_TIMEOUT_S
        )
    except OSError as err:
        why = err.strerror or type(err).__name__
        raise ClusterAddressError(
            f"{flag} {address}: no Ray cluster answers there ({why}); {START_HINT}"
        ) from None
    with conn:
        answer = None if os.environ.get("RAY_USE_TLS") in ("1", "true") else _http2_answer(conn)
    if answer is not None and not answer.startswith("HTTP/2 SETTINGS"):
        raise ClusterAddressError(
            f"{flag} {address}: something listens there but it is not a Ray cluster ({answer}); "
            f"{START_HINT}"
        )
    probe_token(address, flag)


# The HTTP/2 client preface and an empty SETTINGS frame (RFC 9113 3.4, 6.5). A Ray head's GCS
# is a gRPC server: it answers a preface with its own SETTINGS frame at once. Anything else
# (an HTTP/1 server, a listener that never answers) is told apart in PROBE_TIMEOUT_S, where
# Ray's own client would retry forever.
_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def _http2_answer(conn: socket.socket) -> str:
    """What the server at `conn` said to an HTTP/2 preface, in a few words: "HTTP/2 SETTINGS"
    from a gRPC server, else e.g. "it answered 'HTTP/1.0 400 Bad request'" or "no answer"."""
    conn.settimeout(PROBE_TIMEOUT_S)
    try:
        conn.sendall(_PREFACE)
        head = b""
        while len(head) < 9:
            chunk = conn.recv(64)
            if not chunk:
                break
            head += chunk
    except TimeoutError:
        return f"no answer to a handshake in {PROBE_TIMEOUT_S:g} s"
    except OSError as err:
        return f"the handshake failed: {err.strerror or type(err).__name__}"
    if len(head) >= 9 and head[3] == 4:  # frame type 4: SETTINGS
        return "HTTP/2 SETTINGS"
    if not head:
        return "it closed the connection at once"
    text = head.decode("latin-1").splitlines()[0] if head[:4].isascii() else head.hex()
    return f"it answered {text!r}"


def probe_token(address: str, flag: str) -> None:
    """A ClusterAddressError at once when the Ray cluster (GCS) at HOST:PORT wants a token that
    this process will not send, or rejects the one it sends. Anything else (not a GCS, slow to
    answer) is left to `ray.init`."""
    where = f"{flag} {address}"
    sending = get_authentication_mode() == AuthenticationMode.TOKEN  # RAY_AUTH_MODE, as Ray read it
    if sending:  # without a token, Ray's client would abort this process
        try:
            found = AuthenticationTokenLoader.instance().has_token(ignore_auth_mode=True)
        except AuthenticationError:  # RAY_AUTH_TOKEN_PATH names a missing or empty file
            found = False
        if not found:
            raise ClusterAddressError(f"{where}: RAY_AUTH_MODE=token but no token; {TOKEN_HINT}")
    try:
        with _stderr_muted():  # Ray's client logs the refusal itself, as a warning line
            InnerGcsClient.standalone(address, None, int(PROBE_TIMEOUT_S * 1000))
    except AuthenticationError:
        why = (
            "refuses this process's auth token"
            if sending
            else "requires an auth token, and RAY_AUTH_MODE is not `token` here"
        )
        raise ClusterAddressError(f"{where}: the Ray cluster there {why}; {TOKEN_HINT}") from None
    except RayError:
        return  # no GCS answered in time: `ray.init` retries and reports


@contextlib.contextmanager
def _stderr_muted():
    """File descriptor 2 to /dev/null (Ray's C++ logging writes there, not to sys.stderr)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def first_line(err: BaseException) -> str:
    """The first line of an exception's text (Ray's run over several)."""
    return (str(err).strip().splitlines() or [type(err).__name__])[0]
