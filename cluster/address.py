"""`--address` checked before Ray is asked: Ray's own connect retries for minutes when nothing
is there.

factory run SPEC --address 10.0.0.5:6379   # nothing listening: one line within PROBE_TIMEOUT_S
"""

from __future__ import annotations

import socket

from cluster.errors import ClusterAddressError

START_HINT = (
    "start one with `ray start --head` and pass the address it prints, "
    "or leave --address out for a local one"
)
PROBE_TIMEOUT_S = 3.0  # a head node answers at once


def probe_address(address: str, flag: str) -> None:
    """A ClusterAddressError within seconds when nothing listens at a HOST:PORT address
    (`flag` names where it came from)."""
    host, sep, port = address.rpartition(":")
    if address == "auto" or "://" in address or not sep or not port.isdigit():
        return  # "auto", ray:// clients: Ray's own lookup, which fails fast
    try:
        socket.create_connection(
            (host.strip("[]") or "127.0.0.1", int(port)), timeout=PROBE_TIMEOUT_S
        ).close()
    except OSError as err:
        why = err.strerror or type(err).__name__
        raise ClusterAddressError(
            f"{flag} {address}: no Ray cluster answers there ({why}); {START_HINT}"
        ) from None


def first_line(err: BaseException) -> str:
    """The first line of an exception's text (Ray's run over several)."""
    return (str(err).strip().splitlines() or [type(err).__name__])[0]
