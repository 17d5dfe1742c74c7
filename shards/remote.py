"""A dataset in an object store, read and written through a local copy of its small files.

    Store(url)  ──pull_metadata──►  CACHE/<scheme>/<bucket>/<prefix>/   every object but the
                                    shard tars: dataset_info, manifest, stats, episodes,
                                    generation, per-shard .stats.json, textures/ ...
                ──pull_dataset───►  the same, plus each shard the manifest lists (downloaded
                                    only when the local copy is missing or differs; checked
                                    against the manifest's size and sha256)
    local DIR   ──push───────────►  Store: a file the driver has just written, put whole

Every reader of a dataset (`verify`, `inspect`, `preview`, `export`, the loader) works on a
private snapshot (demofactory.shards.snapshot): its small files pulled into a folder of its own,
never into
the local copy `factory run` uses (CACHE/stores/..., the driver's alone), its shards taken from
the object cache:

    cached_shard(store, info) ──► CACHE/objects/<sha256>.tar: downloaded once, checked against
                                  the manifest's sha256 (a damaged object is never cached)
    stored_shard_ok(store, info) ──► the object's sha256 is the manifest's: hashed as it streams,
                                  once per ETag (CACHE/verified/<sha256>: the ETags seen to hold
                                  it; a rewritten object has a new ETag, and is hashed again)

The cache is CACHE_ENV (default ~/.cache/demofactory); it is a copy: deleting it loses nothing,
and a pull removes local files the store no longer has.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from urllib.parse import urlparse

from demofactory.shards.format import SHARDS_DIRNAME
from demofactory.shards.manifest import load_manifest, verify_shard
from demofactory.shards.store import Store
from demofactory.shards.writer import ShardInfo, sha256_file

CACHE_ENV = "DEMOFACTORY_CACHE"


def cache_base() -> Path:
    """CACHE_ENV, default ~/.cache/demofactory."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "demofactory")


def cache_root() -> Path:
    """Where local copies of stored datasets live (a driver's: no reader writes there)."""
    return cache_base() / "stores"


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


_HASH_BLOCK = 8 << 20


def cached_shard(store: Store, info: ShardInfo) -> Path | None:
    """The shard `info` of `store` as a local file of the object cache, checked against its size
    and sha256 (downloaded when missing or damaged there); None when the store does not hold
    those bytes (a reader then reads what is there, and reports the damage)."""
    folder = cache_base() / "objects"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{info.sha256}.tar"
    if path.is_file() and path.stat().st_size == info.bytes and sha256_file(path) == info.sha256:
        return path
    # a name of this process's own, then renamed: readers in parallel never see half a file
    tmp = folder / f".{info.sha256}.{os.getpid()}.part"
    try:
        store.get_file(f"{SHARDS_DIRNAME}/{info.name}", tmp)
        if tmp.stat().st_size != info.bytes or sha256_file(tmp) != info.sha256:
            return None
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def stored_shard_ok(store: Store, info: ShardInfo) -> bool:
    """True when the store holds the shard `info` with its size and sha256 (`factory run`'s
    resume test: a same-size damaged object is redone). Hashed as it streams, once per ETag."""
    name = f"{SHARDS_DIRNAME}/{info.name}"
    found = store.info(name)
    if found is None or int(found.get("size", -1)) != info.bytes:
        return False
    etag = str(found.get("ETag") or found.get("etag") or "").strip('"')
    record = cache_base() / "verified" / info.sha256
    if etag and record.is_file() and etag in record.read_text().split():
        return True
    digest = hashlib.sha256()
    with store.open_read(name) as stream:
        while block := store.call(f"read {name}", lambda: stream.read(_HASH_BLOCK)):
            digest.update(block)
    if digest.hexdigest() != info.sha256:
        return False
    if etag:
        record.parent.mkdir(parents=True, exist_ok=True)
        with open(record, "a") as f:  # one short line a write: whole even with writers in parallel
            f.write(f"{etag}\n")
    return True


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
