"""The cluster's own errors: what a user can fix about where and how shards run.

`cluster/` imports nothing of `factory`; `demofactory.errors.USER_FACING_ERRORS` lists
`ClusterError`, and the CLI prints any of these as one `error:` line, exit 2.
"""

from __future__ import annotations


class ClusterError(Exception):
    """The cluster cannot make progress: no Ray cluster at the address, workers that cannot
    start, a shard that kills its workers, a setting of the environment that is not valid."""


class ClusterAddressError(ClusterError):
    """Nothing answers at `--address` / `$RAY_ADDRESS`, or Ray cannot connect there."""


class GpuRenderError(ClusterError):
    """A GPU Ray assigned that EGL cannot render on (a MIG slice, an unknown UUID)."""


class ShardWriteError(ClusterError):
    """A worker could not write its shard (disk full, read-only, quota): one line, naming the
    shard and the errno."""
