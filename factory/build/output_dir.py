"""The output directory of `factory run`: what it holds, and what a run may do with it.

    DIR missing, empty, or what a run that stopped early leaves
        (.lock, empty shards/)                                          ──► a new dataset
    DIR holding this spec's dataset                                     ──► resume / extend
    DIR holding another spec's dataset, `factory seeds` output,
        anything else                                                   ──► refused
    resume that would drop finished shards
        (fewer attempts, a lower --successes)                           ──► refused
    (`factory seeds` output and dropped shards: replaced with --truncate)

`factory run` decides under DIR/.lock (factory/build/run.py); the same checks run once before
it, only to refuse early. A malformed manifest.json or generation.json is set aside and its
shards redone (they are deterministic: the same bytes come back).
"""

from __future__ import annotations

import fcntl
import os
import re
import socket
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from demofactory.errors import UserError
from demofactory.outputs import check_can_create
from demofactory.shards import DatasetError, load_dataset_info, load_manifest, shards_dir
from demofactory.shards.format import (
    DATASET_INFO_FILENAME,
    EPISODES_FILENAME,
    MANIFEST_FILENAME,
    STATS_FILENAME,
    read_json_file,
)
from demofactory.shards.journal import JOURNAL_FILENAME, apply_journal, journal_path, read_journal

if TYPE_CHECKING:  # this module stays light: `verify` and `inspect` use it without robosuite
    from demofactory.build.records import ShardResult, ShardTask
    from demofactory.specs.spec import SceneSpec

GENERATION_FILENAME = "generation.json"
LOCK_FILENAME = ".lock"  # held by the running driver (flock); never part of the dataset
# dataset_info.json "source" of `factory seeds` output (demofactory.build.seed_dataset.SOURCE_MARK)
SEEDS_SOURCE = "seed_demos"
_SHARD_NAME = re.compile(r"shard-(\d+)\.tar")


def require_dataset_info(dataset_dir: Path, advice: str = "") -> dict:
    """DIR/dataset_info.json; a one-line error (with `advice` after it) if missing or unreadable:
    `UserError` when there is none (no dataset), `DatasetError` when it is malformed."""
    tail = f"; {advice}" if advice else ""
    try:
        info = load_dataset_info(dataset_dir)
    except DatasetError as err:  # the same class, with the directory and the advice added
        raise DatasetError(f"{dataset_dir}: unreadable dataset_info.json ({err}){tail}") from None
    if info is None:
        raise UserError(f"{dataset_dir}: not a demofactory dataset (no dataset_info.json){tail}")
    return info


def _holds_nothing(out_dir: Path) -> bool:
    # What a run that stopped before writing anything leaves: the lock, an empty shards/ folder.
    for entry in out_dir.iterdir():
        if entry.name == LOCK_FILENAME:
            continue
        if (
            entry.name == "shards"
            and entry.is_dir()
            and not any(not p.name.startswith(".shard-") for p in entry.iterdir())
        ):
            continue
        return False
    return True


def _looks_like_ours(out_dir: Path) -> bool:
    return any(
        (out_dir / name).exists()
        for name in (MANIFEST_FILENAME, GENERATION_FILENAME, EPISODES_FILENAME, JOURNAL_FILENAME)
    )


def check_output_dir(out_dir: Path, spec: SceneSpec, truncate: bool = False) -> bool:
    """Refuse a directory holding anything but this spec's dataset; True when resuming.

    The human seed demos of `factory seeds` are another kind of dataset: replaced only
    with `truncate` (then True: there is something to clear first).
    """
    check_can_create(out_dir, "--out")
    if not out_dir.exists() or _holds_nothing(out_dir):
        return False
    if (out_dir / DATASET_INFO_FILENAME).exists() or not _looks_like_ours(out_dir):
        info = require_dataset_info(out_dir, advice="choose another --out")
    else:
        raise UserError(
            f"{out_dir}: a demofactory dataset without its {DATASET_INFO_FILENAME} (deleted?): "
            "restore that file to resume it, or remove the directory to start over"
        )
    if info.get("source") == SEEDS_SOURCE and not truncate:
        raise UserError(
            f"{out_dir}: holds the human seed demos written by `factory seeds`; "
            "`factory run` would replace them with generated episodes: "
            "pass --truncate to replace them, "
            "or choose another --out"
        )
    made_with, want = dataset_backend(info), spec.generation.backend
    if made_with != want:  # before the fingerprint: the backend is the difference to name
        raise UserError(
            f"{out_dir}: generation.backend: the dataset was made with backend {made_with} and "
            f"this run would resume it with {want} (their shards are not bit-identical); "
            f"set generation.backend: {made_with}, or choose another --out"
        )
    if info.get("spec_fingerprint") != spec.fingerprint():
        name = info.get("spec", {}).get("name", "?")
        raise UserError(
            f"{out_dir}: holds a different dataset (spec {name!r}, fingerprint "
            f"{str(info.get('spec_fingerprint'))[:12]}; this spec: {spec.fingerprint()[:12]}); "
            "choose another --out or remove it"
        )
    have, want = info.get("shard_layout", "step"), spec.output.shard_layout
    if have != want:  # `output` is not in the fingerprint: one dataset, one layout all the same
        raise UserError(
            f"{out_dir}: its shards are in the {have} layout and this run would add {want} "
            f"shards; pass --shard-layout {have} (or set output.shard_layout: {have}) to resume "
            "it, or choose another --out"
        )
    return True


def dataset_backend(info: dict) -> str:
    """The physics backend that made a dataset (dataset_info.json `backend.name`); datasets
    made before the field existed were all made on the CPU."""
    backend = info.get("backend")
    return str(backend.get("name", "cpu")) if isinstance(backend, dict) else "cpu"


def load_generation(out_dir: Path, with_journal: bool = True) -> dict:
    """DIR/generation.json (per shard: attempts, successes, episodes) with the records of
    DIR/journal.jsonl applied (unless `with_journal` is False; demofactory.shards.journal); empty
    when
    missing.

    Malformed content raises DatasetError naming the file.
    """
    path = out_dir / GENERATION_FILENAME
    if not path.exists():
        data = {"shards": {}}
    else:
        data = read_json_file(path)
        if not isinstance(data, dict) or not isinstance(data.get("shards"), dict):
            raise DatasetError(f"{path}: expected an object with a 'shards' object")
    if with_journal:
        apply_journal(data["shards"], read_journal(out_dir), lambda record: record.generation)
    return data


def task_named(tasks: Sequence[ShardTask], name: str) -> ShardTask | None:
    """The planned task writing shard file `name` (tasks[i] is shard i), None if not planned."""
    match = _SHARD_NAME.fullmatch(name)
    index = int(match.group(1)) if match else len(tasks)
    task = tasks[index] if index < len(tasks) else None
    return task if task is not None and task.name == name else None


def repair_records(out_dir: Path, warn: Callable[[str], None]) -> None:
    """Set aside a malformed manifest.json, generation.json or journal.jsonl (kept as
    NAME.corrupt-TIME), and say so.

    Without them the shards they listed are redone, with the same bytes (shards are
    deterministic), which is the repair; the user's copy is kept for a look.
    """
    for name, load in (
        (MANIFEST_FILENAME, lambda d: load_manifest(d, with_journal=False)),
        (GENERATION_FILENAME, lambda d: load_generation(d, with_journal=False)),
        (JOURNAL_FILENAME, lambda d: all(read_journal(d))),
    ):
        try:
            load(out_dir)
        except (DatasetError, UnicodeDecodeError) as err:
            path = out_dir / name
            aside = path.with_name(f"{name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}")
            os.replace(path, aside)
            warn(
                f"{path}: unreadable ({_first_line(err)}); moved to {aside.name}: "
                "the shards it listed are redone"
            )


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def shards_dropped(
    out_dir: Path, tasks: Sequence[ShardTask], done: dict[str, ShardResult], target: int | None
) -> list[str]:
    """Shards the manifest lists that this plan would drop or rewrite with fewer attempts.

    Only listed shards count: the manifest is the commit point, and a file it does not list
    (left by a driver killed mid-commit) is no part of the dataset (`factory verify` flags it).
    """
    recorded = load_generation(out_dir)["shards"]
    held = set(load_manifest(out_dir).by_name())
    kept = shard_prefix(done, target, tasks)
    end = len(kept) if kept is not None else len(tasks)
    dropped = []
    for name in sorted(held):
        task = task_named(tasks, name)
        entry = recorded.get(name)
        ids = entry.get("attempt_ids") if isinstance(entry, dict) else None
        fewer = (
            task is not None
            and isinstance(ids, list)
            and len(ids) == 2
            and ids[1] > task.attempt_ids[-1] + 1
        )
        if task is None or task.index >= end or fewer:
            dropped.append(name)
    return dropped


def refuse_shrinking(
    out_dir: Path, spec: SceneSpec, dropped: list[str], prefix_stops: bool
) -> None:
    """Raise the one-line UserError for a run that would drop `dropped`: why, and the two ways
    out."""
    recorded = load_generation(out_dir)["shards"]
    held = max(
        (
            e["attempt_ids"][1]
            for e in recorded.values()
            if isinstance(e, dict)
            and isinstance(e.get("attempt_ids"), list)
            and len(e["attempt_ids"]) == 2
        ),
        default=0,
    )
    shown = ", ".join(dropped[:3]) + (f" and {len(dropped) - 3} more" if len(dropped) > 3 else "")
    if prefix_stops:
        why = (
            f"--successes {spec.generation.target_successes} is reached by the shards before them; "
            "leave --successes out to keep them"
        )
    else:
        why = (
            f"it holds attempts 0..{held - 1}, this run plans {spec.generation.attempts}; "
            f"run with --attempts {held} (or more) to keep them"
        )
    raise UserError(
        f"{out_dir}: this run would drop {len(dropped)} finished shard(s) ({shown}): {why}, "
        "or pass --truncate to drop them"
    )


def shard_prefix(
    results: dict[str, ShardResult], target: int | None, tasks: list[ShardTask]
) -> list[ShardTask] | None:
    """The shortest run of finished shards 0..j holding `target` successes, if there is one.

    Deciding by shard index, not by finishing order, keeps a "generate until N" dataset
    the same whatever the number of workers.
    """
    if target is None:
        return None
    total = 0
    for j, task in enumerate(tasks):
        if task.name not in results:
            return None
        total += results[task.name].successes
        if total >= target:
            return tasks[: j + 1]
    return None


def clear_dataset(out_dir: Path) -> None:
    """Remove a dataset's files (the manifest and its journal first: they are the commit point);
    other files stay."""
    (out_dir / MANIFEST_FILENAME).unlink(missing_ok=True)
    journal_path(out_dir).unlink(missing_ok=True)
    for pattern in ("shard-*.tar", "shard-*.stats.json"):  # shards and their statistics
        for path in shards_dir(out_dir).glob(pattern):
            path.unlink()
    for name in (GENERATION_FILENAME, EPISODES_FILENAME, STATS_FILENAME):
        (out_dir / name).unlink(missing_ok=True)


def lock_output_dir(out_dir: Path, command: str = "run"):
    """Lock DIR/.lock: one writer per dataset directory (`factory run`, `factory divergence`).
    Returns the open file; closing it unlocks. The file says who holds it: "pid N on HOST",
    then the command on a line of its own.

    The kernel drops the lock when the process ends, however it ends (a SIGKILLed driver
    does not block its re-run).
    """
    path = out_dir / LOCK_FILENAME
    handle = open(path, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        lines = handle.read().strip().splitlines()
        handle.close()
        raise UserError(_locked_message(out_dir, command, lines)) from None
    except OSError as err:  # a file system without locks (some NFS set-ups): run, but say so
        print(
            f"warning: {path}: cannot lock ({err.strerror}); make sure no other run writes here",
            file=sys.stderr,
        )
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()} on {socket.gethostname()}\nfactory {command}\n")
    handle.flush()
    return handle


def _locked_message(out_dir: Path, command: str, lines: list[str]) -> str:
    """What holds DIR/.lock (from the lines it wrote) and what the blocked `command` can do."""
    holder = lines[0] if lines else "another process"
    doing = lines[1] if len(lines) > 1 else "factory run"
    if command == "run":
        return (
            f"{out_dir}: another `{doing}` is writing this dataset ({holder}); "
            "wait for it or choose another --out"
        )
    return (
        f"{out_dir}: `{doing}` ({holder}) is writing this dataset; `factory {command}` writes "
        f"into it too: wait for that to end (or stop it), then run `factory {command}` again"
    )
