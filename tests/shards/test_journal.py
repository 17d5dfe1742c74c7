"""The commit journal (demofactory.shards.journal) and the driver's recorder on it
(demofactory.build.recorder): a
shard counts once its line is written, readers apply the journal, a torn last line is ignored,
and a run killed and resumed writes the bytes of a run that was not."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import demofactory.shards.journal as journal_module
import numpy as np
import pytest
from demofactory.build.output_dir import clear_dataset, load_generation, repair_records
from demofactory.build.recorder import DatasetRecorder
from demofactory.build.records import ShardResult, ShardTask
from demofactory.errors import DatasetWriteError
from demofactory.shards import (
    DatasetError,
    Episode,
    EpisodeRecord,
    compute_stats,
    load_manifest,
    save_stats,
    shards_dir,
    write_shard,
)
from demofactory.shards.journal import JOURNAL_FILENAME, JournalWriter, read_journal
from demofactory.shards.partial_stats import merge_all, partial_stats, to_bytes
from demofactory.shards.running_stats import merge_parts

FILES = ("manifest.json", "generation.json", "episodes.jsonl", "stats.json")


def _result(out: Path, index: int, episodes: int = 2) -> ShardResult:
    """A real shard of `episodes` short episodes (arrays only) and its result record."""
    rng = np.random.default_rng(index)
    made = [
        Episode(
            index=10 * index + k,
            shard=index,
            instruction="lift the cube",
            seed=100 * index + k,
            actions=rng.normal(size=(4 + k, 7)),
            states=rng.normal(size=(4 + k, 9)),
            sim_states=rng.normal(size=(4 + k, 5)),
            images={},
            provenance={"placement": rng.normal(size=3).tolist()},
        )
        for k in range(episodes)
    ]
    shards_dir(out).mkdir(parents=True, exist_ok=True)
    info = write_shard(made, shards_dir(out), index)
    return ShardResult(
        task=ShardTask(index, (2 * index, 2 * index + 1)),
        info=info,
        attempts=2,
        successes=episodes,
        failures={"horizon": 2 - episodes} if episodes < 2 else {},
        episodes=tuple(EpisodeRecord.from_episode(e) for e in made),
        wall_s=0.5,
    )


def _files(out: Path) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in FILES}


def test_a_shard_counts_once_its_line_is_written_and_a_torn_line_does_not(tmp_path):
    recorder = DatasetRecorder(tmp_path, {})
    first, second = _result(tmp_path, 0), _result(tmp_path, 1)
    recorder.record(first)
    recorder.record(second)  # no finish: as a driver killed now leaves it
    assert [s.name for s in load_manifest(tmp_path, with_journal=False).shards] == []
    assert load_manifest(tmp_path).shards == (first.info, second.info)
    assert load_generation(tmp_path)["shards"][second.info.name] == second.to_json()
    # a driver killed mid-write leaves a torn last line: not committed, and cut off by the next
    path = tmp_path / JOURNAL_FILENAME
    whole = path.read_bytes()
    with open(path, "ab") as f:
        f.write(whole.splitlines(keepends=True)[0][:-40])
    assert len(list(read_journal(tmp_path))) == 2
    JournalWriter(tmp_path).close()
    assert path.read_bytes() == whole
    # a damaged line before the last is a damaged file, set aside by the repair
    path.write_bytes(b"{oops\n" + whole)
    with pytest.raises(DatasetError, match=rf"{JOURNAL_FILENAME}:1: not a journal record"):
        load_manifest(tmp_path)
    warnings = []
    repair_records(tmp_path, warnings.append)
    assert len(warnings) == 1 and JOURNAL_FILENAME in warnings[0]
    assert load_manifest(tmp_path).shards == () and not path.exists()


def test_killed_then_resumed_gives_the_files_of_an_uninterrupted_run(tmp_path):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    results = {
        out: [_result(out, i, episodes=i % 3) for i in range(5)] for out in (straight, resumed)
    }
    recorder = DatasetRecorder(straight, {})
    for i in (3, 0, 4, 1, 2):  # shards finish in any order
        recorder.record(results[straight][i])
    recorder.finish(0.0)
    assert not (straight / JOURNAL_FILENAME).exists()  # folded into the snapshots

    killed = DatasetRecorder(resumed, {})
    for i in (1, 3):
        killed.record(results[resumed][i])
    killed.commit()
    # resumed: the committed shards are handed over, the rest recorded, then finished
    done = {r.task.name: r for r in results[resumed] if r.task.index in (1, 3)}
    assert set(load_manifest(resumed).by_name()) == set(done)
    recorder = DatasetRecorder(resumed, done)
    for i in (4, 0, 2):
        recorder.record(results[resumed][i])
    recorder.finish(0.0)
    assert _files(resumed) == _files(straight)
    # the statistics merged as shards came are those of every tar read again
    names = [r.info.name for r in results[straight] if r.info.samples]
    stats = compute_stats(straight, names)
    records = [e for r in results[straight] for e in r.episodes]
    save_stats(tmp_path, stats, {"episodes": 4, "transitions": sum(e.length for e in records)})
    assert (tmp_path / "stats.json").read_bytes() == (straight / "stats.json").read_bytes()
    generation = json.loads((straight / "generation.json").read_text())
    assert generation["shards"]["shard-000004.tar"] == results[straight][4].to_json()
    lines = (straight / "episodes.jsonl").read_text().splitlines()
    assert [json.loads(line)["index"] for line in lines] == [10, 20, 21, 40]
    # replaying the journal over snapshots that already hold it changes nothing (a driver
    # killed between writing them and removing it)
    journal = (resumed / "generation.json").read_bytes()
    (resumed / JOURNAL_FILENAME).write_bytes(b"")
    writer = JournalWriter(resumed)
    writer.add(results[resumed][4].info, results[resumed][4].to_json())
    writer.close()
    assert load_generation(resumed) == json.loads(journal)


def test_dropped_shards_are_unlisted_then_removed_and_stats_redone(tmp_path):
    recorder = DatasetRecorder(tmp_path, {})
    results = [_result(tmp_path, i) for i in range(3)]
    for result in results:
        recorder.record(result)
    recorder.keep_only([results[0].task, results[1].task])  # "generate until N": past the prefix
    assert set(load_manifest(tmp_path).by_name()) == {"shard-000000.tar", "shard-000001.tar"}
    assert not (shards_dir(tmp_path) / "shard-000002.tar").exists()
    recorder.finish(1.5)
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["episodes"] == 4
    assert (
        stats["action"]["count"]
        == compute_stats(tmp_path, ["shard-000000.tar", "shard-000001.tar"])["action"].count
    )
    assert json.loads((tmp_path / "generation.json").read_text())["wall_s"] == 1.5
    clear_dataset(tmp_path)
    DatasetRecorder(tmp_path, {}).record(_result(tmp_path, 5))
    clear_dataset(tmp_path)
    assert not (tmp_path / JOURNAL_FILENAME).exists() and load_manifest(tmp_path).shards == ()


def test_a_failed_journal_write_is_one_line_and_keeps_what_was_committed(tmp_path, monkeypatch):
    recorder = DatasetRecorder(tmp_path, {})
    first = _result(tmp_path, 0)
    recorder.record(first)

    def full_disk(fd, data):  # half the line goes out, then the disk is full
        journal_module.os.write(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(journal_module, "_write", full_disk)
    with pytest.raises(DatasetWriteError) as caught:
        recorder.record(_result(tmp_path, 1))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(
        f"{tmp_path / JOURNAL_FILENAME}: cannot write: [Errno 28] No space left on device"
    )
    assert load_manifest(tmp_path).shards == (first.info,)
    assert (tmp_path / JOURNAL_FILENAME).read_bytes().endswith(b"\n")  # the half line cut off
    monkeypatch.undo()  # the disk is fixed: the same recorder goes on
    recorder.record(_result(tmp_path, 1))
    assert len(load_manifest(tmp_path).shards) == 2


def test_a_batch_merge_gives_the_bytes_of_merging_one_part_at_a_time():
    rng = np.random.default_rng(7)
    parts = [  # widths from 2**-40 to 2**12: the merged width grows as parts come
        partial_stats(
            np.stack(
                [rng.normal(0, scale, 50), rng.uniform(-scale, 3 * scale, 50), np.full(50, 0.25)],
                axis=1,
            )
        )
        for scale in (1e-9, 0.5, 3.0, 1e-3, 2e3, 7.0)
    ]
    assert to_bytes({"x": merge_parts(parts)}) == to_bytes({"x": merge_all(parts)})
    assert to_bytes({"x": merge_parts(parts[::-1])}) == to_bytes({"x": merge_all(parts)})
