"""Ends a driver's own local Ray cluster when the driver dies without `ray.shutdown()`
(SIGKILL, OOM).

    driver: children before ray.init() ─► ray.init() ─► new children (gcs, raylet, monitors)
            = the roots ─► watch_local_cluster(roots): a reaper process, in its own session
    reaper: every second (every 3 s after the first 10), note the roots and their descendants
            (agents, workers) with start times
            stdin EOF (the driver ended, however) ─► 5 s grace ─► SIGKILL the noted ones still there

Ray's kernel fate-sharing takes the GCS and the raylet down with the driver, and the workers
follow, but the dashboard and runtime-env agents of Ray 2.60 outlive them (they wait on the
dead GCS forever). Only the processes ray.init started and theirs are ended (not the driver's
other children), each checked against its recorded start time, so a reused PID is never hit.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

_SCAN_S = 1.0  # while the cluster starts (agents, workers appear)
_SCAN_LATER_S = 3.0  # after _SETTLED_S: new processes are rare then (a replacement worker)
_SETTLED_S = 10.0
_GRACE_S = 5.0
# kept referenced: a reaper's stdin closes when its driver ends
_reapers: list[subprocess.Popen] = []


def children(pid: int) -> dict[int, int]:
    """PID -> start time of the direct children of `pid`."""
    return {child: t for child, (parent, t) in _table().items() if parent == pid}


def watch_local_cluster(roots: dict[int, int]) -> subprocess.Popen:
    """Start a reaper for `roots` (pid -> start time) and their descendants; stop it with
    `release`."""
    reaper = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "demofactory.cluster.reaper",
            *(f"{pid}:{t}" for pid, t in roots.items()),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    _reapers.append(reaper)
    return reaper


def release(reaper: subprocess.Popen) -> None:
    """The cluster was shut down normally: the reaper checks once more and exits."""
    if reaper in _reapers:
        _reapers.remove(reaper)
    if reaper.stdin is not None:
        reaper.stdin.close()


def _table() -> dict[int, tuple[int, int]]:
    """PID -> (parent PID, start time in clock ticks since boot), for every process."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue  # exited meanwhile
            table[int(entry.name)] = (int(fields[1]), int(fields[19]))
    return table


def descendants(root: int) -> dict[int, int]:
    """PID -> start time of every process below `root`."""
    below: dict[int, list[int]] = {}
    table = _table()
    for pid, (parent, _) in table.items():
        below.setdefault(parent, []).append(pid)
    found, todo = {}, [root]
    while todo:
        for child in below.get(todo.pop(), []):
            found[child] = table[child][1]
            todo.append(child)
    return found


def start_time(pid: int) -> int | None:
    """The start time of a live (not zombie) process, None when there is none."""
    try:
        fields = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else int(fields[19])


def _reap(roots: dict[int, int]) -> None:
    seen = dict(roots)
    started = time.monotonic()
    while True:  # until the driver's end closes our stdin
        for root, t in roots.items():
            if start_time(root) == t:
                seen.update(descendants(root))
        scan = _SCAN_S if time.monotonic() - started < _SETTLED_S else _SCAN_LATER_S
        ready, _, _ = select.select([sys.stdin], [], [], scan)
        if ready and not os.read(sys.stdin.fileno(), 1024):
            break
    deadline = time.monotonic() + _GRACE_S
    while time.monotonic() < deadline:
        seen = {pid: t for pid, t in seen.items() if start_time(pid) == t}
        if not seen:
            return
        time.sleep(0.2)
    for pid, t in seen.items():
        if start_time(pid) == t:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the driver is not for us
    _reap({int(pid): int(t) for pid, t in (arg.split(":") for arg in sys.argv[1:])})
