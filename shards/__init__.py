"""The dataset format: WebDataset shards of whole episodes plus their metadata files.

`format` names things and defines `Episode`; `writer` writes one shard
atomically and reproducibly; `manifest`, `stats` and `metadata` read and write
the JSON files beside the shards.
"""

from demofactory.shards.format import (
    DATASET_INFO_FILENAME,
    EPISODES_FILENAME,
    MANIFEST_FILENAME,
    SCHEMA_VERSION,
    STATS_FILENAME,
    DatasetError,
    Episode,
    ExportError,
    sample_key,
    shard_name,
    shards_dir,
)
from demofactory.shards.manifest import (
    Manifest,
    check_shard,
    check_shards,
    load_manifest,
    save_manifest,
    verify_shard,
)
from demofactory.shards.metadata import (
    EpisodeRecord,
    load_dataset_info,
    load_episodes,
    save_dataset_info,
    save_episodes,
)
from demofactory.shards.stats import DatasetStats, KeyStats, compute_stats, load_stats, save_stats
from demofactory.shards.writer import ShardInfo, sha256_file, write_shard

__all__ = [
    "DATASET_INFO_FILENAME",
    "EPISODES_FILENAME",
    "MANIFEST_FILENAME",
    "SCHEMA_VERSION",
    "STATS_FILENAME",
    "DatasetError",
    "ExportError",
    "DatasetStats",
    "Episode",
    "EpisodeRecord",
    "KeyStats",
    "Manifest",
    "ShardInfo",
    "check_shard",
    "check_shards",
    "compute_stats",
    "load_dataset_info",
    "load_episodes",
    "load_manifest",
    "load_stats",
    "sample_key",
    "save_dataset_info",
    "save_episodes",
    "save_manifest",
    "save_stats",
    "sha256_file",
    "shard_name",
    "shards_dir",
    "verify_shard",
    "write_shard",
]
