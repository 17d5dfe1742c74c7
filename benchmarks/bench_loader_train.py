"""Training throughput through `make_loader` with images, against the loader's own decode ceiling.

    .venv/bin/python benchmarks/bench_loader_train.py [--dataset DIR] [--episodes 12]
        [--length 100] [--size 84] [--batch-size 64] [--workers 1] [--pool 4]
        [--batches 40] [--repeats 3] [--clock wall|cpu]

The data: `--dataset DIR` (a factory dataset with cameras), else a synthetic one built in a
temporary directory by `bench_loader.build_dataset` (two cameras of smooth images at JPEG
quality 90, as the factory renders them; 84x84 like the scene specs' cameras). One endless,
shuffled stream, `make_loader(DIR, normalization="mean_std", resampled=True)`, through a
DataLoader with `--workers` worker processes: the decoding runs there, in parallel with the
training step in the main process (on 2 cores: 1 worker + the main process). In one process,
interleaved rounds of `--batches` batches (after a few untimed ones), best of `--repeats`:

- decode_ceiling: samples/s the DataLoader yields when the consumer does nothing;
- train:          samples/s when each batch trains a small image policy (`demofactory.train.policy.
                  ChunkPolicy` with `image_shape`: three conv layers over the cameras stacked
                  as channels, + the normalized state, an MLP to the action chunk; masked L1,
                  AdamW) on `--threads` torch threads in the main process;
- step_ceiling:   samples/s of the same training step on one batch held in memory (no loader):
                  what the model alone allows on this machine.

The policy first average-pools the frames by `--pool` (default 4): the figure is about the
loader, so the step must cost less than the decoding, as it does where a GPU trains; on a CPU
core the full-size ChunkPolicy step costs ~5x the decoding of its two frames and `--pool 1`
measures the model instead (ratio_train_vs_step ~1).

Prints one JSON object; `ratio_train_vs_decode` = train / decode_ceiling (target >= 0.8: the
policy trains at the speed the loader decodes; the hand-off between worker and training loop
costs little), and `ratio_train_vs_step` = train / step_ceiling. `--clock cpu` counts the CPU
seconds of the busiest process (main or a worker) instead of elapsed time: the rate with a core
for each, steadier on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader

WARM_BATCHES = 4  # untimed at the start of a round: more than the prefetch queue holds (2)

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_loader, beside this file
from bench_loader import build_dataset  # noqa: E402
from demofactory.shards import load_dataset_info, load_manifest  # noqa: E402
from demofactory.shards.loader import make_loader  # noqa: E402
from demofactory.train.policy import ChunkPolicy, masked_l1  # noqa: E402


def make_step(policy: ChunkPolicy, cameras: list[str], pool: int = 1):
    """One AdamW step of `policy` on a loader batch -> its loss; images average-pooled by `pool`."""
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-3)

    def step(batch: dict) -> float:
        pixels = torch.cat([batch["images"][c] for c in cameras], dim=1).float().div_(255.0)
        if pool > 1:
            pixels = torch.nn.functional.avg_pool2d(pixels, pool)
        loss = masked_l1(
            policy(batch["state"], pixels), batch["action_chunk"], batch["action_mask"]
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    return step


def cpu_seconds(pid: int | str = "self") -> float:
    """User + system CPU seconds of process `pid` so far (Linux /proc; 10 ms ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(stream, pids: list, consume, batches: int, clock: str) -> float:
    """Samples per second over `batches` batches of `stream`, each handed to `consume`, after
    WARM_BATCHES untimed ones (the prefetch queue settles to this consumer's pace).

    clock "wall": elapsed time. "cpu": CPU seconds of the busiest of the processes `pids` (this
    one and the loader's workers), i.e. the rate with a core for each.
    """
    for _ in range(WARM_BATCHES):
        consume(next(stream))
    start, cpu, samples = time.perf_counter(), [cpu_seconds(p) for p in pids], 0
    for _ in range(batches):
        batch = next(stream)
        consume(batch)
        samples += len(batch["step"])
    if clock == "wall":
        return samples / (time.perf_counter() - start)
    return samples / max(cpu_seconds(p) - c for p, c in zip(pids, cpu, strict=True))


def step_ceiling(step, batch: dict, steps: int, clock: str) -> float:
    step(batch)  # warm-up: allocator, AdamW state
    now = time.perf_counter if clock == "wall" else time.process_time
    start = now()
    for _ in range(steps):
        step(batch)
    return steps * len(batch["step"]) / (now() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, help="a dataset with cameras (default: synthetic)")
    parser.add_argument("--episodes", type=int, default=12, help="synthetic: episodes")
    parser.add_argument("--length", type=int, default=100, help="synthetic: steps per episode")
    parser.add_argument("--size", type=int, default=84, help="synthetic: camera width and height")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=1, help="DataLoader worker processes")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the training step")
    parser.add_argument(
        "--pool",
        type=int,
        default=4,
        help="the policy average-pools the images by this factor first (1: full size)",
    )
    parser.add_argument("--batches", type=int, default=40, help="timed batches a round")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="wall: elapsed time; cpu: CPU time of the busiest process (a core each: steadier on "
        "a busy machine)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="bench_loader_train-") as tmp:
        root = args.dataset
        if root is None:
            root = Path(tmp) / "dataset"
            build_dataset(root, args.episodes, args.length, args.size)
        info = load_dataset_info(root) or {}
        cameras = [c["name"] for c in info.get("cameras", [])]
        if not cameras:
            raise SystemExit(f"{root}: dataset_info.json lists no camera")
        dataset = make_loader(
            root,
            cameras=cameras,
            normalization="mean_std",
            shuffle_buffer=256,
            resampled=True,  # one endless stream: no epoch ends, no worker restarts
        )
        loader = DataLoader(dataset, batch_size=args.batch_size, num_workers=args.workers)
        stream = iter(loader)
        pids = ["self", *(w.pid for w in getattr(stream, "_workers", []))]
        first = next(stream)
        height, width = first["images"][cameras[0]].shape[-2:]
        policy = ChunkPolicy(
            first["state"].shape[1],
            first["action_chunk"].shape[1],
            action_dim=first["action_chunk"].shape[2],
            image_shape=(3 * len(cameras), height // args.pool, width // args.pool),
        )
        step = make_step(policy, cameras, args.pool)
        runs = {
            "decode_ceiling": lambda: timed(stream, pids, lambda b: None, args.batches, args.clock),
            "train": lambda: timed(stream, pids, step, args.batches, args.clock),
            "step_ceiling": lambda: step_ceiling(step, first, 20, args.clock),
        }
        rates = dict.fromkeys(runs, 0.0)
        for _ in range(args.repeats):  # interleaved, the best kept: the round least disturbed
            for name, fn in runs.items():
                rates[name] = max(rates[name], fn())
        steps = sum(shard.samples for shard in load_manifest(root).shards)
    result = {
        "benchmark": "loader_train",
        "dataset": str(args.dataset) if args.dataset is not None else "synthetic",
        "steps": steps,
        "cameras": len(cameras),
        "image": [3, int(height), int(width)],
        "batch_size": args.batch_size,
        "workers": args.workers,
        "threads": args.threads,
        "pool": args.pool,
        "timed_batches": args.batches,
        "clock": args.clock,
        "policy_parameters": sum(p.numel() for p in policy.parameters()),
        "decode_ceiling_samples_per_s": round(rates["decode_ceiling"], 1),
        "train_samples_per_s": round(rates["train"], 1),
        "step_ceiling_samples_per_s": round(rates["step_ceiling"], 1),
        "ratio_train_vs_decode": round(rates["train"] / rates["decode_ceiling"], 3),
        "ratio_train_vs_step": round(rates["train"] / rates["step_ceiling"], 3),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    from _common import run  # benchmarks/_common.py: --json-out PATH

    run(main)
