"""MuJoCo's warnings go to stderr, never to MUJOCO_LOG.TXT in the working directory.

MuJoCo's default warning handler prints a warning and appends it to MUJOCO_LOG.TXT in the
current directory: a file name fixed in its C code, which no environment variable moves. A
user handler (`mujoco.set_mju_user_warning`, one per process) replaces both. Each process that
steps MuJoCo calls `route_mujoco_warnings` once: the CLI's, and each Ray actor.
"""

from __future__ import annotations

import sys


def route_mujoco_warnings(stream=None) -> None:
    """Send this process's MuJoCo warnings to `stream` (default stderr), each distinct one once."""
    import mujoco

    seen: set[str] = set()

    def warn(message: str) -> None:
        # An unstable attempt repeats its warning every step; once says it.
        key = message.split(" Time = ")[0]
        if key not in seen:
            seen.add(key)
            print(f"MuJoCo warning: {message}", file=stream or sys.stderr, flush=True)

    mujoco.set_mju_user_warning(warn)
