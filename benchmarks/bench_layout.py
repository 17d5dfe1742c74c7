"""Bytes a step on disk and loader throughput, step layout vs episode layout, with and without
cameras, over real generated episodes.

    .venv/bin/python benchmarks/bench_layout.py [--source out/lift_img] [--episodes 40]
        [--repeats 3] [--clock wall|cpu]

Reads the first `--episodes` episodes of a dataset the factory wrote (`--source`, any layout;
with cameras for the "cameras" rows) and writes them four times into a temporary directory,
keeping their shards: {step, episode} layout x {cameras, lowdim} (lowdim: the same episodes
with their frames dropped, as a dataset without cameras holds them). For each it reports

- bytes_per_step:  the shards' bytes / steps (the tar headers and padding included);
- steps_per_s:     `make_loader(dir, normalization="mean_std")` iterated over every step in one
                   process (frames decoded to uint8 [3, H, W], state, action chunk, mask), the
                   best of `--repeats` interleaved rounds;

and the ratios episode / step of both. Target (issue 17): lowdim bytes_ratio <= 0.2 and
steps_per_s ratio >= 1. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path

import torch
from demofactory.shards import Episode, shards_dir
from demofactory.shards.dataset import write_dataset
from demofactory.shards.export_source import load_source, read_episodes
from demofactory.shards.loader import make_loader
from demofactory.shards.metadata import load_dataset_info
from demofactory.shards.shard_layout import SHARD_LAYOUTS

CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def load_episodes(source: Path, count: int) -> list[Episode]:
    """The first `count` episodes of the dataset in `source`, as `Episode` records."""
    episodes = []
    for ep in itertools.islice(read_episodes(load_source(source)), count):
        record = ep.record
        episodes.append(
            Episode(
                index=record.index,
                shard=int(record.shard.removeprefix("shard-").removesuffix(".tar")),
                instruction=record.instruction,
                seed=record.seed,
                actions=ep.actions,
                states=ep.states,
                sim_states=ep.sim_states,
                images=ep.frames,
                provenance=record.provenance,
                depth=ep.depth,
                segmentation=ep.segmentation,
            )
        )
    return episodes


def lowdim(episodes: list[Episode]) -> list[Episode]:
    """The same episodes without frames."""
    return [
        Episode(
            index=ep.index,
            shard=ep.shard,
            instruction=ep.instruction,
            seed=ep.seed,
            actions=ep.actions,
            states=ep.states,
            sim_states=ep.sim_states,
            images={},
            provenance=ep.provenance,
        )
        for ep in episodes
    ]


def run_loader(root: Path) -> int:
    return sum(1 for _ in make_loader(root, normalization="mean_std"))


def table(result: dict) -> tuple[list[str], list[list[str]]]:
    """docs/benchmarks.md's table of one run (written with `--json-out`, benchmarks/_common.py)."""
    count = len(result["camera_names"])
    cameras = "one camera" if count == 1 else f"{count} cameras"
    rows = []
    for kind, name in (("lowdim", "low-dimensional"), ("cameras", cameras)):
        row = result[kind]
        for what, key, ratio in (
            ("bytes a step", "bytes_per_step", "bytes_ratio"),
            ("loader steps/s", "steps_per_s", "steps_per_s_ratio"),
        ):
            step, episode = row["step"][key], row["episode"][key]
            rows.append([f"{name}, {what}", f"{step:,.0f}", f"{episode:,.0f}", f"{row[ratio]:.2f}"])
    return ["", "step layout", "episode layout", "ratio"], rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", type=Path, default=Path("out/lift_img"))
    parser.add_argument("--episodes", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    args = parser.parse_args()
    if not (args.source / "manifest.json").is_file():
        sys.exit(
            f"{args.source}: no dataset; generate one, e.g. .venv/bin/factory run "
            f"scene_specs/lift_img.yaml --out {args.source}"
        )
    torch.set_num_threads(1)  # one core, like bench_loader
    clock = CLOCKS[args.clock]
    episodes = load_episodes(args.source, args.episodes)
    info = load_dataset_info(args.source)
    steps = sum(ep.length for ep in episodes)
    kinds = {"cameras": (episodes, info["cameras"]), "lowdim": (lowdim(episodes), [])}
    result: dict = {
        "benchmark": "layout",
        "source": str(args.source),
        "episodes": len(episodes),
        "steps": steps,
        "camera_names": [c["name"] for c in info["cameras"]],
        "clock": args.clock,
    }
    with tempfile.TemporaryDirectory(prefix="bench_layout-") as tmp:
        roots = {}
        for (kind, (eps, cameras)), layout in itertools.product(kinds.items(), SHARD_LAYOUTS):
            root = roots[kind, layout] = Path(tmp) / f"{kind}-{layout}"
            write_dataset(root, eps, {**info, "cameras": cameras}, layout=layout)
            assert run_loader(root) == steps  # warms the page cache, checks the count
        rates = dict.fromkeys(roots, 0.0)
        for _ in range(args.repeats):  # interleaved, and the best kept: the round least disturbed
            for key, root in roots.items():
                start = clock()
                count = run_loader(root)
                rates[key] = max(rates[key], count / (clock() - start))
        for kind in kinds:
            row = {}
            for layout in SHARD_LAYOUTS:
                tars = shards_dir(roots[kind, layout]).glob("*.tar")
                shard_bytes = sum(p.stat().st_size for p in tars)
                row[layout] = {
                    "bytes_per_step": round(shard_bytes / steps, 1),
                    "steps_per_s": round(rates[kind, layout], 1),
                }
            row["bytes_ratio"] = round(
                row["episode"]["bytes_per_step"] / row["step"]["bytes_per_step"], 3
            )
            row["steps_per_s_ratio"] = round(
                row["episode"]["steps_per_s"] / row["step"]["steps_per_s"], 3
            )
            result[kind] = row
    print(json.dumps(result))


if __name__ == "__main__":
    from _common import run  # benchmarks/_common.py: --json-out PATH

    run(main, table)
