"""The driver's side of `factory run --out s3://bucket/prefix` (any fsspec URL).

    start   ──► Store(url): bucket and credentials checked (one line, exit 2, before any work)
            ──► its local copy locked (DIR/.lock, as a local run's), then pull_metadata: the
                dataset's small files into it
                (demofactory.shards.remote.local_copy_dir); the run then decides, resumes and
                records
                there exactly as for a local --out
    workers ──► write each shard to their own staging folder and put it in the store
                (demofactory.build.shard_output); the driver never holds shard bytes
    driver  ──► per finished shard: its statistics sidecar fetched from the store (one small
                GET), then recorded as usual
            ──► the local copy's changed small files put in the store (`sync`, at most every
                SYNC_EVERY_S while shards run, and at the end); manifest and journal last, so a
                reader of the store never sees a shard listed before it is there

Resume: a shard listed in the store's manifest counts as done when the store holds an object of
the listed size and sha256 (hashed as it streams, once per ETag:
demofactory.shards.remote.stored_shard_ok),
so a damaged object, even one of the right size, is redone. A driver
killed between two syncs loses the commits since the last one: those shards are redone, with the
same bytes (shards are deterministic). One driver per dataset: the lock is on the local copy,
so two drivers on two machines writing the same URL are not stopped (do not do that).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from demofactory.errors import UserError
from demofactory.shards import ShardInfo
from demofactory.shards.format import SHARDS_DIRNAME
from demofactory.shards.remote import (
    CACHE_ENV,
    Mirror,
    local_copy_dir,
    pull_metadata,
    stored_shard_ok,
)
from demofactory.shards.stats import sidecar_path
from demofactory.shards.store import STORE_RETRY_ENV, Store

# What a store client reads (the AWS SDKs' variables, which S3-compatible stores use too;
# fsspec's FSSPEC_* config; the retry time): passed to the workers when set here, so that they
# reach the store as the driver does. A node's own credentials (an instance role) need none.
STORE_ENV_NAMES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    STORE_RETRY_ENV,
    CACHE_ENV,  # where a worker stages its shards, when set here
)
SYNC_EVERY_S = 2.0  # while shards run: the store's manifest lags the local one by at most this


class StoredDataset:
    """A dataset being written to a store: its local copy, and what keeps the two in step."""

    def __init__(self, url: str):
        self.url = url.rstrip("/")
        self.store = Store(self.url)
        self.local = local_copy_dir(self.url)
        self._lock = None
        self._next_sync = 0.0

    def __enter__(self) -> StoredDataset:
        """Lock the local copy (one driver a dataset on this machine), then pull into it: the
        copy is this driver's alone from here on (readers never use it:
        demofactory.shards.snapshot)."""
        from demofactory.build.output_dir import lock_output_dir

        try:
            self.local.mkdir(parents=True, exist_ok=True)
            self._lock = lock_output_dir(self.local)
        except OSError as err:
            raise UserError(
                f"{self.url}: cannot create its local copy {self.local} ({err.strerror})"
            ) from None
        except UserError as err:  # another driver: named by the URL the user gave
            raise UserError(str(err).replace(str(self.local), self.url)) from None
        try:
            pull_metadata(self.store, self.local)
            self.mirror = Mirror(self.store, self.local)
            self.mirror.adopt()
        except BaseException:
            self._lock.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._lock.close()

    def shard_stored(self, info: ShardInfo) -> bool:
        """True when the store holds the shard with its listed size and sha256."""
        return stored_shard_ok(self.store, info)

    def fetch_sidecar(self, info: ShardInfo) -> None:
        """Bring a finished shard's statistics sidecar into the local copy (for the driver's
        running merge); a shard without samples has none."""
        if info.samples == 0:
            return
        name = sidecar_path(Path(info.name)).name
        target = self.local / SHARDS_DIRNAME / name
        target.parent.mkdir(parents=True, exist_ok=True)
        self.store.get_file(f"{SHARDS_DIRNAME}/{name}", target)

    def sync(self, now: bool = True) -> None:
        """Put the local copy's changed small files in the store (unless `now` is False and the
        last sync was under SYNC_EVERY_S ago)."""
        if not now and time.monotonic() < self._next_sync:
            return
        self.mirror.sync()
        self._next_sync = time.monotonic() + SYNC_EVERY_S

    def remove_shards(self, names) -> None:
        """Delete shards (and their sidecars, failures) from the store, once unlisted there."""
        for name in sorted(names):
            self.store.delete(f"{SHARDS_DIRNAME}/{name}")
            self.store.delete(f"{SHARDS_DIRNAME}/{sidecar_path(Path(name)).name}")

    @staticmethod
    def worker_env() -> dict[str, str]:
        """This process's store settings that are set (STORE_ENV_NAMES, FSSPEC_* config)."""
        return {
            k: v for k, v in os.environ.items() if k in STORE_ENV_NAMES or k.startswith("FSSPEC_")
        }
