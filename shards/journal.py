"""The commit journal: one JSON line a finished (or dropped) shard, appended; the commit point.

    driver, a shard finished ──► DIR/journal.jsonl += {"op": "add", "shard": <manifest entry>,
                                                       "generation": <its generation.json entry>}
    driver, shards dropped   ──► DIR/journal.jsonl += {"op": "drop", "names": [...]}
    readers (load_manifest, load_generation) ──► the snapshot file, then the journal's records
                                                 applied in order (the last record of a name wins)
    driver, at the end ──► manifest.json and generation.json rewritten from snapshot + journal
                           ──► the journal removed

Why: rewriting manifest.json after every shard costs time that grows with the dataset (at
100,000 shards each rewrite is megabytes); one appended line costs the same at any size.

A record counts once its line, newline included, is in the file: a driver killed at any moment
leaves whole lines and at most one torn last line, which readers ignore and the next writer cuts
off. Applying the journal twice gives the state of applying it once (each record sets or removes
one name), so a driver killed between rewriting the snapshot and removing the journal loses
nothing. A damaged line before the last is a damaged file (`DatasetError`, naming the line).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from demofactory.shards.format import DatasetError, dumps_json, fsync_path
from demofactory.shards.writer import ShardInfo

JOURNAL_FILENAME = "journal.jsonl"
_TAIL_CHUNK = 1 << 16


@dataclass(frozen=True)
class JournalRecord:
    """One line of the journal: op "add" (`info`, `generation`) or "drop" (`names`).

    offset: where the line starts in the file (`read_record_at` reads it again).
    """

    op: str
    offset: int
    info: ShardInfo | None = None
    generation: Mapping[str, Any] | None = None
    names: tuple[str, ...] = ()


def journal_path(dataset_dir: Path) -> Path:
    return Path(dataset_dir) / JOURNAL_FILENAME


def _parse(line: bytes, offset: int, where: str) -> JournalRecord:
    try:
        entry = json.loads(line)
        if entry["op"] == "add":
            generation = entry["generation"]
            if not isinstance(generation, dict):
                raise TypeError("'generation' must be an object")
            return JournalRecord("add", offset, ShardInfo.from_json(entry["shard"]), generation)
        if entry["op"] == "drop":
            names = entry["names"]
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise TypeError("'names' must be a list of strings")
            return JournalRecord("drop", offset, names=tuple(names))
        raise ValueError(f"op {entry['op']!r} (expected 'add' or 'drop')")
    except (ValueError, KeyError, TypeError, DatasetError) as exc:
        raise DatasetError(f"{where}: not a journal record ({exc})") from None


def read_journal(dataset_dir: Path) -> Iterator[JournalRecord]:
    """The committed records of ``DIR/journal.jsonl`` in order; none when it is missing.

    A torn last line (no newline: the writer died mid-line) is skipped.
    """
    path = journal_path(dataset_dir)
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return
    with f:
        offset = 0
        for number, line in enumerate(f, start=1):
            if not line.endswith(b"\n"):
                return  # torn: never committed
            if line.strip():
                yield _parse(line, offset, f"{path}:{number}")
            offset += len(line)


def read_record_at(f, offset: int, where: str) -> JournalRecord:
    """The record whose line starts at `offset` of the open journal `f` (binary)."""
    f.seek(offset)
    return _parse(f.readline(), offset, where)


def apply_journal(state: dict, records: Iterator[JournalRecord], value) -> dict:
    """`state` (name -> value) with `records` applied: "add" sets name -> value(record), "drop"
    removes names. Changes and returns `state`."""
    for record in records:
        if record.op == "add":
            state[record.info.name] = value(record)
        else:
            for name in record.names:
                state.pop(name, None)
    return state


def committed_length(path: Path) -> int:
    """The length of `path` up to and including its last newline (0 when it has none)."""
    with open(path, "rb") as f:
        end = f.seek(0, os.SEEK_END)
        while end > 0:
            start = max(0, end - _TAIL_CHUNK)
            f.seek(start)
            found = f.read(end - start).rfind(b"\n")
            if found >= 0:
                return start + found + 1
            end = start
    return 0


class JournalWriter:
    """Appends records to ``DIR/journal.jsonl``; `sync` makes them durable across a power loss.

    Each record is one write(2) of a whole line on an O_APPEND descriptor: once it returns, a
    driver killed outright (SIGKILL) has committed it. A failed write is cut off again, so the
    file never holds a torn line followed by more records.
    """

    def __init__(self, dataset_dir: Path):
        self.path = journal_path(dataset_dir)
        created = not self.path.exists()
        if not created:  # a torn last line, left by a killed driver: never committed
            length = committed_length(self.path)
            if length < self.path.stat().st_size:
                os.truncate(self.path, length)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if created:
            fsync_path(self.path.parent)

    def add(self, info: ShardInfo, generation: Mapping[str, Any]) -> None:
        """Commit a finished shard: its manifest entry and its generation.json entry."""
        self._append({"op": "add", "shard": info.to_json(), "generation": generation})

    def drop(self, names: Sequence[str]) -> None:
        """Commit the removal of shards from the dataset."""
        self._append({"op": "drop", "names": list(names)})

    def _append(self, record: dict) -> None:
        data = (dumps_json(record) + "\n").encode()
        start = os.lseek(self._fd, 0, os.SEEK_END)
        try:
            view = memoryview(data)
            while view:
                view = view[_write(self._fd, view) :]
        except OSError:
            os.ftruncate(self._fd, start)  # no torn line before the next record
            raise

    def sync(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _write(fd: int, data: memoryview) -> int:
    # one place for the write(2) call (tests put a full disk here)
    return os.write(fd, data)


def remove_journal(dataset_dir: Path) -> None:
    """Remove the journal once a snapshot holds its records (durably: the directory is synced)."""
    path = journal_path(dataset_dir)
    if path.exists():
        path.unlink()
        fsync_path(path.parent)
