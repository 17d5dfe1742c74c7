"""`verify_dataset` on a tiny real dataset, clean and then broken one way at a time."""

from __future__ import annotations

import io
import json
import shutil
import tarfile

import pytest
from demofactory.shards import load_manifest, save_manifest, sha256_file, shards_dir
from demofactory.shards.verify import verify_dataset
from demofactory.shards.writer import ShardInfo

from tests.shards.test_loader import BuiltDataset, build_dataset


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> BuiltDataset:
    return build_dataset(tmp_path_factory.mktemp("verify") / "pristine")


@pytest.fixture
def dataset(pristine, tmp_path) -> BuiltDataset:
    """A fresh copy of the pristine dataset for a test to break."""
    path = tmp_path / "dataset"
    shutil.copytree(pristine.path, path)
    return BuiltDataset(path, pristine.episodes)


def _problems_about(problems: list[str], prefix: str, *words: str) -> list[str]:
    return [p for p in problems if p.startswith(prefix) and all(w in p for w in words)]


def test_clean_dataset_has_no_problems(dataset) -> None:
    assert verify_dataset(dataset.path) == []


def test_a_corrupted_byte_fails_the_checksum(dataset) -> None:
    path = dataset.shard(2)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, one byte different
    path.write_bytes(bytes(data))
    problems = verify_dataset(dataset.path)
    assert _problems_about(problems, "shards/shard-000002.tar: sha256", "manifest.json"), problems


def test_a_deleted_shard_is_missing(dataset) -> None:
    dataset.shard(3).unlink()
    problems = verify_dataset(dataset.path)
    assert _problems_about(problems, "shards/shard-000003.tar: missing"), problems
    # Its episodes are still in episodes.jsonl; stats cannot be recomputed without it.
    assert _problems_about(problems, "episodes.jsonl: episode", "shard-000003.tar")
    assert _problems_about(problems, "stats.json: not checked")


def test_a_wrong_manifest_sample_count(dataset) -> None:
    manifest = json.loads((dataset.path / "manifest.json").read_text())
    entry = next(e for e in manifest["shards"] if e["name"] == "shard-000001.tar")
    entry["samples"] += 1
    (dataset.path / "manifest.json").write_text(json.dumps(manifest))
    problems = verify_dataset(dataset.path)
    assert problems == ["shards/shard-000001.tar: holds 4 samples, manifest.json says 5"]


def test_an_episode_length_that_disagrees(dataset) -> None:
    path = dataset.path / "episodes.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    records[2]["length"] += 3
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    problems = verify_dataset(dataset.path)
    index, length = records[2]["index"], records[2]["length"]
    assert problems == [
        f"episodes.jsonl: episode {index} has length {length}, "
        f"shards/shard-000001.tar holds {length - 3}"
    ]


@pytest.mark.parametrize(
    ("key", "field", "change"), [("action", "mean", 0.5), ("state", "q99", -1e-3)]
)
def test_altered_stats(dataset, key, field, change) -> None:
    path = dataset.path / "stats.json"
    stats = json.loads(path.read_text())
    stats[key][field][3] += change
    path.write_text(json.dumps(stats))
    problems = verify_dataset(dataset.path)
    assert len(problems) == 1 and problems[0].startswith(f"stats.json: {key}.{field} differs"), (
        problems
    )

    stats[key][field][3] -= change
    stats["transitions"] += 1
    path.write_text(json.dumps(stats))
    assert _problems_about(verify_dataset(dataset.path), "stats.json: transitions")


def test_an_episode_missing_a_step_is_not_whole(dataset) -> None:
    # Rewrite shard 0 without the members of episode 0's step 1, and record the new file in
    # the manifest so that only the content is wrong.
    path = dataset.shard(0)
    with tarfile.open(path) as tar:
        kept = [
            (m, tar.extractfile(m).read()) for m in tar if not m.name.startswith("e00000000_t0001.")
        ]
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for member, data in kept:
            tar.addfile(member, io.BytesIO(data))
    manifest = load_manifest(dataset.path)
    old = manifest.by_name()[path.name]
    new = ShardInfo(
        path.name, old.samples - 1, old.episodes, path.stat().st_size, sha256_file(path)
    )
    save_manifest(dataset.path, manifest.with_shard(new))

    problems = verify_dataset(dataset.path)
    assert _problems_about(
        problems, "shards/shard-000000.tar: sample e00000000_t0002", "not whole"
    ), problems
    assert _problems_about(problems, "episodes.jsonl: episode 0 has length 3", "holds 2")


def test_unreadable_metadata_is_a_problem_not_a_crash(dataset) -> None:
    (dataset.path / "episodes.jsonl").write_text("{not json\n")
    (dataset.path / "stats.json").unlink()
    problems = verify_dataset(dataset.path)
    assert _problems_about(problems, str(dataset.path / "episodes.jsonl") + ":1")
    assert "stats.json: missing" in problems
    shutil.rmtree(shards_dir(dataset.path))
    assert len(_problems_about(verify_dataset(dataset.path), "shards/", "missing")) == 5 + 1
    (dataset.path / "manifest.json").unlink()
    assert verify_dataset(dataset.path) == [f"manifest.json: missing in {dataset.path}"]
