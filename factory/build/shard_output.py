"""Where a worker writes a finished shard: the dataset directory, or an object store.

    out_dir a local path   ──► the shard, its statistics and its failures written there, as is
    out_dir "s3://b/p"     ──► written to this worker's staging folder, then put in the store
                               (statistics and failures first, the tar last); the local tar is
                               removed once stored. The staging folder holds the dataset's small
                               top-level files and its texture bank, pulled once per worker, for
                               what a shard reads (the bank, the ADR result in generation.json).

Workers never write the manifest: the driver commits a shard by listing it there after the
worker returns, so a shard put in the store by a worker that then died is simply redone.
No shared file system is needed: a worker on another node needs only the store's URL and
credentials (the standard AWS_* variables, or the node's role).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from demofactory.shards import shards_dir
from demofactory.shards.format import SHARDS_DIRNAME
from demofactory.shards.remote import cache_root
from demofactory.shards.stats import sidecar_path
from demofactory.shards.store import Store, is_remote

# Folders a worker needs from a stored dataset: its top-level files and the texture bank.
_WORKER_FOLDERS = ("", "textures")


class ShardOutput:
    """A worker's view of the dataset it writes to (one per worker process and dataset)."""

    def __init__(self, out_dir: str | Path):
        self.remote = is_remote(str(out_dir))
        self.store: Store | None = None
        if self.remote:
            from demofactory.shards.remote import pull_metadata

            self.store = Store(str(out_dir))
            staging = _staging_dir()
            self.local_dir = pull_metadata(self.store, staging, folders=_WORKER_FOLDERS)
        else:
            self.local_dir = Path(out_dir)

    def shards_dir(self) -> Path:
        directory = shards_dir(self.local_dir)
        directory.mkdir(parents=True, exist_ok=True)
        return directory

    def publish(self, shard_name: str, failures: Path | None) -> None:
        """Put a finished shard in the store (nothing to do for a local dataset)."""
        if self.store is None:
            return
        tar = self.shards_dir() / shard_name
        extras = [sidecar_path(tar), failures]
        for path in [p for p in extras if p is not None and p.is_file()]:
            self.store.put_file(path, path.relative_to(self.local_dir).as_posix())
        self.store.put_file(tar, f"{SHARDS_DIRNAME}/{shard_name}")
        for path in [tar, *extras]:
            if path is not None:
                path.unlink(missing_ok=True)


_OUTPUTS: dict[str, ShardOutput] = {}


def shard_output(out_dir: str | Path) -> ShardOutput:
    """The `ShardOutput` of `out_dir` for this process (a stored dataset is pulled once)."""
    key = str(out_dir)
    if key not in _OUTPUTS:
        _OUTPUTS[key] = ShardOutput(out_dir)
    return _OUTPUTS[key]


def _staging_dir() -> Path:
    """A fresh staging folder for this process, under the cache. Ray ends its workers without
    running exit handlers, so each new one first removes the folders of workers that are gone
    (named after their pid); they hold copies only."""
    root = cache_root() / "staging"
    root.mkdir(parents=True, exist_ok=True)
    for folder in root.iterdir():
        pid = folder.name.partition("-")[0].removeprefix("w")
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"w{os.getpid()}-", dir=root))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True
