"""Check a dataset directory against its own records; every problem is one line naming the file.

    manifest.json -> per shard: exists, size, sha256
      -> read the tar (demofactory.shards.tario, strict): samples and episodes counted, every
      episode
         whole (steps 0..T-1), in order, in one shard, every sample with its members;
         depth and segmentation PNGs: size, bit depth
      -> the episodes found vs episodes.jsonl (index, shard, length, instruction, seed)
      -> stats.json vs `compute_stats` over the shards, with a tolerance

Reads every shard twice (checksum and content; `compute_stats` a third time
for the arrays) and decodes no image (PNG headers only). Needs no torch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
from demofactory.shards.format import (
    ACTION_KEY,
    EPISODES_FILENAME,
    MANIFEST_FILENAME,
    META_KEY,
    SHARDS_DIRNAME,
    SIM_STATE_KEY,
    STATE_KEY,
    STATS_FILENAME,
    DatasetError,
    depth_member,
    png_header,
    sample_key,
    segmentation_bits,
    segmentation_member,
    shards_dir,
)
from demofactory.shards.manifest import load_manifest
from demofactory.shards.metadata import load_dataset_info, load_episodes
from demofactory.shards.stats import KeyStats, compute_stats, load_stats
from demofactory.shards.tario import TarFormatError, read_samples
from demofactory.shards.writer import ShardInfo, sha256_file

STATS_RTOL = 1e-5
STATS_ATOL = 1e-6
MAX_PROBLEMS_PER_SHARD = 10  # a shard broken throughout would otherwise bury the rest

_ARRAY_MEMBERS = (f"{ACTION_KEY}.npy", f"{STATE_KEY}.npy", f"{SIM_STATE_KEY}.npy")
_META_MEMBER = f"{META_KEY}.json"
_PNG_GRAYSCALE = 0  # PNG colour type


@dataclass(frozen=True)
class _PngMember:
    """A depth or segmentation member every sample must hold: its size and bit depth."""

    suffix: str
    width: int
    height: int
    bits: int


@dataclass(frozen=True)
class FoundEpisode:
    """An episode as it is in a shard: index, shard file name, steps found, and its meta."""

    index: int
    shard: str
    length: int
    instruction: str
    seed: int


def verify_dataset(dataset_dir: Path) -> list[str]:
    """Problems of the dataset in `dataset_dir`, one line each; an empty list: it is consistent.

    Checks every shard in manifest.json (exists, size, sha256, sample and episode
    counts), that every episode is whole (steps 0..length-1), in order and inside
    one shard, that episodes.jsonl agrees (index, shard, length, instruction,
    seed), and that stats.json matches statistics recomputed from the shards.
    """
    dataset_dir = Path(dataset_dir)
    if not (dataset_dir / MANIFEST_FILENAME).is_file():
        return [f"{MANIFEST_FILENAME}: missing in {dataset_dir}"]
    try:
        manifest = load_manifest(dataset_dir)
    except DatasetError as exc:
        return [str(exc)]
    problems: list[str] = []
    listed = {info.name for info in manifest.shards}
    for stray in sorted(
        p.name for p in shards_dir(dataset_dir).glob("*.tar") if p.name not in listed
    ):
        problems.append(
            f"{_rel(stray)}: not listed in {MANIFEST_FILENAME}: no part of the dataset, "
            "yet a glob over "
            f"{SHARDS_DIRNAME}/*.tar would read it; remove it"
        )
    cameras = _members(dataset_dir, problems)
    found: dict[int, FoundEpisode] = {}
    with_samples, damaged = [], 0
    for info in manifest.shards:
        scan = _check_shard(dataset_dir, info, cameras, problems)
        damaged += scan is None or scan.changed
        if scan is None:
            continue
        for episode in scan.episodes:
            if episode.index in found and found[episode.index].shard != info.name:
                problems.append(
                    f"{_rel(episode.shard)}: episode {episode.index} is also in "
                    f"{found[episode.index].shard}; an episode lives in one shard"
                )
            found.setdefault(episode.index, episode)
        if scan.samples:
            with_samples.append(info.name)
    problems += _check_episode_records(dataset_dir, found)
    if damaged:
        # Statistics of damaged shards would only repeat the problems above, many times over.
        problems.append(
            f"{STATS_FILENAME}: not checked, {damaged} shard(s) missing, unreadable or changed"
        )
    else:
        problems += _check_stats(dataset_dir, with_samples, found)
    return problems


# ---------------------------------------------------------------- shards


def _check_shard(
    dataset_dir: Path, info: ShardInfo, cameras: _Expected | None, problems: list[str]
) -> _ShardScan | None:
    """Append the shard's problems; its scan, or None when it is missing or not a readable tar."""
    path = shards_dir(dataset_dir) / info.name
    where = _rel(info.name)
    if not path.is_file():
        problems.append(f"{where}: missing (listed in {MANIFEST_FILENAME})")
        return None
    size = path.stat().st_size
    scan = _ShardScan(info.name, cameras, changed=True)
    if size != info.bytes:
        problems.append(f"{where}: {size} bytes, {MANIFEST_FILENAME} says {info.bytes}")
    elif (digest := sha256_file(path)) != info.sha256:
        problems.append(
            f"{where}: sha256 {digest[:16]}... does not match {MANIFEST_FILENAME} "
            f"({info.sha256[:16]}...): the file changed after it was written"
        )
    else:
        scan.changed = False
    try:
        for sample in read_samples(path):  # the strict reader: a corrupt header is an error
            scan.add(sample.key, sample.members)
        scan.finish()
    except TarFormatError as exc:
        problems.append(f"{where}: {exc.reason}")
        return None
    except DatasetError as exc:  # a member twice in one sample; the message names the path
        problems.append(f"{where}: {str(exc).removeprefix(f'{path}: ')}")
        return None
    except OSError as exc:
        problems.append(f"{where}: cannot be read ({exc})")
        return None
    problems += scan.report()
    for what, recorded, actual in (
        ("samples", info.samples, scan.samples),
        ("episodes", info.episodes, len(scan.episodes)),
    ):
        if recorded != actual:
            problems.append(f"{where}: holds {actual} {what}, {MANIFEST_FILENAME} says {recorded}")
    return scan


@dataclass
class _ShardScan:
    """Walks one shard's samples in order, tracking the open episode."""

    name: str
    cameras: _Expected | None
    changed: bool = False  # size or sha256 differ from the manifest
    samples: int = 0
    episodes: list[FoundEpisode] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    _open: dict[str, Any] | None = None  # meta of the first step of the episode being read
    _last: int = -1  # its last step seen
    _count: int = 0  # its steps seen
    _keys: set[str] = field(default_factory=set)

    def add(self, key: str, members: Mapping[str, bytes]) -> None:
        self.samples += 1
        if key in self._keys:
            self._problem(f"sample {key} appears twice")
        self._keys.add(key)
        missing = [m for m in self._expected_members() if m not in members]
        if missing:
            self._problem(f"sample {key} lacks {missing}")
        for png in self.cameras.pngs if self.cameras else ():
            if png.suffix in members:
                self._check_png(key, png, members[png.suffix])
        if _META_MEMBER not in members:
            return
        meta = self._meta(key, members[_META_MEMBER])
        if meta is not None:
            self._step(key, meta)

    def finish(self) -> None:
        if self._open is not None:
            self._problem(
                f"episode {self._open['episode']} stops at step {self._last} of "
                f"{self._open['length']} at the end of the shard: not whole"
            )
            self._close()

    def report(self) -> list[str]:
        shown = self.problems[:MAX_PROBLEMS_PER_SHARD]
        if len(self.problems) > len(shown):
            shown.append(
                f"{_rel(self.name)}: ... and {len(self.problems) - len(shown)} more problems"
            )
        return shown

    def _expected_members(self) -> list[str]:
        if self.cameras is None:
            return [*_ARRAY_MEMBERS, _META_MEMBER]
        pngs = [png.suffix for png in self.cameras.pngs]
        return [*self.cameras.jpegs, *pngs, *_ARRAY_MEMBERS, _META_MEMBER]

    def _check_png(self, key: str, png: _PngMember, data: bytes) -> None:
        try:
            width, height, bits, colour = png_header(data)
        except ValueError:
            self._problem(f"{key}.{png.suffix}: not a PNG file")
            return
        expected = (png.width, png.height, png.bits, _PNG_GRAYSCALE)
        if (width, height, bits, colour) != expected:
            self._problem(
                f"{key}.{png.suffix}: {width}x{height}, {bits}-bit, colour type {colour}; "
                f"expected {png.width}x{png.height} {png.bits}-bit grayscale (dataset_info.json)"
            )

    def _meta(self, key: str, data: bytes) -> dict[str, Any] | None:
        try:
            meta = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            self._problem(f"{key}.meta.json: malformed JSON ({exc})")
            return None
        needed = ("episode", "step", "length", "instruction", "seed", "is_first", "is_last")
        if not isinstance(meta, dict) or any(k not in meta for k in needed):
            self._problem(f"{key}.meta.json: expected an object with {list(needed)}")
            return None
        if not all(_is_int(meta[k]) and meta[k] >= 0 for k in ("episode", "step", "length")):
            self._problem(f"{key}.meta.json: episode, step and length must be ints >= 0")
            return None
        if key != sample_key(meta["episode"], meta["step"]):
            self._problem(f"sample {key} has meta episode {meta['episode']} step {meta['step']}")
        return meta

    def _step(self, key: str, meta: dict[str, Any]) -> None:
        if self._open is not None and meta["episode"] != self._open["episode"]:
            self._problem(
                f"episode {self._open['episode']} stops at step {self._last} of "
                f"{self._open['length']}, sample {key} follows: not whole"
            )
            self._close()
        if self._open is None:
            self._start(key, meta)
        elif meta["step"] != self._last + 1:
            self._problem(
                f"sample {key}: episode {meta['episode']} goes from step {self._last} "
                f"to step {meta['step']}: not whole, or out of order"
            )
        self._last, self._count = meta["step"], self._count + 1
        if (meta["step"] == 0) != meta["is_first"] or (meta["step"] == meta["length"] - 1) != meta[
            "is_last"
        ]:
            self._problem(
                f"{key}.meta.json: is_first/is_last disagree with step {meta['step']} "
                f"of length {meta['length']}"
            )
        if meta["step"] >= self._open["length"] - 1:
            self._close()

    def _start(self, key: str, meta: dict[str, Any]) -> None:
        if meta["step"] != 0:
            self._problem(
                f"sample {key}: episode {meta['episode']} starts at step {meta['step']}, not 0"
            )
        if self.episodes and meta["episode"] <= self.episodes[-1].index:
            self._problem(
                f"sample {key}: episode {meta['episode']} after episode "
                f"{self.episodes[-1].index}; episodes must be whole and in increasing order"
            )
        self._open, self._last, self._count = meta, -1, 0

    def _close(self) -> None:
        # length: the steps actually found, which episodes.jsonl is then checked against
        meta = self._open
        self.episodes.append(
            FoundEpisode(meta["episode"], self.name, self._count, meta["instruction"], meta["seed"])
        )
        self._open = None

    def _problem(self, text: str) -> None:
        self.problems.append(f"{_rel(self.name)}: {text}")


# ---------------------------------------------------------------- episodes.jsonl and stats.json


def _check_episode_records(dataset_dir: Path, found: Mapping[int, FoundEpisode]) -> list[str]:
    if not (dataset_dir / EPISODES_FILENAME).is_file():
        return [f"{EPISODES_FILENAME}: missing"]
    try:
        records = load_episodes(dataset_dir)
    except DatasetError as exc:
        return [str(exc)]
    problems, seen = [], set()
    for record in records:
        if record.index in seen:
            problems.append(f"{EPISODES_FILENAME}: episode {record.index} listed twice")
        seen.add(record.index)
        episode = found.get(record.index)
        if episode is None:
            problems.append(
                f"{EPISODES_FILENAME}: episode {record.index} ({record.shard}) is not in "
                f"the shards of {MANIFEST_FILENAME} as read"
            )
            continue
        for name in ("shard", "length", "instruction", "seed"):
            recorded, actual = getattr(record, name), getattr(episode, name)
            if recorded != actual:
                problems.append(
                    f"{EPISODES_FILENAME}: episode {record.index} has {name} {recorded!r}, "
                    f"{_rel(episode.shard)} holds {actual!r}"
                )
    for index in sorted(set(found) - seen):
        problems.append(
            f"{_rel(found[index].shard)}: episode {index} is missing from {EPISODES_FILENAME}"
        )
    return problems


def _check_stats(
    dataset_dir: Path, shard_names: Sequence[str], found: Mapping[int, FoundEpisode]
) -> list[str]:
    try:
        recorded = load_stats(dataset_dir)
    except DatasetError as exc:
        return [str(exc)]
    if recorded is None:
        return [f"{STATS_FILENAME}: missing"] if shard_names else []
    if not shard_names:
        return [f"{STATS_FILENAME}: present but no shard holds a sample"]
    try:
        computed = compute_stats(dataset_dir, shard_names)
    except (DatasetError, ValueError, OSError) as exc:  # ValueError: np.load of a bad .npy
        return [f"{STATS_FILENAME}: cannot recompute from the shards: {exc}"]
    problems = []
    for key, fresh in computed.items():
        if key not in recorded.keys:
            problems.append(f"{STATS_FILENAME}: no statistics for {key!r}")
        else:
            problems += _compare_key_stats(key, recorded.keys[key], fresh)
    totals = {"episodes": len(found), "transitions": sum(ep.length for ep in found.values())}
    for name, actual in totals.items():
        if name in recorded.extra and recorded.extra[name] != actual:
            problems.append(
                f"{STATS_FILENAME}: {name} is {recorded.extra[name]!r}, the shards hold {actual}"
            )
    return problems


def _compare_key_stats(key: str, recorded: KeyStats, fresh: KeyStats) -> list[str]:
    problems = []
    if recorded.count != fresh.count:
        problems.append(
            f"{STATS_FILENAME}: {key}.count is {recorded.count!r}, the shards hold {fresh.count}"
        )
    for f in fields(KeyStats):
        if f.name == "count":
            continue
        expected = np.asarray(getattr(fresh, f.name), dtype=np.float64)
        try:
            got = np.asarray(getattr(recorded, f.name), dtype=np.float64)
        except (TypeError, ValueError):
            problems.append(f"{STATS_FILENAME}: {key}.{f.name} is not a list of numbers")
            continue
        if got.shape != expected.shape:
            problems.append(
                f"{STATS_FILENAME}: {key}.{f.name} has shape {got.shape}, the data {expected.shape}"
            )
        elif not np.allclose(got, expected, rtol=STATS_RTOL, atol=STATS_ATOL):
            worst = float(np.max(np.abs(got - expected)))
            problems.append(
                f"{STATS_FILENAME}: {key}.{f.name} differs from the data recomputed "
                f"(largest difference {worst:.3g})"
            )
    return problems


# ---------------------------------------------------------------- helpers


@dataclass(frozen=True)
class _Expected:
    """Camera members every sample must hold, from dataset_info.json."""

    jpegs: tuple[str, ...]
    pngs: tuple[_PngMember, ...]


def _members(dataset_dir: Path, problems: list[str]) -> _Expected | None:
    try:
        info = load_dataset_info(dataset_dir)
    except DatasetError as exc:
        problems.append(str(exc))
        return None
    if info is None:
        return None
    jpegs, pngs = [], []
    for i, camera in enumerate(info.get("cameras", [])):
        try:
            name, width, height = (
                camera["name"],
                int(camera.get("width", 0)),
                int(camera.get("height", 0)),
            )
            jpegs.append(f"{name}.jpg")
            if camera.get("depth"):
                pngs.append(_PngMember(depth_member(name), width, height, 16))
            if camera.get("segmentation"):
                bits = segmentation_bits(camera["segmentation"]["mode"])
                pngs.append(_PngMember(segmentation_member(name), width, height, bits))
        except (KeyError, TypeError, ValueError) as exc:
            problems.append(f"dataset_info.json: cameras[{i}] is malformed ({exc!r})")
    return _Expected(tuple(jpegs), tuple(pngs))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _rel(shard: str) -> str:
    return f"{SHARDS_DIRNAME}/{shard}"
