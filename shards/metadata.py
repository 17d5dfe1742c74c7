"""Dataset-level metadata files: ``dataset_info.json`` and ``episodes.jsonl``.

dataset_info.json describes the whole dataset (schema version, fps, cameras
and sizes, state/action layout, versions, the spec); episodes.jsonl has one
line an episode, so a loader can find an episode's shard without opening tars.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from demofactory.shards.format import (
    DATASET_INFO_FILENAME,
    DEPTH_MAX_UNITS,
    DEPTH_SCALE_M,
    EPISODES_FILENAME,
    SCHEMA_VERSION,
    DatasetError,
    Episode,
    depth_member,
    dumps_json,
    read_json_file,
    segmentation_bits,
    segmentation_member,
    shard_name,
    write_text_atomic,
)

_LABELS = {
    "geom": "MuJoCo geom id + 1 of the geom seen; 0 = nothing",
    "body": "MuJoCo body id + 1 of the body whose geom is seen (1 = the world body); 0 = nothing",
    "object": "index 1..n of the spec object seen (its body or a descendant), in `objects` order; "
    "0 = other",
}


def camera_entry(
    name: str,
    width: int,
    height: int,
    depth: bool = False,
    segmentation: str = "none",
    objects: Sequence[str] = (),
) -> dict[str, Any]:
    """A camera's entry in dataset_info.json ``cameras``: its size, and how depth and
    segmentation are stored when it has them (absent keys: it has none).

    `objects`: the spec's object names in order; label k of ``object`` segmentation is objects[k-1].
    """
    entry: dict[str, Any] = {"name": name, "width": width, "height": height, "format": "jpg"}
    if depth:
        entry["depth"] = {
            "member": depth_member("<camera>"),
            "format": "png",
            "dtype": "uint16",
            "unit": "mm",
            "scale_m": DEPTH_SCALE_M,
            "no_reading": 0,
            "saturated": DEPTH_MAX_UNITS,
        }
    if segmentation != "none":
        bits = segmentation_bits(segmentation)
        entry["segmentation"] = {
            "member": segmentation_member("<camera>"),
            "format": "png",
            "dtype": f"uint{bits}",
            "mode": segmentation,
            "labels": _LABELS[segmentation],
        }
        if segmentation == "object":
            entry["segmentation"]["objects"] = list(objects)
    return entry


def save_dataset_info(dataset_dir: Path, info: Mapping[str, Any]) -> None:
    """Write ``DIR/dataset_info.json`` atomically, with ``schema_version`` set.

    `info` must be JSON-serialisable; a ``schema_version`` in it other than
    `SCHEMA_VERSION` raises ValueError.
    """
    version = info.get("schema_version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        raise ValueError(
            f"dataset info has schema_version {version!r}, this code writes {SCHEMA_VERSION}"
        )
    document = {**info, "schema_version": SCHEMA_VERSION}
    write_text_atomic(
        Path(dataset_dir) / DATASET_INFO_FILENAME, dumps_json(document, indent=2) + "\n"
    )


def load_dataset_info(dataset_dir: Path) -> dict[str, Any] | None:
    """Read ``DIR/dataset_info.json``; None if absent.

    Malformed JSON, a non-object, or a schema version other than
    `SCHEMA_VERSION` raise `DatasetError` naming the file.
    """
    path = Path(dataset_dir) / DATASET_INFO_FILENAME
    if not path.exists():
        return None
    document = read_json_file(path)
    if not isinstance(document, dict):
        raise DatasetError(f"{path}: expected a JSON object, got {type(document).__name__}")
    if document.get("schema_version") != SCHEMA_VERSION:
        raise DatasetError(
            f"{path}: schema_version is {document.get('schema_version')!r}, "
            f"this code reads {SCHEMA_VERSION}"
        )
    return document


@dataclass(frozen=True)
class EpisodeRecord:
    """One line of episodes.jsonl.

    index:       global episode index
    shard:       file name of the shard holding it (``shard-000003.tar``)
    length:      number of time steps T
    instruction: the language instruction
    seed:        the seed it was generated from
    provenance:  JSON object: source demos, placements, ...
    """

    index: int
    shard: str
    length: int
    instruction: str
    seed: int
    provenance: dict[str, Any]

    @classmethod
    def from_episode(cls, episode: Episode) -> EpisodeRecord:
        """The record of an episode as `write_shard` stores it."""
        return cls(
            index=episode.index,
            shard=shard_name(episode.shard),
            length=episode.length,
            instruction=episode.instruction,
            seed=episode.seed,
            provenance=dict(episode.provenance),
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of the six fields."""
        return asdict(self)

    @classmethod
    def from_json(cls, entry: Any) -> EpisodeRecord:
        """Parse one line's object; missing or unknown fields raise `DatasetError`."""
        expected = {f.name for f in fields(cls)}
        if not isinstance(entry, dict) or set(entry) != expected:
            got = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
            raise DatasetError(f"episode record has {got}, expected fields {sorted(expected)}")
        return cls(**entry)


def save_episodes(dataset_dir: Path, records: Iterable[EpisodeRecord]) -> None:
    """Write ``DIR/episodes.jsonl`` atomically: one JSON object a line, sorted by index.

    Two records with the same index raise ValueError.
    """
    ordered = sorted(records, key=lambda record: record.index)
    for previous, record in zip(ordered, ordered[1:], strict=False):
        if previous.index == record.index:
            raise ValueError(f"save_episodes: episode index {record.index} appears twice")
    text = "".join(dumps_json(record.to_json()) + "\n" for record in ordered)
    write_text_atomic(Path(dataset_dir) / EPISODES_FILENAME, text)


def load_episodes(dataset_dir: Path) -> list[EpisodeRecord]:
    """Read ``DIR/episodes.jsonl``, in file order; a missing file is no episodes.

    A malformed line raises `DatasetError` naming the file and line number.
    """
    path = Path(dataset_dir) / EPISODES_FILENAME
    if not path.exists():
        return []
    records = []
    with open(path, encoding="utf-8") as f:
        for line_number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                records.append(EpisodeRecord.from_json(json.loads(line)))
            except (json.JSONDecodeError, DatasetError) as exc:
                raise DatasetError(f"{path}:{line_number}: {exc}") from exc
    return records
