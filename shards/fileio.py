"""Files written whole or not at all, read back with one clear error: what the dataset format
and `generators/` (the texture bank) share, and the one module of `shards/` that the generators
may import (tests/project/test_layers.py); it imports nothing of the project.

    atomic_output(path)     a temporary file beside `path`, fsynced, renamed over it on success
    write_text_atomic       the same for a text
    dumps_json              the one JSON encoding of dataset files (sorted keys, no NaN)
    read_json_file          parse a JSON file; malformed: `DatasetError` naming the file
    sha256_file             what manifests and banks record of a file
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

_HASH_CHUNK = 1 << 20


class DatasetError(Exception):
    """A dataset file that is missing a part, malformed, or inconsistent.

    The message names the file and what is wrong with it. The dataset format's own error: not
    a `ValueError` (a bug's `ValueError` must not pass for a damaged dataset), and printed by
    the CLI as one `error:` line, exit 2 (`demofactory.errors.USER_FACING_ERRORS`).
    """


def dumps_json(value: Any, *, indent: int | None = None) -> str:
    """The one JSON encoding used for dataset files: sorted keys, no NaN/Infinity.

    NaN is not valid JSON and other readers (JS, Rust, jq) reject it, so it fails here.
    """
    return json.dumps(value, sort_keys=True, indent=indent, allow_nan=False)


@contextmanager
def atomic_output(path: Path) -> Iterator[BinaryIO]:
    """Open a temporary file next to `path` for binary writing; rename it to `path` on success.

    The temporary name (``.<name>.tmp-<pid>``) lives in the same directory so that
    `os.replace` is an atomic rename. The data is flushed and fsynced before the
    rename. On any exception the temporary file is removed and the exception
    propagates; `path` is then untouched (absent, or its previous content).
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_path(path.parent)


def fsync_path(path: Path) -> None:
    """fsync a file, or a directory (which makes a rename inside it durable across a power loss)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text_atomic(path: Path, text: str) -> None:
    """Write `text` (UTF-8) to `path` atomically: a reader sees the old file or the new one."""
    data = text.encode("utf-8")
    with atomic_output(path) as f:
        f.write(data)


def read_json_file(path: Path) -> Any:
    """Parse a JSON file; malformed content raises `DatasetError` naming the file.

    A missing file raises FileNotFoundError; callers decide whether that is allowed.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}: not a JSON text file (byte {exc.start} is not UTF-8)") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}: malformed JSON: {exc}") from exc


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
