"""Write a whole dataset at once from in-memory episodes (seed-demo datasets, tests, benchmarks).

`factory run` builds its datasets shard by shard, committing each one as it lands
(factory/build/run.py); this is the same end state in one call, for episodes already in hand:

    episodes grouped by shard ──► write_shard per shard ──► stats.json ──► episodes.jsonl
        ──► dataset_info.json ──► manifest.json (last: the commit point)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from demofactory.shards.format import Episode, shards_dir
from demofactory.shards.manifest import Manifest, save_manifest
from demofactory.shards.metadata import EpisodeRecord, save_dataset_info, save_episodes
from demofactory.shards.shard_layout import STEP_LAYOUT
from demofactory.shards.stats import compute_stats, save_stats
from demofactory.shards.writer import write_shard


def write_dataset(
    dataset_dir: Path,
    episodes: Sequence[Episode],
    info: Mapping[str, Any],
    shard_count: int | None = None,
    layout: str = STEP_LAYOUT,
) -> Manifest:
    """Write `episodes` (each names its shard) as a complete dataset under `dataset_dir`.

    Shards are written in index order, each holding its episodes in the order given. A shard
    index no episode names is not written, unless it is below `shard_count`: then it is an
    empty shard the manifest lists (as `factory run` writes for a shard without successes).
    `info` becomes dataset_info.json as given, plus ``shard_layout``: `layout`, "step" or
    "episode" (`demofactory.shards.shard_layout`). Returns the manifest, written last.
    """
    dataset_dir = Path(dataset_dir)
    shards_dir(dataset_dir).mkdir(parents=True, exist_ok=True)
    by_shard: dict[int, list[Episode]] = {index: [] for index in range(shard_count or 0)}
    for episode in episodes:
        by_shard.setdefault(episode.shard, []).append(episode)
    manifest = Manifest()
    for index in sorted(by_shard):
        manifest = manifest.with_shard(
            write_shard(by_shard[index], shards_dir(dataset_dir), index, layout)
        )
    checksums = {shard.name: shard.sha256 for shard in manifest.shards if shard.samples > 0}
    totals = {"episodes": len(episodes), "transitions": sum(ep.length for ep in episodes)}
    if checksums:
        stats = compute_stats(dataset_dir, list(checksums), checksums=checksums)
        save_stats(dataset_dir, stats, totals)
    save_episodes(dataset_dir, [EpisodeRecord.from_episode(ep) for ep in episodes])
    save_dataset_info(dataset_dir, {**info, "shard_layout": layout})
    save_manifest(dataset_dir, manifest)
    return manifest
