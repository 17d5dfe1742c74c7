"""The manifest: one entry a finished shard (name, samples, episodes, bytes, sha256).

A shard in the manifest whose file still matches its checksum is finished and
is never redone on resume. The manifest is ``DIR/manifest.json`` (a snapshot, written
atomically) with the records of ``DIR/journal.jsonl`` applied (`demofactory.shards.journal`): a
running
driver appends one line a finished shard, and rewrites manifest.json only at the end.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from demofactory.shards.format import (
    MANIFEST_FILENAME,
    SCHEMA_VERSION,
    DatasetError,
    dumps_json,
    read_json_file,
    shards_dir,
    write_text_atomic,
)
from demofactory.shards.journal import apply_journal, read_journal
from demofactory.shards.writer import ShardInfo, sha256_file


@dataclass(frozen=True)
class Manifest:
    """The finished shards of a dataset, sorted by name; names are unique."""

    shards: tuple[ShardInfo, ...] = ()

    def __post_init__(self) -> None:
        ordered = tuple(sorted(self.shards, key=lambda info: info.name))
        names = [info.name for info in ordered]
        duplicates = sorted(name for name, n in Counter(names).items() if n > 1)
        if duplicates:
            raise ValueError(f"Manifest lists shards more than once: {duplicates}")
        # Sorted on construction so that equal sets of shards compare equal.
        object.__setattr__(self, "shards", ordered)

    def by_name(self) -> Mapping[str, ShardInfo]:
        """Shard file name -> its entry."""
        return {info.name: info for info in self.shards}

    def with_shard(self, info: ShardInfo) -> Manifest:
        """A new manifest with `info` added, replacing any entry of the same name."""
        kept = tuple(other for other in self.shards if other.name != info.name)
        return Manifest(kept + (info,))

    @property
    def total_samples(self) -> int:
        """Time steps over all shards."""
        return sum(info.samples for info in self.shards)

    @property
    def total_episodes(self) -> int:
        """Episodes over all shards."""
        return sum(info.episodes for info in self.shards)

    @property
    def total_bytes(self) -> int:
        """Size of all shard files, in bytes."""
        return sum(info.bytes for info in self.shards)


def load_manifest(dataset_dir: Path, with_journal: bool = True) -> Manifest:
    """Read ``DIR/manifest.json`` and apply ``DIR/journal.jsonl`` (unless `with_journal` is
    False); a missing file is an empty manifest, a missing journal no change.

    Malformed JSON, a schema version other than `SCHEMA_VERSION`, or a bad entry
    raise `DatasetError` naming the file.
    """
    snapshot = _load_snapshot(Path(dataset_dir))
    if not with_journal:
        return snapshot
    listed = apply_journal(
        dict(snapshot.by_name()), read_journal(dataset_dir), lambda record: record.info
    )
    return Manifest(tuple(listed.values()))


def _load_snapshot(dataset_dir: Path) -> Manifest:
    path = dataset_dir / MANIFEST_FILENAME
    if not path.exists():
        return Manifest()
    document = read_json_file(path)
    if not isinstance(document, dict) or set(document) != {"schema_version", "shards"}:
        raise DatasetError(f"{path}: expected an object with keys 'schema_version' and 'shards'")
    if document["schema_version"] != SCHEMA_VERSION:
        raise DatasetError(
            f"{path}: schema_version is {document['schema_version']!r}, "
            f"this code reads {SCHEMA_VERSION}"
        )
    if not isinstance(document["shards"], list):
        raise DatasetError(f"{path}: 'shards' must be a list")
    entries = []
    for i, entry in enumerate(document["shards"]):
        try:
            entries.append(ShardInfo.from_json(entry))
        except DatasetError as exc:
            raise DatasetError(f"{path}: shards[{i}]: {exc}") from exc
    try:
        return Manifest(tuple(entries))
    except ValueError as exc:
        raise DatasetError(f"{path}: {exc}") from exc


def save_manifest(dataset_dir: Path, manifest: Manifest) -> None:
    """Write ``DIR/manifest.json`` atomically, entries sorted by name."""
    document = {
        "schema_version": SCHEMA_VERSION,
        "shards": [info.to_json() for info in manifest.shards],
    }
    write_text_atomic(Path(dataset_dir) / MANIFEST_FILENAME, dumps_json(document, indent=2) + "\n")


def verify_shard(dataset_dir: Path, info: ShardInfo) -> bool:
    """True when ``DIR/shards/<info.name>`` exists with the recorded size and sha256."""
    path = shards_dir(dataset_dir) / info.name
    if not path.is_file() or path.stat().st_size != info.bytes:
        return False
    return sha256_file(path) == info.sha256


def check_shard(dataset_dir: Path, info: ShardInfo) -> None:
    """Raise `DatasetError` naming the shard unless ``DIR/shards/<info.name>`` has the manifest's
    size and sha256.

    Every reader (exports, preview, train-eval) calls it before it uses a shard: a flipped
    byte inside a `.npy` member is a valid tar, and would reach training as a wrong action.
    """
    path = shards_dir(dataset_dir) / info.name
    if not path.is_file():
        raise DatasetError(
            f"{path}: missing, yet listed in {MANIFEST_FILENAME} (run factory verify)"
        )
    size = path.stat().st_size
    if size != info.bytes:
        raise DatasetError(
            f"{path}: {size} bytes, {MANIFEST_FILENAME} says {info.bytes}: "
            "the shard is damaged (run factory verify; factory run redoes it)"
        )
    if sha256_file(path) != info.sha256:
        raise DatasetError(
            f"{path}: sha256 does not match {MANIFEST_FILENAME}: the shard changed after it was "
            "written (run factory verify; factory run redoes it)"
        )


def check_shards(
    dataset_dir: Path, manifest: Manifest, names: Collection[str] | None = None
) -> None:
    """`check_shard` for each shard of `manifest` (only those in `names`, when given)."""
    for info in manifest.shards:
        if names is None or info.name in names:
            check_shard(dataset_dir, info)
