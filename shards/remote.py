"""A dataset in an object store, read and written through a local copy of its small files.

    Store(url)  ──pull_metadata──►  CACHE/<scheme>/<bucket>/<prefix>/   every object but the
                                    shard tars: dataset_info, manifest, stats, episodes,
                                    generation, per-shard .stats.json, textures/ ...
                ──pull_dataset───►  the same, plus each shard the manifest lists (downloaded
                                    only when the local copy is missing or differs; checked
                                    against the manifest's size and sha256)
    local DIR   ──push───────────►  Store: a file the driver has just written, put whole

Every reader of a dataset (`verify`, `inspect`, `preview`, `export`) works on a local
directory; for a URL it works on the pulled copy, so none of them needs a second code path.
The loader reads only the metadata locally and streams the shards from the store.

The cache is CACHE_ENV (default ~/.cache/demofactory)/stores; it is a copy: deleting it loses
nothing, and a pull removes local files the store no longer has.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from urllib.parse import urlparse

from shards.format import SHARDS_DIRNAME
from shards.manifest import load_manifest, verify_shard
from shards.store import Store

CACHE_ENV = "DEMOFACTORY_CACHE"


def cache_root() -> Path:
    """Where local copies of stored datasets live."""
    base = os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "demofactory"
    return Path(base) / "stores"


def local_copy_dir(url: str) -> Path:
    """The local directory that mirrors the dataset at `url` (s3://b/p -> CACHE/stores/s3/b/p)."""
    parsed = urlparse(url.rstrip("/"))
    parts = [parsed.scheme, parsed.netloc, *[p for p in parsed.path.split("/") if p]]
    if any(p in ("..", ".") for p in parts):
        raise ValueError(f"{url}: '.' or '..' in a dataset URL")
    return cache_root().joinpath(*[p for p in parts if p])


def _listed_in(store: Store, folders: Sequence[str]) -> list[str]:
    return sorted(n for folder in folders for n in store.list(folder, recursive=False))


def _is_shard_tar(name: str) -> bool:
    return name.startswith(f"{SHARDS_DIRNAME}/") and name.endswith(".tar")


def pull_metadata(
    store: Store, local: Path | None = None, folders: Sequence[str] | None = None
) -> Path:
    """Copy every object of the dataset but the shard tars to `local` (default: its cache
    directory); files there that the store no longer has are removed. `folders`: only the
    objects directly in these folders ("" is the root), e.g. what a worker needs, without the
    per-shard files. Returns the directory."""
    local = Path(local) if local is not None else local_copy_dir(store.url)
    local.mkdir(parents=True, exist_ok=True)

    def wanted(name: str) -> bool:  # never a dot file: the driver's .lock, a .part download
        hidden = any(part.startswith(".") for part in name.split("/"))
        return not hidden and (folders is None or name.rpartition("/")[0] in folders)

    listed = store.list() if folders is None else _listed_in(store, folders)
    names = [n for n in listed if not _is_shard_tar(n) and wanted(n)]
    for name in names:
        target = local / name
        target.parent.mkdir(parents=True, exist_ok=True)
        data = store.read_bytes(name)
        if data is None:  # removed between the listing and the read
            continue
        if not target.is_file() or target.read_bytes() != data:
            tmp = target.with_name(f".{target.name}.part")
            tmp.write_bytes(data)
            os.replace(tmp, target)
    keep = set(names)
    for path in sorted(local.rglob("*")):
        name = path.relative_to(local).as_posix()
        if path.is_file() and not _is_shard_tar(name) and wanted(name) and name not in keep:
            path.unlink()
    return local


def pull_dataset(
    store: Store,
    local: Path | None = None,
    on_shard: Callable[[str, bool], None] | None = None,
    fresh: bool = False,
) -> Path:
    """`pull_metadata`, then every shard the manifest lists, each downloaded only when the
    local copy is missing or does not match the manifest's size and sha256 (`fresh`: always,
    so that the copy is what the store holds now: `factory verify`). Shards the manifest does
    not list are removed from the copy. `on_shard(name, downloaded)` is called once per listed
    shard (a progress bar). Returns the directory."""
    local = pull_metadata(store, local)
    manifest = load_manifest(local)
    shard_dir = local / SHARDS_DIRNAME
    shard_dir.mkdir(exist_ok=True)
    listed = {info.name for info in manifest.shards}
    for path in shard_dir.glob("*.tar"):
        if path.name not in listed:
            path.unlink()
    for info in manifest.shards:
        fetch = fresh or not verify_shard(local, info)
        if fetch:
            store.get_file(f"{SHARDS_DIRNAME}/{info.name}", shard_dir / info.name)
        if on_shard is not None:
            on_shard(info.name, fetch)
    return local


def push(store: Store, local: Path, name: str) -> None:
    """Put the local file `local/name` as the object `name` (or delete the object when the
    local file is gone). The manifest is the commit point: push it after what it lists."""
    path = Path(local) / name
    if path.is_file():
        store.put_file(path, name)
    else:
        store.delete(name)


class Mirror:
    """The driver's side of a stored dataset: its small files are written to a local copy as
    usual, and `sync()` puts those that changed since the last sync in the store.

    Only the top-level files and the texture bank are the driver's (workers put the shards,
    their statistics and failures themselves). The commit files go last, in COMMIT_ORDER, so
    that a reader of the store never sees a shard listed before what describes it.
    """

    COMMIT_ORDER = ("generation.json", "journal.jsonl", "manifest.json")
    FOLDERS = ("", "textures")

    def __init__(self, store: Store, local: Path):
        self.store, self.local = store, Path(local)
        self._pushed: dict[str, tuple[int, int, int]] = {}

    def adopt(self) -> None:
        """Take the local copy as what the store holds (right after `pull_metadata`)."""
        self._pushed = {name: self._stamp(name) for name in self._local_names()}

    def sync(self) -> list[str]:
        """Put changed files, commit files last; delete from the store what was removed here.
        Returns the names put or deleted."""
        names = self._local_names()
        changed = [n for n in names if self._pushed.get(n) != self._stamp(n)]
        rank = {name: i for i, name in enumerate(self.COMMIT_ORDER)}
        changed.sort(key=lambda n: (rank.get(n, -1), n))
        for name in changed:
            stamp = self._stamp(name)
            self.store.put_file(self.local / name, name)
            self._pushed[name] = stamp
        gone = sorted(set(self._pushed) - set(names))
        for name in gone:
            self.store.delete(name)
            del self._pushed[name]
        return changed + gone

    def _local_names(self) -> list[str]:
        found = []
        for folder in self.FOLDERS:
            directory = self.local / folder if folder else self.local
            if directory.is_dir():
                found += [
                    p.relative_to(self.local).as_posix()
                    for p in directory.iterdir()
                    if p.is_file() and not p.name.startswith(".")
                ]
        return sorted(found)

    def _stamp(self, name: str) -> tuple[int, int, int]:
        # The inode too: files are replaced whole (a new inode each time) or appended to (a new
        # size), so a change shows even within the file system's timestamp granularity.
        stat = (self.local / name).stat()
        return stat.st_size, stat.st_mtime_ns, stat.st_ino
