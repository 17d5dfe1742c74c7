"""Statistics per embodiment (robot) of a mixed-robot dataset: stats.json's `embodiments`.

    worker: write_shard ──► the sidecar holds, besides action/state over every step,
            `action@<robot>` / `state@<robot>` over that robot's steps (`embodiment_rows`)
    driver: the listed shards ──► per shard its sidecar's `@` keys where the checksum matches,
            else its action/state/meta members read back and grouped by meta.embodiment
            ──► merged per (robot, key) ──► {robot: {action: KeyStats, state: KeyStats}}

stats.json keeps its top-level `action` and `state` (over every step, as before: a single-robot
dataset's readers see no change) and adds `embodiments: {robot: {action: {...}, state: {...}}}`.
Steps of an episode that names no embodiment (a dataset written before embodiments) are not
counted under any robot.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from demofactory.shards.format import (
    ACTION_KEY,
    META_KEY,
    STATE_KEY,
    DatasetError,
    Episode,
    shards_dir,
)
from demofactory.shards.partial_stats import PartialStats, from_bytes, partial_stats
from demofactory.shards.running_stats import merge_parts
from demofactory.shards.stats import KeyStats, _key_stats, sidecar_path
from demofactory.shards.tario import read_samples

KEYS = (ACTION_KEY, STATE_KEY)
SEPARATOR = "@"  # sidecar key "action@Panda": the action statistics of Panda's steps


def embodiment_rows(episodes: Sequence[Episode]) -> dict[str, np.ndarray]:
    """The sidecar's per-embodiment rows: `<key>@<robot>` -> [steps, D] of that robot's steps."""
    robots = sorted({ep.embodiment for ep in episodes if ep.embodiment})
    rows = {}
    for robot in robots:
        mine = [ep for ep in episodes if ep.embodiment == robot]
        rows[f"{ACTION_KEY}{SEPARATOR}{robot}"] = np.concatenate([ep.actions for ep in mine])
        rows[f"{STATE_KEY}{SEPARATOR}{robot}"] = np.concatenate([ep.states for ep in mine])
    return rows


def embodiment_stats(
    dataset_dir: Path, listed: Mapping[str, str]
) -> dict[str, dict[str, KeyStats]]:
    """{robot: {"action": KeyStats, "state": KeyStats}} over the shards `listed` (name ->
    sha256); empty when no episode names an embodiment."""
    parts: dict[str, list[PartialStats]] = {}
    for name in sorted(listed):
        path = shards_dir(dataset_dir) / name
        found = _sidecar_parts(path, listed[name])
        if found is None:
            found = _tar_parts(path)
        for key, part in found.items():
            parts.setdefault(key, []).append(part)
    out: dict[str, dict[str, KeyStats]] = {}
    for key in sorted(parts):
        base, _, robot = key.partition(SEPARATOR)
        out.setdefault(robot, {})[base] = _key_stats(merge_parts(parts[key]))
    return out


def _sidecar_parts(path: Path, sha256: str) -> dict[str, PartialStats] | None:
    """The sidecar's `@` keys when it was written for the tar with `sha256`, else None."""
    try:
        head, _, body = sidecar_path(path).read_bytes().partition(b"\n")
        if json.loads(head).get("sha256") != sha256:
            return None
        keys = [k for k in json.loads(body)["keys"] if SEPARATOR in k]
        return from_bytes(body, keys, str(sidecar_path(path)))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, DatasetError):
        return None


def _tar_parts(path: Path) -> dict[str, PartialStats]:
    """Per-embodiment partial statistics read back from a shard's members."""
    rows: dict[str, list[np.ndarray]] = {}
    wanted = {f"{ACTION_KEY}.npy", f"{STATE_KEY}.npy", f"{META_KEY}.json"}
    for sample in read_samples(path, wanted.__contains__):
        meta = json.loads(sample.members[f"{META_KEY}.json"])
        robot = meta.get("embodiment")
        if not robot:
            continue
        for key in KEYS:
            array = np.load(io.BytesIO(sample.members[f"{key}.npy"]), allow_pickle=False)
            rows.setdefault(f"{key}{SEPARATOR}{robot}", []).append(array)
    return {key: partial_stats(np.stack(values)) for key, values in rows.items()}


def embodiments_json(stats: Mapping[str, Mapping[str, KeyStats]]) -> dict:
    """stats.json's `embodiments` entry."""
    return {
        robot: {key: s.to_json() for key, s in sorted(keys.items())}
        for robot, keys in sorted(stats.items())
    }


def load_embodiment_stats(extra: Mapping) -> dict[str, dict[str, KeyStats]]:
    """stats.json's `embodiments` (from `DatasetStats.extra`) as KeyStats; {} when absent."""
    entry = extra.get("embodiments") or {}
    if not isinstance(entry, dict):
        raise DatasetError(f"stats.json: embodiments must be an object, got {type(entry).__name__}")
    return {
        robot: {key: KeyStats.from_json(value) for key, value in keys.items()}
        for robot, keys in entry.items()
    }
