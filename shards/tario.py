"""A small streaming reader of POSIX ustar archives: the regular files of a tar, in order, as bytes.

    a binary stream (a file, a pipe, an HTTP body)
      -> 512-byte header blocks, checksum verified             _parse_header
      -> (name, data) per regular file; data padded to 512      iter_tar
      -> an all-zero block ends the archive

The loader's shards are small members (a JPEG, a few .npy and a .json per
step), where Python's `tarfile` spends more time parsing headers than the
loader spends on anything but JPEG decoding. This reader parses only the
fields it needs and reads the stream in large chunks.

Unlike `tarfile`, which ends an archive quietly at a corrupt header, it raises
`DatasetError` naming the archive and the byte offset for a bad checksum, a
malformed field, a member cut short, or a stream that ends without the
end-of-archive block. Archives with pax or GNU extension headers (long names,
sparse files: typeflags x, g, L, K, S), which `shards.write_shard` does not
write for its short member names, are handed to `tarfile` from that header on.
"""

from __future__ import annotations

import tarfile
import zlib
from collections.abc import Iterator
from typing import BinaryIO

from shards.format import DatasetError

BLOCK = 512
CHUNK = 1 << 16  # bytes read from the stream at a time; a larger member is read whole

_ZERO_BLOCK = bytes(BLOCK)
_REGULAR_TYPES = frozenset((b"0", b"\0", b"7"))  # file, old-style file, contiguous file
_NO_DATA_TYPES = frozenset((b"1", b"2", b"3", b"4", b"5", b"6"))  # links, devices, dirs, fifos
_TARFILE_TYPES = frozenset((b"x", b"g", b"L", b"K", b"S"))  # pax and GNU extensions
_POSIX_MAGIC = b"ustar\x00"  # with version "00"; GNU's "ustar  " has no prefix field
_CHKSUM_SPACES = 8 * ord(" ")  # the checksum counts its own field as spaces
_ADLER_MOD = 65521


class TarFormatError(ValueError):
    """A header that is not a valid ustar header."""


def iter_tar(stream: BinaryIO, source: str) -> Iterator[tuple[str, bytes]]:
    """The regular files of the tar archive in `stream` -> (name, data), in archive order.

    `source` names the archive in errors. Directories, links and devices are
    skipped. Raises `DatasetError` for a corrupt or truncated archive (an empty
    stream included).
    """
    blocks = _Blocks(stream)
    while True:
        header = blocks.take(BLOCK)
        if len(header) < BLOCK:
            what = (
                "is empty"
                if blocks.offset == 0
                else (f"ends at byte {blocks.offset} without the end-of-archive block")
            )
            raise DatasetError(f"{source}: truncated tar file: the stream {what}")
        if header == _ZERO_BLOCK:
            return
        try:
            name, size, kind = _parse_header(header)
        except TarFormatError as exc:
            raise DatasetError(
                f"{source}: not a readable tar file: header at byte {blocks.offset - BLOCK}: {exc}"
            ) from None
        if kind in _NO_DATA_TYPES:
            continue
        if kind in _TARFILE_TYPES:
            yield from _tarfile_members(_Prepended(header + blocks.rest(), stream), source)
            return
        data = blocks.take(
            size, padding=-size % BLOCK
        )  # unknown types have data too, as tarfile assumes
        if len(data) < size:
            raise DatasetError(
                f"{source}: truncated tar file: member {name} (header at byte "
                f"{blocks.offset - len(data) - BLOCK}) has {len(data)} of its {size} bytes"
            )
        if kind in _REGULAR_TYPES:
            yield name, data


def _parse_header(header: bytes) -> tuple[str, int, bytes]:
    """A 512-byte header -> (name, size, typeflag); TarFormatError if it is not one."""
    field = header[148:156]
    stored = _number(field, "checksum")
    unsigned = _byte_sum(header) - sum(field) + _CHKSUM_SPACES
    if stored != unsigned and stored != unsigned - 256 * _high_bytes(
        header
    ):  # old tars sum signed chars
        raise TarFormatError(f"bad checksum ({stored} stored, {unsigned} computed)")
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
        raise TarFormatError(f"{what} field {field!r} is not an octal number >= 0")
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


def _tarfile_members(stream: _Prepended, source: str) -> Iterator[tuple[str, bytes]]:
    # tarfile from the first extension header on; it still ends quietly at a corrupt header
    # after the first, which the loader's manifest sample counts catch.
    try:
        with tarfile.open(fileobj=stream, mode="r|", encoding="utf-8") as tar:
            for info in tar:
                if info.isfile():
                    yield info.name, tar.extractfile(info).read()
    except tarfile.TarError as exc:
        raise DatasetError(f"{source}: not a readable tar file: {exc}") from exc


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
        """The next `n` bytes, then `padding` bytes passed over; fewer only at the end of the stream."""
        end = self.pos + n
        if end + padding > len(self.buffer):
            self._fill(n + padding)
            end = n
        data = self.buffer[self.pos : end]
        self.pos = min(end + padding, len(self.buffer))
        return data

    def rest(self) -> bytes:
        """The bytes read from the stream but not yet handed out."""
        data, self.pos = self.buffer[self.pos :], len(self.buffer)
        return data

    def _fill(self, n: int) -> None:
        # Afterwards buffer starts at the unread bytes and holds >= n of them, unless the stream ended.
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


class _Prepended:
    """A read-only stream: `head`, then the rest of `stream`."""

    def __init__(self, head: bytes, stream: BinaryIO):
        self.head, self.stream = head, stream

    def read(self, n: int = -1) -> bytes:
        if not self.head:
            return self.stream.read(n)
        if n is None or n < 0:
            data, self.head = self.head + self.stream.read(), b""
            return data
        data, self.head = self.head[:n], self.head[n:]
        return data
