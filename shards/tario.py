"""The one strict reader of shards: a tar's regular files, in order, as bytes, then as samples.

    a binary stream (a file, a pipe, an HTTP body)
      -> 512-byte header blocks, checksum verified             _parse_header
      -> (name, data) per regular file; data padded to 512      iter_tar
      -> an all-zero block ends the archive; only zeros may follow it   _check_end
    (name, data) -> (name, data) of the step layout, either shard layout
       (`demofactory.shards.shard_layout.expand_members`)                   iter_steps
    (name, data) of a shard's tar, tagged with its ShardTask
      -> Member(task, name, data)                              read_samples (stages.read_members)
      -> RawSample(task, key, members): adjacent members sharing
         the key before the first dot                          group_samples

Every reader of shards goes through here: the training loader (`demofactory.shards.stages`),
`demofactory.shards.verify`, `demofactory.shards.stats`, `factory preview` and the exports. Python's
`tarfile` is used only by the writer.

The loader's shards are small members (a JPEG, a few .npy and a .json per
step), where Python's `tarfile` spends more time parsing headers than the
loader spends on anything but JPEG decoding. This reader parses only the
fields it needs and reads the stream in large chunks.

Unlike `tarfile`, which ends an archive quietly at a corrupt header, it raises
`TarFormatError` (a `DatasetError`) naming the archive and the byte offset for a
bad checksum, a malformed field, a member cut short, or a stream that ends
without the end-of-archive block, or data after that block (where a corrupt
size field can end an archive). It reads the pax and GNU extension headers
(typeflags x, g, L, K: long and non-ASCII names) that `shards.write_shard`
never needs for its short member names but other writers may use; sparse files
(GNU S, pax GNU.sparse) are refused.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from demofactory.shards.format import DatasetError
from demofactory.shards.shard_layout import expand_members

BLOCK = 512
CHUNK = 1 << 16  # bytes read from the stream at a time; a larger member is read whole

_ZERO_BLOCK = bytes(BLOCK)
_REGULAR_TYPES = frozenset((b"0", b"\0", b"7"))  # file, old-style file, contiguous file
_NO_DATA_TYPES = frozenset((b"1", b"2", b"3", b"4", b"5", b"6"))  # links, devices, dirs, fifos
_EXTENSION_TYPES = frozenset((b"x", b"g", b"L", b"K", b"S"))  # pax and GNU extensions
_POSIX_MAGIC = b"ustar\x00"  # with version "00"; GNU's "ustar  " has no prefix field
_CHKSUM_SPACES = 8 * ord(" ")  # the checksum counts its own field as spaces
_ADLER_MOD = 65521


class TarFormatError(DatasetError):
    """A shard that is not a readable tar: a corrupt header, a member cut short, no end block.

    str() is "<source>: <reason>": `source` names the archive (the shard's path or URL),
    `reason` says what is wrong and where (the header's byte offset, the member's name).
    """

    def __init__(self, source: str, reason: str):
        super().__init__(source, reason)  # both in args, so that the error pickles (Ray)
        self.source, self.reason = source, reason

    def __str__(self) -> str:
        return f"{self.source}: {self.reason}"


class _HeaderError(ValueError):
    """A 512-byte block that is not a valid ustar header."""


def iter_tar(stream: BinaryIO, source: str) -> Iterator[tuple[str, bytes]]:
    """The regular files of the tar archive in `stream` -> (name, data), in archive order.

    `source` names the archive in errors. Directories, links and devices are
    skipped. Raises `TarFormatError` for a corrupt or truncated archive (an empty
    stream included).
    """
    blocks = _Blocks(stream)
    pending: dict[str, str] = {}  # pax (x) or GNU (L, K) fields for the next header
    shared: dict[str, str] = {}  # pax global (g) fields, for every later header
    while True:
        header = blocks.take(BLOCK)
        if len(header) < BLOCK:
            end = blocks.offset
            what = (
                "is empty" if end == 0 else f"ends at byte {end} without the end-of-archive block"
            )
            raise TarFormatError(source, f"truncated tar file: the stream {what}")
        if header == _ZERO_BLOCK:
            _check_end(blocks, source)
            return
        data_read = 0  # bytes past the header when an error is raised
        try:
            name, size, kind = _parse_header(header)
            if kind in _EXTENSION_TYPES:
                data = _data(blocks, source, name, size)
                data_read = size + -size % BLOCK
                _extend(pending if kind != b"g" else shared, kind, data)
                continue
            if pending or shared:
                name, size = _apply_fields(name, size, {**shared, **pending})
        except _HeaderError as exc:
            at = blocks.offset - data_read - BLOCK  # computed only here: `offset` costs a call
            raise TarFormatError(
                source, f"not a readable tar file: header at byte {at}: {exc}"
            ) from None
        if pending:
            pending = {}
        if kind in _NO_DATA_TYPES:
            continue
        data = blocks.take(size, padding=-size % BLOCK)  # unknown types have data too
        if len(data) < size:
            raise _truncated(blocks, source, name, len(data), size)
        if kind in _REGULAR_TYPES:
            yield name, data


def iter_steps(stream: BinaryIO, source: str) -> Iterator[tuple[str, bytes]]:
    """`iter_tar`, with the samples of an episode-layout shard expanded into the step
    layout's: what every reader of shards reads (`demofactory.shards.shard_layout`)."""
    return expand_members(iter_tar(stream, source), source)


def _data(blocks: _Blocks, source: str, name: str, size: int) -> bytes:
    """The `size` bytes of the member whose header was just read, its padding passed over."""
    data = blocks.take(size, padding=-size % BLOCK)
    if len(data) < size:
        raise _truncated(blocks, source, name, len(data), size)
    return data


def _truncated(blocks: _Blocks, source: str, name: str, got: int, size: int) -> TarFormatError:
    # The stream ended `got` bytes into the data of member `name`.
    at = blocks.offset - got - BLOCK
    return TarFormatError(
        source,
        f"truncated tar file: member {name} (header at byte {at}) has {got} of its {size} bytes",
    )


def _extend(fields: dict[str, str], kind: bytes, data: bytes) -> None:
    # An extension header's data -> the fields it sets for the header(s) after it.
    if kind == b"L":  # GNU long name: the name, NUL-terminated
        fields["path"] = _text(data)
    elif kind == b"K":  # GNU long link name: links are skipped
        fields["linkpath"] = _text(data)
    elif kind == b"S":
        raise _HeaderError("a GNU sparse file, which no shard holds")
    else:  # pax: records "<length> <key>=<value>\n"
        fields.update(_pax_records(data))


def _pax_records(data: bytes) -> dict[str, str]:
    records, pos = {}, 0
    while pos < len(data) and data[pos] != 0:  # tarfile also stops at NUL padding
        length = data[pos : pos + 20].partition(b" ")[0]
        end = pos + int(length) if length.isdigit() else 0
        key, eq, value = data[pos + len(length) + 1 : end - 1].partition(b"=")
        if end <= pos or end > len(data) or data[end - 1 : end] != b"\n" or not eq:
            raise _HeaderError(f"malformed pax record at byte {pos} of its data")
        records[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        pos = end
    return records


def _apply_fields(name: str, size: int, fields: Mapping[str, str]) -> tuple[str, int]:
    # The pax/GNU fields this reader uses; sparse files (pax GNU.sparse.*) are refused.
    if any(key.startswith("GNU.sparse.") for key in fields):
        raise _HeaderError("a GNU sparse file, which no shard holds")
    if "size" in fields:
        if not (fields["size"].isascii() and fields["size"].isdigit()):
            raise _HeaderError(f"pax size {fields['size']!r} is not a number >= 0")
        size = int(fields["size"])
    return fields.get("path", name), size


# ---------------------------------------------------------------- members -> samples


@dataclass(frozen=True)
class ShardTask:
    """One shard for one split to read: keep episodes whose position % parts == part.

    ordinal numbers the tasks of one stream, so two draws of the same shard differ.
    """

    url: str
    part: int = 0
    parts: int = 1
    ordinal: int = 0


@dataclass(frozen=True)
class Member:
    task: ShardTask
    name: str  # "<key>.<suffix>", e.g. "e00000042_t0007.agentview.jpg"
    data: bytes


@dataclass(frozen=True)
class RawSample:
    task: ShardTask
    key: str
    members: Mapping[str, bytes]  # suffix ("action.npy", "agentview.jpg", ...) -> bytes


def read_samples(
    path: str | Path, wanted: Callable[[str], bool] = lambda suffix: True
) -> Iterator[RawSample]:
    """A local shard file -> its samples, in tar order, holding the members `wanted` accepts.

    The strict reader for tools that read a shard whole (verify, stats, preview);
    the training loader opens URLs with `demofactory.shards.stages.read_members`. A corrupt or
    truncated tar raises `TarFormatError` naming `path`; a member twice in a sample,
    `DatasetError`. Stopping early (a generator closed) closes the file.
    """
    task = ShardTask(str(path))
    with open(path, "rb") as stream:
        members = (
            Member(task, name, data)
            for name, data in iter_steps(stream, task.url)
            if wanted(name.partition(".")[2])
        )
        yield from group_samples(members)


def group_samples(members: Iterable[Member]) -> Iterator[RawSample]:
    """Members -> samples: adjacent members with the same key (up to the first dot), same task."""
    for (task, key), group in itertools.groupby(
        members, key=lambda m: (m.task, m.name.partition(".")[0])
    ):
        parts: dict[str, bytes] = {}
        for member in group:
            suffix = member.name.partition(".")[2]
            if suffix in parts:
                raise DatasetError(f"{task.url}: member {member.name} appears twice")
            parts[suffix] = member.data
        yield RawSample(task, key, parts)


# ---------------------------------------------------------------- the ustar format


def _check_end(blocks: _Blocks, source: str) -> None:
    # Only zeros may follow the end-of-archive block (tarfile pads to 10 KiB). A member whose
    # size field was corrupted can put a "header" on a zero block of some member's data, and
    # the archive would otherwise end there quietly, short of its members.
    at = blocks.offset - BLOCK
    while chunk := blocks.take(CHUNK):
        zeros = len(chunk) - len(chunk.lstrip(b"\0"))
        if zeros < len(chunk):
            follows = blocks.offset - len(chunk) + zeros
            raise TarFormatError(
                source,
                f"not a readable tar file: an all-zero block at byte {at} ends the archive, "
                f"yet data follows at byte {follows} (a corrupt size field?)",
            )


def _parse_header(header: bytes) -> tuple[str, int, bytes]:
    """A 512-byte header -> (name, size, typeflag); _HeaderError if it is not one."""
    field = header[148:156]
    stored = _number(field, "checksum")
    unsigned = _byte_sum(header) - sum(field) + _CHKSUM_SPACES
    # old tars sum signed chars; _high_bytes is slow, so only counted on a mismatch
    if stored != unsigned and stored != unsigned - 256 * _high_bytes(header):
        raise _HeaderError(f"bad checksum ({stored} stored, {unsigned} computed)")
    name = _text(header[0:100])
    if header[257:263] == _POSIX_MAGIC:
        prefix = _text(header[345:500])
        if prefix:
            name = f"{prefix}/{name}"
    kind = header[156:157]
    if kind == b"\0" and name.endswith("/"):  # a directory in a pre-POSIX tar
        kind = b"5"
    return name, _number(header[124:136], "size"), kind


def _number(field: bytes, what: str) -> int:
    # Octal digits ended by NUL or space; or, for values octal cannot hold, base-256 with the
    # high bit of the first byte set (GNU, also written by tarfile).
    if field[0] == 0x80:
        return int.from_bytes(field[1:], "big")
    digits = field.partition(b"\0")[0]
    try:
        value = int(digits, 8) if digits.strip() else 0  # int() ignores the spaces around
    except ValueError:
        value = None
    if value is None or value < 0:  # negative: "-7" in octal, or 0xFF and base-256
        raise _HeaderError(f"{what} field {field!r} is not an octal number >= 0")
    return value


def _byte_sum(header: bytes) -> int:
    # zlib's adler32 holds 1 + the byte sum mod 65521, computed in C; while too few bytes are
    # non-zero to reach the modulus (a header of ASCII names has about a hundred) that is the
    # byte sum itself, at a tenth of the cost of sum() over 512 bytes in Python.
    if 255 * (BLOCK - header.count(0)) < _ADLER_MOD - 1:
        return (zlib.adler32(header) & 0xFFFF) - 1
    return sum(header)


def _high_bytes(header: bytes) -> int:
    return sum(1 for i, byte in enumerate(header) if byte >= 0x80 and not 148 <= i < 156)


def _text(field: bytes) -> str:
    return field.partition(b"\0")[0].decode("utf-8", "surrogateescape")


class _Blocks:
    """Reads a stream in CHUNK-sized pieces; hands out exact byte counts and tracks the offset."""

    def __init__(self, stream: BinaryIO):
        self.stream = stream
        self.buffer = b""
        self.pos = 0  # next unread byte of buffer
        self.base = 0  # stream offset of buffer[0]

    @property
    def offset(self) -> int:
        return self.base + self.pos

    def take(self, n: int, padding: int = 0) -> bytes:
        """The next `n` bytes, then `padding` bytes passed over; fewer only at the stream's end."""
        end = self.pos + n
        if end + padding > len(self.buffer):
            self._fill(n + padding)
            end = n
        data = self.buffer[self.pos : end]
        self.pos = min(end + padding, len(self.buffer))
        return data

    def _fill(self, n: int) -> None:
        # Afterwards buffer starts at the unread bytes and holds >= n of them, unless the stream
        # ended.
        parts = [self.buffer[self.pos :]]
        have = len(parts[0])
        while have < n:
            chunk = self.stream.read(max(CHUNK, n - have))
            if not chunk:
                break
            parts.append(chunk)
            have += len(chunk)
        self.base += self.pos
        self.buffer, self.pos = b"".join(parts), 0
