"""What a reader's private snapshot costs against the read it protects; prints one JSON object.

    .venv/bin/python benchmarks/bench_reader_snapshot.py [--shards 200] [--episodes 5] [--steps 40]

Writes a real dataset (demofactory.shards.dataset.write_dataset: `--shards` shards of `--episodes`
episodes of
`--steps` steps, one 32x32 camera) in a temporary folder, then times, each `--repeat` times, best
of: `reading(DIR)` (the snapshot every CLI reader and the loader take: small files hard-linked or
copied, every shard file linked) and, as the reference measured in the same run, the cheapest
whole read a reader does, `load_manifest` + `load_episodes` + `load_stats` of DIR, and
`verify_dataset(DIR)`. `snapshot_vs_metadata_read` and `snapshot_vs_verify` are the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from demofactory.shards import Episode, load_episodes, load_manifest
from demofactory.shards.dataset import write_dataset
from demofactory.shards.snapshot import reading
from demofactory.shards.stats import load_stats
from demofactory.shards.verify import verify_dataset


def _episodes(shards: int, per_shard: int, steps: int, rng: np.random.Generator) -> list[Episode]:
    frame = _jpeg(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8))
    episodes = []
    for shard in range(shards):
        for k in range(per_shard):
            index = shard * per_shard + k
            episodes.append(
                Episode(
                    index=index,
                    shard=shard,
                    instruction="lift the cube",
                    seed=index,
                    images={"agentview": [frame] * steps},
                    states=rng.standard_normal((steps, 9)).astype(np.float32),
                    actions=rng.uniform(-1, 1, (steps, 7)).astype(np.float32),
                    sim_states=rng.standard_normal((steps, 30)),
                    provenance={"source_demo": "demo_0"},
                )
            )
    return episodes


def _jpeg(pixels: np.ndarray) -> bytes:
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG")
    return out.getvalue()


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=200)
    parser.add_argument("--episodes", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("DEMOFACTORY_CACHE", str(Path(tmp) / "cache"))
        dataset = Path(tmp) / "ds"
        rng = np.random.default_rng(0)
        cameras = [{"name": "agentview", "width": 32, "height": 32, "format": "jpg"}]
        episodes = _episodes(args.shards, args.episodes, args.steps, rng)
        write_dataset(dataset, episodes, {"name": "bench", "fps": 20, "cameras": cameras})

        def snapshot() -> None:
            with reading(dataset):
                pass

        def metadata() -> None:
            load_manifest(dataset), load_episodes(dataset), load_stats(dataset)

        snapshot_s = _best(snapshot, args.repeat)
        metadata_s = _best(metadata, args.repeat)
        verify_s = _best(lambda: verify_dataset(dataset), 1)
    print(
        json.dumps(
            {
                "shards": args.shards,
                "episodes": len(episodes),
                "snapshot_s": round(snapshot_s, 4),
                "metadata_read_s": round(metadata_s, 4),
                "verify_s": round(verify_s, 3),
                "snapshot_vs_metadata_read": round(snapshot_s / metadata_s, 2),
                "snapshot_vs_verify": round(snapshot_s / verify_s, 4),
            }
        )
    )


if __name__ == "__main__":
    from _common import run  # benchmarks/_common.py: --json-out PATH

    run(main)
