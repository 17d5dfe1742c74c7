"""Where a dataset lives: a local directory, or any fsspec URL (s3://, gs://, az://, file://).

    "out/lift"                 ──► local: every reader and writer uses the path as it is
    "s3://bucket/prefix" ...   ──► Store(url): small objects read and written whole,
                                   shards put whole and streamed back, through fsspec
                                   (s3fs for s3://; credentials and endpoint as the library
                                   finds them: AWS_* variables, ~/.aws, FSSPEC_S3_* config)

The store is not a file system: no rename, no append, no lock. What the factory needs from it
is small: put an object whole (a PUT is atomic on every object store: a reader sees the old
object or the new one, never half), read one whole, stream one, list a prefix, delete.
Writing straight to a final name is therefore safe here, as it is not on a POSIX disk.

Faults:
    bucket missing            ──► StoreError  "<url>: bucket ... does not exist; create it ..."
    credentials refused       ──► StoreError  "<url>: access denied ...; check the credentials"
    endpoint unreachable      ──► retried with backoff for `retry_s` seconds (STORE_RETRY_ENV),
                                  then StoreUnavailable "<url>: unreachable for N s ..."
All are `DatasetError`s: the CLI prints one line and exits 2.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TypeVar
from urllib.parse import urlparse

from demofactory.shards.format import DatasetError

STORE_RETRY_ENV = "DEMOFACTORY_STORE_RETRY_S"  # seconds an unreachable store is retried
DEFAULT_RETRY_S = 300.0  # long enough to ride out a restart of the endpoint or a network blip
# A command that only reads (verify, inspect, export, preview, train-eval) has nothing to keep
# going: it stops within seconds, one line, rather than sit silent for minutes.
READ_RETRY_S = 10.0
# botocore's own limits, per request (its defaults: 60 s to connect, 60 s per read, up to 5
# tries each): a silent endpoint would hold one call for minutes before `_call` saw an error.
S3_CLIENT_CONFIG = {
    "connect_timeout": 5,
    "read_timeout": 15,
    "retries": {"max_attempts": 1, "mode": "standard"},  # 1: no retry of botocore's own
}
S3FS_RETRIES = 2  # s3fs's own tries of a timed-out call (its default: 5); `_call` does the rest
# A reader's limits: it retries for READ_RETRY_S in all, so one silent call may not hold it for
# the writer's 2 x 15 s (a read timeout bounds the wait between bytes, not a whole object).
S3_READ_CLIENT_CONFIG = {**S3_CLIENT_CONFIG, "read_timeout": 5}
S3FS_READ_RETRIES = 1
_FIRST_BACKOFF_S, _MAX_BACKOFF_S = 0.5, 15.0

T = TypeVar("T")


class StoreError(DatasetError):
    """An object store the factory cannot use as asked: one line naming the URL."""


class StoreUnavailable(StoreError):
    """The store's endpoint stayed unreachable for the retry time."""


def is_remote(location: str | os.PathLike) -> bool:
    """True for a URL with a scheme (s3://, gs://, file://, memory://), not a local path.

    A one-letter scheme is a Windows drive letter, not a protocol."""
    return len(urlparse(os.fspath(location)).scheme) > 1


def normalize_url(url: str) -> str:
    """The one spelling of a store URL, used everywhere after the command line: the scheme in
    lower case, empty and "." segments dropped, no trailing "/" (`s3://bkt//dbl/` is
    `s3://bkt/dbl`: the same objects, the same local copy). A StoreError (one line) for a URL
    that names no bucket, or holds "..", or a query or fragment (which no store key means).

    Normalized once, here, because the store, its local copy and every message name the
    dataset by this text: two spellings of one dataset would be two datasets."""
    text = os.fspath(url)
    parsed = urlparse(text)
    scheme = parsed.scheme.lower()
    segments = [s for s in parsed.path.split("/") if s not in ("", ".")]
    if ".." in segments:
        raise StoreError(f"{text}: '..' in a dataset URL; expected a plain prefix")
    if parsed.query or parsed.fragment or text.rstrip("/").endswith(("?", "#")):
        raise StoreError(f"{text}: a '?' or '#' in a dataset URL; expected a plain prefix")
    if scheme in ("file", "local", "memory"):  # a path, not a bucket
        head = [s for s in parsed.netloc.split("/") if s]
        return f"{scheme}://" + ("" if scheme == "memory" else "/") + "/".join(head + segments)
    if not parsed.netloc:
        raise StoreError(f"{text}: no bucket in the URL; expected {scheme}://BUCKET/PREFIX")
    return "/".join([f"{scheme}://{parsed.netloc}", *segments])


# What webdataset's gopen opens itself (a path, file:, pipe:, http(s):); any other scheme
# (s3:, gs:, az:, memory:) is opened through fsspec.
_GOPEN_SCHEMES = frozenset({"file", "pipe", "http", "https"})
STREAM_BLOCK = 8 << 20  # bytes fetched per request when a shard is streamed


@contextmanager
def open_url(url: str) -> Iterator[IO[bytes]]:
    """A shard (or any object) as a binary stream, read as it is consumed."""
    scheme = urlparse(url).scheme
    if len(scheme) <= 1 or scheme in _GOPEN_SCHEMES:
        from webdataset.gopen import gopen

        with gopen(url) as stream:
            yield stream
        return

    try:
        fs, path = _filesystem(url)
        handle = fs.open(path, "rb", block_size=STREAM_BLOCK, cache_type="readahead")
    except FileNotFoundError:
        raise DatasetError(f"{url}: not found") from None
    except PermissionError as err:
        raise StoreError(
            f"{url}: access denied ({_first_line(err)}); check the credentials"
        ) from None
    try:
        yield handle
    finally:
        handle.close()


def _filesystem(url: str, reading: bool = False):
    """fsspec's file system and path for `url`, without a listings cache: a dataset is written
    by other processes while it is read, and a cached listing would hide their new objects.
    `reading`: a command that only reads, with the shorter per-call limits."""
    import fsspec

    protocol = fsspec.core.split_protocol(url)[0]
    options: dict = {"use_listings_cache": False} if protocol in _LISTING_CACHES else {}
    if protocol in ("s3", "s3a"):
        options["config_kwargs"] = S3_READ_CLIENT_CONFIG if reading else S3_CLIENT_CONFIG
    fs, path = fsspec.core.url_to_fs(url, **options)
    if protocol in ("s3", "s3a"):
        fs.retries = S3FS_READ_RETRIES if reading else S3FS_RETRIES
    return fs, path


# Protocols whose file systems cache listings (and take `use_listings_cache`).
_LISTING_CACHES = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl"})


def retry_seconds(reading: bool = False) -> float:
    """How long an unreachable store is retried: STORE_RETRY_ENV, else DEFAULT_RETRY_S for a
    writer and READ_RETRY_S for a command that only reads (`reading`)."""
    text = os.environ.get(STORE_RETRY_ENV)
    if text is None:
        return READ_RETRY_S if reading else DEFAULT_RETRY_S
    try:
        value = float(text)
    except ValueError:
        raise StoreError(f"{STORE_RETRY_ENV}={text!r}: expected seconds (a number >= 0)") from None
    if value < 0:
        raise StoreError(f"{STORE_RETRY_ENV}={text!r}: expected seconds (a number >= 0)")
    return value


def _is_unreachable(err: BaseException) -> bool:
    """Connection-level failures, which a retry may cure (not a missing bucket or a refusal)."""
    if isinstance(err, (ConnectionError, TimeoutError)):
        return True
    names = {cls.__name__ for cls in type(err).__mro__}
    # botocore's EndpointConnectionError/ConnectTimeoutError/ReadTimeoutError, aiohttp's
    # ClientConnectorError/ServerDisconnectedError: matched by name so that this module does
    # not import the optional libraries of every protocol.
    return bool(
        names
        & {
            "EndpointConnectionError",
            "ConnectionClosedError",
            "ConnectTimeoutError",
            "ReadTimeoutError",
            "ClientConnectorError",
            "ClientOSError",
            "ServerDisconnectedError",
            "ServiceUnavailable",
        }
    )


class Store:
    """A dataset's root in an object store (or any fsspec file system), by URL.

    `name`s are paths relative to the root, with "/" separators ("manifest.json",
    "shards/shard-000001.tar"). Opening checks that the root's bucket exists and that the
    credentials are accepted, so a wrong URL fails at once, before any work is done.
    """

    def __init__(
        self,
        url: str,
        *,
        retry_s: float | None = None,
        check: bool = True,
        reading: bool = False,
    ):
        self.url = normalize_url(url)
        self.retry_s = retry_seconds(reading) if retry_s is None else float(retry_s)
        try:
            self.fs, self.root = _filesystem(self.url, reading)
        except (ImportError, ValueError) as err:  # unknown protocol, or its library missing
            raise StoreError(f"{self.url}: cannot open this URL ({err})") from None
        self.root = self.root.rstrip("/")
        if check:
            self._call("open", self._check_root)

    # ---------------------------------------------------------------- names

    def path(self, name: str = "") -> str:
        """The file system path of `name` (what fsspec calls take)."""
        return f"{self.root}/{name}" if name else self.root

    def url_of(self, name: str) -> str:
        """The full URL of `name` (what a user reads in a message, what the loader opens)."""
        return f"{self.url}/{name}"

    # ---------------------------------------------------------------- reads

    def read_bytes(self, name: str) -> bytes | None:
        """The whole object, or None when there is none."""

        def read() -> bytes | None:
            try:
                return self.fs.cat_file(self.path(name))
            except FileNotFoundError:
                return None

        return self._call(f"read {name}", read)

    def size(self, name: str) -> int | None:
        """The object's size in bytes, or None when there is none."""

        def info() -> int | None:
            try:
                return int(self.fs.info(self.path(name))["size"])
            except FileNotFoundError:
                return None

        return self._call(f"stat {name}", info)

    def info(self, name: str) -> dict | None:
        """fsspec's details of the object (size, ETag where the store gives one), or None."""

        def details() -> dict | None:
            try:
                return dict(self.fs.info(self.path(name)))
            except FileNotFoundError:
                return None

        return self._call(f"stat {name}", details)

    def call(self, what: str, op: Callable[[], T]) -> T:
        """`op` (a read on a stream this store opened) with the store's retries and messages."""
        return self._call(what, op)

    def list(self, prefix: str = "", recursive: bool = True) -> list[str]:
        """Names of the objects under `prefix` (a folder name, no trailing "/"), sorted;
        `recursive=False`: only those directly in it."""

        def listing() -> list[str]:
            try:
                if recursive:
                    found = self.fs.find(self.path(prefix))
                else:
                    found = [
                        e["name"]
                        for e in self.fs.ls(self.path(prefix), detail=True)
                        if e["type"] == "file"
                    ]
            except FileNotFoundError:
                return []
            start = len(self.root) + 1
            return sorted(p[start:] for p in found)

        return self._call(f"list {prefix or '/'}", listing)

    @contextmanager
    def open_read(self, name: str) -> Iterator[IO[bytes]]:
        """A stream of the object (read in blocks as it is consumed, not downloaded first)."""
        handle = self._call(f"open {name}", lambda: self.fs.open(self.path(name), "rb"))
        try:
            yield handle
        finally:
            handle.close()

    def get_file(self, name: str, local: str | os.PathLike) -> None:
        """Download `name` to the local path `local` (through a temporary name, then renamed)."""
        local = Path(local)
        tmp = local.with_name(f".{local.name}.part")
        self._call(f"download {name}", lambda: self.fs.get_file(self.path(name), str(tmp)))
        os.replace(tmp, local)

    # ---------------------------------------------------------------- writes

    def write_bytes(self, name: str, data: bytes) -> None:
        """Put `data` as the object `name`, whole (atomic on an object store)."""
        self._call(f"write {name}", lambda: self.fs.pipe_file(self.path(name), data))

    def put_file(self, local: str | os.PathLike, name: str) -> None:
        """Upload the local file `local` as the object `name`."""
        self._call(f"upload {name}", lambda: self.fs.put_file(os.fspath(local), self.path(name)))

    def delete(self, name: str) -> None:
        """Remove `name`; no error when it is already gone."""

        def remove() -> None:
            try:
                self.fs.rm_file(self.path(name))
            except FileNotFoundError:
                pass

        self._call(f"delete {name}", remove)

    # ---------------------------------------------------------------- faults

    def _check_root(self) -> None:
        bucket = self.root.split("/", 1)[0]
        try:
            self.fs.ls(bucket, detail=False)
        except FileNotFoundError:
            raise StoreError(
                f"{self.url}: bucket {bucket!r} does not exist; create it first, "
                "or give the URL of an existing bucket"
            ) from None

    def _call(self, what: str, op: Callable[[], T]) -> T:
        """Run `op`; retry connection failures until `retry_s` has passed; name the URL in
        every error that reaches the user."""
        deadline, backoff = time.monotonic() + self.retry_s, _FIRST_BACKOFF_S
        while True:
            try:
                return op()
            except StoreError:
                raise
            except PermissionError as err:
                raise StoreError(
                    f"{self.url}: access denied ({what}: {_first_line(err)}); check the "
                    "credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or the profile)"
                ) from None
            except Exception as err:  # noqa: BLE001 - classified below, re-raised otherwise
                if not _is_unreachable(err):
                    if isinstance(err, OSError):
                        raise StoreError(f"{self.url}: {what}: {_first_line(err)}") from None
                    raise
                remaining = deadline - time.monotonic()
                if remaining <= 0:  # tried until `retry_s` had passed, as the message says
                    raise StoreUnavailable(
                        f"{self.url}: unreachable for {self.retry_s:g} s ({what}: "
                        f"{_first_line(err)}); what was committed is kept: run the same command "
                        f"again once it is back ({STORE_RETRY_ENV} sets the retry time)"
                    ) from None
                time.sleep(min(backoff, remaining))  # the last try at the deadline
                backoff = min(backoff * 2, _MAX_BACKOFF_S)


def _first_line(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    return text.splitlines()[0]
