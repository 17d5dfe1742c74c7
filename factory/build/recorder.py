"""The driver's bookkeeping of `factory run`: per shard a journal line, at the end the files.

    a shard finished ──► DIR/journal.jsonl += its manifest and generation.json entries
        (the commit: one write; fsynced at once unless fsyncs take over ~5 % of the time)
        ──► its statistics merged from its sidecar (demofactory.shards.running_stats)
    shards dropped ("generate until N", --truncate) ──► journal += drop ──► their files removed
    finish ──► generation.json and episodes.jsonl streamed in shard order (entries read back from
        the journal, or from the previous generation.json) ──► manifest.json ──► journal removed
        ──► stats.json (the running merge)

The work per shard is one appended line, one small sidecar read and one merge whatever the
dataset's size, and the memory per shard a `ShardResult` without its episodes: these stay on disk
until finish streams them (benchmarks/bench_driver_scale.py measures both up to 100,000 shards).
A resumed run reads the previous generation.json whole, as `finished_results` does.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path

from demofactory.build.output_dir import GENERATION_FILENAME, load_generation, shard_prefix
from demofactory.build.records import ShardResult, ShardTask
from demofactory.errors import DatasetWriteError
from demofactory.shards import (
    DatasetError,
    EpisodeRecord,
    Manifest,
    save_manifest,
    save_stats,
    shards_dir,
)
from demofactory.shards.format import (
    EPISODES_FILENAME,
    MANIFEST_FILENAME,
    STATS_FILENAME,
    atomic_output,
    dumps_json,
    write_text_atomic,
)
from demofactory.shards.journal import (
    JOURNAL_FILENAME,
    JournalWriter,
    journal_path,
    read_journal,
    read_record_at,
    remove_journal,
)
from demofactory.shards.running_stats import RunningStats
from demofactory.shards.stats import sidecar_path

_SHARD_INDEX = re.compile(r"shard-(\d+)\.tar")


class _WriteFailed(Exception):
    """An OSError while writing file `name` (not an OSError itself: it names its own file)."""

    def __init__(self, name: str, err: OSError):
        super().__init__(name)
        self.name, self.err = name, err


def _slim(result: ShardResult) -> ShardResult:
    # the episodes are in the journal (or generation.json) until finish streams them
    return dataclasses.replace(result, episodes=()) if result.episodes else result


def _generation_entry(result: ShardResult) -> dict:
    """`result.to_json()`, its episodes' provenance shared rather than deep-copied (asdict's copy
    was 0.65 ms an episode, most of the driver's time per shard)."""
    entry = _slim(result).to_json()
    names = [f.name for f in dataclasses.fields(EpisodeRecord)]
    entry["episodes"] = [{n: getattr(e, n) for n in names} for e in result.episodes]
    return entry


def _shard_order(name: str) -> tuple[float, str]:
    match = _SHARD_INDEX.fullmatch(name)  # by index: names past shard-999999 get longer
    return (int(match.group(1)) if match else math.inf, name)


class DatasetRecorder:
    """Driver-side bookkeeping: a finished shard is committed by its line in the journal.

    A line is written whole at once (a driver killed outright loses no shard that `record`
    returned for); fsync, which matters only for a power loss, follows at once unless fsyncs
    take longer than `SYNC_COST_SHARE` of the time, then it waits (`maybe_commit`, `commit`).
    """

    SYNC_COST_SHARE = 0.05  # at most this share of wall time spent in fsync of the journal

    def __init__(self, out_dir: Path, results: dict[str, ShardResult], clock=time.monotonic):
        self.out_dir, self._clock = out_dir, clock
        self.results = {name: _slim(r) for name, r in results.items()}
        generation = load_generation(out_dir, with_journal=False)
        self._extra = {k: v for k, v in generation.items() if k != "shards"}
        self._journal: JournalWriter | None = None
        self._stats = RunningStats(out_dir)
        self._pending, self._last_sync, self._sync_s = 0, float("-inf"), 0.0

    @property
    def manifest(self) -> Manifest:
        return Manifest(tuple(r.info for r in self.results.values()))

    def record(self, result: ShardResult) -> None:
        """Commit a finished shard (its journal line), then merge its statistics."""
        self._append(lambda journal: journal.add(result.info, _generation_entry(result)))
        self.results[result.task.name] = _slim(result)
        if result.info.samples > 0:
            try:
                self._stats.add(result.info.name, result.info.sha256)
            except (DatasetError, OSError):  # left out: `finish` merges it again, and says why
                pass
        self.maybe_commit()

    def maybe_commit(self) -> None:
        """fsync what is pending unless the last fsync was too recent (see the class doc)."""
        if self._pending and self._clock() - self._last_sync >= self._sync_s / self.SYNC_COST_SHARE:
            self.commit()

    def commit(self) -> None:
        """fsync the journal: the shards recorded so far survive a power loss too."""
        if not self._pending:
            return
        start = self._clock()
        self._guard(JOURNAL_FILENAME, self._journal.sync)
        self._pending, self._last_sync = 0, self._clock()
        self._sync_s = self._last_sync - start

    def _append(self, write: Callable[[JournalWriter], None]) -> None:
        if self._journal is None:
            # readers look for both files: from the first commit on they exist (the journal's
            # records are applied to them on reading)
            if not (self.out_dir / GENERATION_FILENAME).exists():
                data = dumps_json({**self._extra, "shards": {}}, indent=2)
                path = self.out_dir / GENERATION_FILENAME
                self._guard(GENERATION_FILENAME, lambda: write_text_atomic(path, data))
            if not (self.out_dir / MANIFEST_FILENAME).exists():
                self._guard(MANIFEST_FILENAME, lambda: save_manifest(self.out_dir, Manifest()))
            self._journal = self._guard(JOURNAL_FILENAME, lambda: JournalWriter(self.out_dir))
        self._guard(JOURNAL_FILENAME, lambda: write(self._journal))
        self._pending += 1

    def _guard(self, name: str, write):
        try:
            return write()
        except _WriteFailed as failed:
            name, err = failed.name, failed.err
        except OSError as error:
            err = error
        text = f"[Errno {err.errno}] {err.strerror}" if err.errno else str(err)
        raise DatasetWriteError(
            f"{self.out_dir / name}: cannot write: {text}; "
            "shards listed in manifest.json are kept: "
            "fix this and run the same command again to resume"
        ) from None

    def prefix_for(self, target: int | None, tasks: list[ShardTask]) -> list[ShardTask] | None:
        """`shard_prefix` of the shards recorded so far."""
        return shard_prefix(self.results, target, tasks)

    def keep_only(self, kept: Sequence[ShardTask], held: set[str] = frozenset()) -> None:
        """Drop shards finished by this run past a "generate until N" prefix, from the records and
        the disk; shards in `held` (there before the run) stay."""
        names = {t.name for t in kept} | held
        self.discard([n for n in self.results if n not in names])

    def discard(self, names: Sequence[str]) -> None:
        """Unlist shards (a journal line, fsynced), then remove their files."""
        if not names:
            return
        for name in names:
            self.results.pop(name, None)
        self._append(lambda journal: journal.drop(sorted(names)))
        self.commit()  # unlisted for good before the files go
        for name in names:
            (shards_dir(self.out_dir) / name).unlink(missing_ok=True)
            sidecar_path(shards_dir(self.out_dir) / name).unlink(missing_ok=True)

    def set_extra(self, key: str, value) -> None:
        """A top-level generation.json entry beside "shards" (generation.rebalance's record),
        written by `finish`."""
        self._extra[key] = value

    def finish(self, wall_s: float) -> None:
        """Write generation.json and episodes.jsonl, then manifest.json (the journal then goes),
        then stats.json, for every shard recorded."""
        self.commit()
        if self._journal is not None:
            self._journal.close()
            self._journal = None
        self._extra["wall_s"] = round(self._extra.get("wall_s", 0.0) + wall_s, 3)
        totals = self._guard(GENERATION_FILENAME, self._write_generation_and_episodes)
        self._guard(MANIFEST_FILENAME, lambda: save_manifest(self.out_dir, self.manifest))
        self._guard(JOURNAL_FILENAME, lambda: remove_journal(self.out_dir))
        listed = {name: r.info.sha256 for name, r in self.results.items() if r.info.samples > 0}
        if (
            listed
        ):  # the workers' per-shard statistics, merged as they came (demofactory.shards.stats)
            stats = self._stats.result(listed)
            totals = {**totals, **mixed_stats(self.out_dir, listed)}
            totals.update(arm_stats(self.out_dir, stats))  # a two-arm dataset's per-arm parts
            self._guard(STATS_FILENAME, lambda: save_stats(self.out_dir, stats, totals))

    def _write_generation_and_episodes(self) -> dict[str, int]:
        """Both files in one pass over the shards in index order (episode indices follow attempt
        ids, so shard order is episode order); renamed generation.json first."""
        paths = (self.out_dir / GENERATION_FILENAME, self.out_dir / EPISODES_FILENAME)
        try:
            with atomic_output(paths[1]) as episodes_file:
                try:
                    with atomic_output(paths[0]) as generation_file:
                        return self._stream(
                            _writer(generation_file, GENERATION_FILENAME),
                            _writer(episodes_file, EPISODES_FILENAME),
                        )
                except OSError as err:
                    raise _WriteFailed(GENERATION_FILENAME, err) from None
        except OSError as err:
            raise _WriteFailed(EPISODES_FILENAME, err) from None

    def _stream(self, put_generation, put_episode) -> dict[str, int]:
        snapshot = load_generation(self.out_dir, with_journal=False)["shards"]
        last = {r.info.name: r.offset for r in read_journal(self.out_dir) if r.op == "add"}
        keys = sorted([*self._extra, "shards"])
        totals = {"episodes": 0, "transitions": 0}
        previous = -1
        put_generation("{\n")
        with open(journal_path(self.out_dir), "rb") if last else nullcontext() as journal:
            for i, key in enumerate(keys):
                end = ",\n" if i + 1 < len(keys) else "\n"
                if key != "shards":
                    put_generation(f"  {json.dumps(key)}: {dumps_json(self._extra[key])}{end}")
                    continue
                put_generation('  "shards": {')
                for j, name in enumerate(sorted(self.results, key=_shard_order)):
                    if name in last:
                        where = f"{journal_path(self.out_dir)}: {name}"
                        entry = read_record_at(journal, last[name], where).generation
                    else:  # a result handed to the recorder that never reached disk: as it is
                        entry = snapshot.get(name) or self.results[name].to_json()
                    lead = "\n" if j == 0 else ",\n"
                    put_generation(f"{lead}    {json.dumps(name)}: {dumps_json(entry)}")
                    for episode in sorted(entry.get("episodes", []), key=lambda e: e["index"]):
                        record = EpisodeRecord.from_json(episode)  # checked, written as read
                        if record.index <= previous:
                            raise ValueError(
                                f"episode {record.index} ({name}) follows episode {previous}"
                            )
                        previous = record.index
                        put_episode(dumps_json(episode) + "\n")
                        totals["episodes"] += 1
                        totals["transitions"] += record.length
                put_generation(("\n  }" if self.results else "}") + end)
        put_generation("}\n")
        return totals


def mixed_stats(out_dir: Path, listed: dict[str, str]) -> dict:
    """stats.json's `embodiments` entry of a mixed-robot dataset (dataset_info.json lists more
    than one embodiment), else nothing: one more sidecar read a shard, only for those."""
    from demofactory.shards.embodiment_stats import embodiment_stats, embodiments_json
    from demofactory.shards.metadata import load_dataset_info

    info = load_dataset_info(out_dir) or {}
    if len(info.get("embodiments") or {}) < 2:
        return {}
    return {"embodiments": embodiments_json(embodiment_stats(out_dir, listed))}


def arm_stats(out_dir: Path, stats) -> dict:
    """stats.json's `arms` entry of a two-arm dataset (dataset_info.json's embodiment names its
    arms), else nothing: per arm, the state and action statistics of its own dimensions (their
    layout parts are named <arm>_<part>, demofactory.simulation.bimanual.arm_layout)."""
    from demofactory.shards.metadata import load_dataset_info

    info = load_dataset_info(out_dir) or {}
    arms = next(iter((info.get("embodiments") or {}).values()), {}).get("arms")
    if not arms:
        return {}
    out: dict = {arm: {} for arm in arms}
    for key in ("state", "action"):
        if key not in stats:
            continue
        offset, whole = 0, stats[key].to_json()
        for name, size in info[key]["layout"]:
            arm = next(a for a in arms if name.startswith(f"{a}_"))
            entry = out[arm].setdefault(key, {"layout": [], "dims": [offset, offset]})
            entry["layout"].append([name, size])
            entry["dims"][1] = offset + size
            offset += size
        for arm in arms:
            lo, hi = out[arm][key]["dims"]
            out[arm][key].update(
                {k: v[lo:hi] if isinstance(v, list) else v for k, v in whole.items()}
            )
    return {"arms": out}


def _writer(f, name: str) -> Callable[[str], None]:
    """f.write of UTF-8 text; an OSError names file `name`."""

    def put(text: str) -> None:
        try:
            f.write(text.encode())
        except OSError as err:
            raise _WriteFailed(name, err) from None

    return put
