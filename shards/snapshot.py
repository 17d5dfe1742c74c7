"""What a reader of a dataset sees: a private, consistent snapshot, never a writer's files.

    local DIR ──► READERS/<tmp>/ : DIR's small files hard-linked (writers replace them whole,
                  so a link keeps the bytes the snapshot saw; copied on another file system),
                  journal.jsonl copied up to its last whole line, the other folders and every
                  file in shards/ linked (hard, else symbolic); taken again while a file
                  changed during the copy
    store URL ──► READERS/<tmp>/ : the small objects pulled (`pull_metadata`, never into the
                  local copy a driver uses), manifest.json and journal.jsonl read before and
                  after; shards linked from the object cache (content-addressed, each checked
                  against its sha256: demofactory.shards.remote.cached_shard) or downloaded anew
                  (`fresh`)
    the snapshot holds journal.jsonl (a run is writing the dataset, or stopped before it
    finished): manifest and generation see its shards, episodes.jsonl and stats.json do not
        ──► DatasetBusy, one line saying which (`partial`: allowed, for `inspect`, which reads
            only what the journal keeps consistent)
    manifest, episodes.jsonl, stats.json and generation.json disagree while a run is writing
    (it is folding its journal in) ──► taken again, for up to WAIT_S; then DatasetBusy
    they disagree and no run is writing ──► the snapshot as it is: damage is the reader's to
        report (`factory verify` names it)

Readers never lock: a writer (`factory run`, `factory divergence`) holding DIR/.lock is never
kept waiting nor refused because of a reader. The snapshot is removed when the reader ends;
READERS is CACHE_ENV (default ~/.cache/demofactory)/readers.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from demofactory.shards.format import (
    EPISODES_FILENAME,
    MANIFEST_FILENAME,
    SHARDS_DIRNAME,
    STATS_FILENAME,
    DatasetError,
    read_json_file,
)
from demofactory.shards.journal import JOURNAL_FILENAME, committed_length
from demofactory.shards.manifest import load_manifest

GENERATION_FILENAME = (
    "generation.json"  # demofactory.build.output_dir's; this module stays below factory/
)
LOCK_FILENAME = ".lock"
_PREFIX = "snapshot-"  # then host-pid-random: a killed reader's is removed by the next reader
WAIT_S = 10.0  # a run folding its journal in rewrites four files: well under a second measured
_FIRST_WAIT_S, _MAX_WAIT_S = 0.05, 0.5

# snapshot folder -> what the user named (a message that names a file of the snapshot names
# the dataset instead: `shown_as`)
_SHOWN: dict[str, str] = {}


class DatasetBusy(DatasetError):
    """A run is writing the dataset (or stopped before it finished): no consistent view yet."""


def shown_as(text: str) -> str:
    """`text` with every snapshot folder replaced by the dataset it is a snapshot of."""
    for folder, shown in _SHOWN.items():
        text = text.replace(folder, shown)
    return text


def readers_root() -> Path:
    """Where readers' snapshots are taken (each its own folder, removed when it ends)."""
    from demofactory.shards.remote import cache_base

    return cache_base() / "readers"


@contextmanager
def reading(
    location: str | os.PathLike, *, shards: bool = True, fresh: bool = False, partial: bool = False
) -> Iterator[Path]:
    """A private snapshot of the dataset at `location` (a folder or a store URL), removed on exit.

    `shards`: the shards too (False: only the top-level files, what `inspect` reads); `fresh`:
    a stored dataset's shards downloaded again, not taken from the object cache (`verify`);
    `partial`: a dataset a run is writing is read as far as its journal goes (see the module doc).
    """
    from demofactory.shards.store import is_remote

    text = os.fspath(location)
    root = readers_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError:  # a read-only home: the system's temporary folder
        root = Path(tempfile.gettempdir()) / "demofactory-readers"
        root.mkdir(parents=True, exist_ok=True)
    _remove_orphans(root)
    into = Path(
        tempfile.mkdtemp(prefix=f"{_PREFIX}{socket.gethostname()}-{os.getpid()}-", dir=root)
    )
    _SHOWN[str(into)] = text.rstrip("/")
    try:
        if is_remote(text):
            _take_stored(text, into, shards, fresh, partial)
        else:
            _take_local(Path(text), into, shards, partial)
        yield into
    finally:
        shutil.rmtree(into, ignore_errors=True)


def _remove_orphans(root: Path) -> None:
    """Remove the snapshots of readers on this host that ended without removing theirs (killed)."""
    host = socket.gethostname()
    for path in root.glob(f"{_PREFIX}{host}-*-*"):
        pid = path.name[len(_PREFIX) + len(host) + 1 :].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's
        return True
    return True


# ---------------------------------------------------------------- local


def _take_local(dataset: Path, into: Path, shards: bool, partial: bool) -> None:
    if not dataset.is_dir():
        return  # nothing to copy: the reader says what is missing, naming the path
    _retry(
        dataset,
        into,
        lambda: _copy_local(dataset, into, shards),
        partial,
        writing=lambda: _writer(dataset),
    )


def _stamps(dataset: Path) -> dict[str, tuple[int, int, int]]:
    found = {}
    for path in dataset.iterdir():
        # Files, and whatever else is not a folder (a FIFO that blocks its reader, as a stalled
        # disk would: linked like a file, read by the command where the file would be).
        if path.name.startswith(".") or path.is_dir():
            continue
        try:
            stat = path.stat()
        except FileNotFoundError:  # removed since it was listed (a run folding its journal in)
            continue
        found[path.name] = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
    return found


def _copy_local(dataset: Path, into: Path, shards: bool) -> bool:
    """Copy once; True when no file changed meanwhile."""
    before = _stamps(dataset)
    hard = True
    for name in sorted(before):
        source, target = dataset / name, into / name
        with suppress(FileNotFoundError):  # replaced meanwhile: the stamps differ, taken again
            if name == JOURNAL_FILENAME:  # appended in place: only its whole lines
                with open(source, "rb") as f:
                    target.write_bytes(f.read(committed_length(source)))
                continue
            if hard:  # writers replace these files whole (a new inode): a link is a snapshot
                try:
                    os.link(source, target)
                    continue
                except FileNotFoundError:
                    raise
                except OSError:  # another file system, or not ours (protected hard links)
                    hard = False
            shutil.copyfile(source, target)
    if shards:
        for path in sorted(dataset.iterdir()):
            if path.is_dir() and not path.name.startswith("."):
                if path.name == SHARDS_DIRNAME:
                    _link_files(path, into / SHARDS_DIRNAME, _in_flight(dataset, into))
                else:  # the texture bank, written once per dataset
                    (into / path.name).symlink_to(path.resolve(), target_is_directory=True)
    return _stamps(dataset) == before


def _in_flight(dataset: Path, into: Path) -> set[str] | None:
    """While a run is writing: the stems of the shards the snapshot's manifest lists (a shard a
    worker has just finished is no part of the dataset yet, nor a stray); else None (every file:
    a stray left by a killed run is for `verify` to flag)."""
    if _writer(dataset) is None:
        return None
    try:
        return {info.name.removesuffix(".tar") for info in load_manifest(into).shards}
    except (DatasetError, OSError, UnicodeDecodeError):
        return None


def _link_files(source: Path, target: Path, stems: set[str] | None = None) -> None:
    target.mkdir()
    hard = True
    for path in sorted(source.iterdir()):
        if path.name.startswith(".") or not path.is_file():
            continue  # a worker's temporary shard
        if stems is not None and path.name.split(".", 1)[0] not in stems:
            continue
        if hard:
            try:
                os.link(path, target / path.name)
                continue
            except FileNotFoundError:
                continue
            except OSError:  # another file system, or not ours (protected hard links)
                hard = False
        (target / path.name).symlink_to(path.resolve())


def _writer(dataset: Path) -> str | None:
    """'pid N on HOST' of the `factory run` holding DIR/.lock, when it is alive on this host;
    None when none is. Read only: a reader never takes the lock (the writer's LOCK_NB would
    then refuse to start)."""
    try:
        lines = (dataset / LOCK_FILENAME).read_text().strip().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    # "pid N on HOST", then the command holding it ("factory run", "factory divergence")
    holder = lines[0].strip() if lines else ""
    words = holder.split()
    if len(words) != 4 or words[0] != "pid" or words[2] != "on" or not words[1].isdigit():
        return None
    if words[3] != socket.gethostname():
        return holder  # another machine's: it may be running
    return holder if _alive(int(words[1])) and _holds_lock(dataset) else None


def _holds_lock(dataset: Path) -> bool:
    """Whether DIR/.lock is locked, asked of /proc/locks (Linux) so that the lock is not touched;
    True where that cannot be asked (the pid is alive: assume it is the writer)."""
    try:
        stat = (dataset / LOCK_FILENAME).stat()
        text = Path("/proc/locks").read_text()
    except OSError:
        return True
    # a line: "1: FLOCK  ADVISORY  WRITE 4242 08:02:1234567 0 EOF" (device major:minor:inode);
    # the inode alone: an overlay file system shows another device than stat gives
    tail = f":{stat.st_ino}"
    return any(word.endswith(tail) for line in text.splitlines() for word in line.split())


# ---------------------------------------------------------------- store


def _take_stored(url: str, into: Path, shards: bool, fresh: bool, partial: bool) -> None:
    from demofactory.shards.remote import local_copy_dir, pull_metadata
    from demofactory.shards.store import Store

    store = Store(url, reading=True)  # a reader: seconds, not minutes

    def commit_state() -> tuple[bytes | None, bool]:
        return store.read_bytes(MANIFEST_FILENAME), store.size(JOURNAL_FILENAME) is not None

    def copy() -> bool:
        before = commit_state()
        pull_metadata(store, into, folders=None if shards else ("",))
        return commit_state() == before

    try:
        driver = local_copy_dir(store.url)  # a driver on this machine: its lock says so
    except ValueError:
        driver = None
    _retry(
        url,
        into,
        copy,
        partial,
        writing=lambda: _writer(driver) if driver is not None and driver.is_dir() else None,
    )
    if shards:
        _stored_shards(store, into, fresh)


def _stored_shards(store, into: Path, fresh: bool) -> None:
    from demofactory.shards.remote import cached_shard

    shard_dir = into / SHARDS_DIRNAME
    shard_dir.mkdir(exist_ok=True)
    for info in load_manifest(into).shards:
        target = shard_dir / info.name
        if fresh:  # what the store holds now, byte for byte (`factory verify`)
            store.get_file(f"{SHARDS_DIRNAME}/{info.name}", target)
            continue
        cached = cached_shard(store, info)
        if cached is None:  # not the listed bytes: the reader sees what is there
            store.get_file(f"{SHARDS_DIRNAME}/{info.name}", target)
            continue
        try:
            os.link(cached, target)
        except OSError:
            target.symlink_to(cached)


# ---------------------------------------------------------------- both


def _retry(location, into: Path, copy, partial: bool, writing) -> None:
    """Take the snapshot into `into` until it is one (nothing changed while it was copied, and
    its files agree or no run is writing), for up to WAIT_S; DatasetBusy when a run is writing."""
    deadline, wait = time.monotonic() + WAIT_S, _FIRST_WAIT_S
    while True:
        stable = copy()
        journal = (into / JOURNAL_FILENAME).exists()
        if stable and journal and not partial:
            break  # a run's shards not folded in yet: that lasts, no use waiting
        if stable and (partial or _disagreement(into) is None or writing() is None):
            return
        if time.monotonic() + wait > deadline:
            break
        _clear(into)
        time.sleep(wait)
        wait = min(wait * 2, _MAX_WAIT_S)
    holder = writing()
    if holder is not None:
        raise DatasetBusy(
            f"{location}: a `factory run` is writing this dataset ({holder}); readers see it "
            "once that run has finished: run this command again then"
        )
    if journal:
        raise DatasetBusy(
            f"{location}: a `factory run` stopped before it finished (its {JOURNAL_FILENAME} "
            "lists shards that episodes.jsonl and stats.json do not hold yet), or one on another "
            "machine is writing it: run that command again to finish the dataset, then read it"
        )
    raise DatasetBusy(f"{location}: its files kept changing for {WAIT_S:g} s; read it again")


def _disagreement(into: Path) -> str | None:
    """Why the snapshot's manifest, episodes.jsonl, stats.json and generation.json do not
    describe the same shards (a run folding its journal in), or None. A file that cannot be
    read is no disagreement: the reader reports it."""
    try:
        if not (into / MANIFEST_FILENAME).is_file():
            return None
        manifest = load_manifest(into)
        episodes = into / EPISODES_FILENAME
        if episodes.is_file():
            with open(episodes, "rb") as f:
                lines = sum(1 for line in f if line.strip())
            if lines != manifest.total_episodes:
                return f"{EPISODES_FILENAME}: {lines} episodes, {MANIFEST_FILENAME}: more or fewer"
        stats = into / STATS_FILENAME
        if stats.is_file():
            recorded = read_json_file(stats).get("episodes")
            if isinstance(recorded, int) and recorded != manifest.total_episodes:
                return f"{STATS_FILENAME}: {recorded} episodes"
        generation = into / GENERATION_FILENAME
        if generation.is_file():
            names = set(read_json_file(generation).get("shards") or {})
            if names != {info.name for info in manifest.shards}:
                return f"{GENERATION_FILENAME}: other shards"
    except (DatasetError, OSError, ValueError, AttributeError, UnicodeDecodeError):
        return None
    return None


def _clear(into: Path) -> None:
    for path in into.iterdir():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
