"""The streaming loader against two ceilings, in decoded steps per second on one core.

    .venv/bin/python benchmarks/bench_loader.py [--episodes 20] [--length 100] [--size 128]
        [--repeats 3]
                                                [--clock wall|cpu] [--profile]

Builds a synthetic dataset in a temporary directory (two cameras, real JPEGs of
smooth images at quality 90, as the factory renders them) and times, each the
best of `--repeats` rounds in one process (no DataLoader workers):

- loader:        `make_loader(dir, normalization="mean_std")` iterated over every step
                 (both cameras decoded to uint8 [3, H, W], state, action chunk, mask);
- jpeg_ceiling:  the same JPEG bytes, already in memory, decoded in a tight loop by the
                 loader's decode function (PIL -> numpy -> transposing copy -> tensor);
- hdf5:          the robomimic export of the same dataset (`demofactory.shards.export_robomimic`),
read
                 per step with h5py: each camera's image sliced at t (then transposed to
                 [3, H, W] like the loader's), the state parts at t, the actions t..t+H-1.

Prints one JSON object with the steps per second of each, `ratio_vs_jpeg_ceiling`
= loader / jpeg_ceiling and `ratio_vs_hdf5` = loader / hdf5. Target:
ratio_vs_jpeg_ceiling >= 0.8, i.e. everything but JPEG decoding costs at most a
fifth of the loader's time. `--clock cpu` times with this process's CPU time
instead of the wall clock: on a shared machine other processes' load then
disturbs the rates less. `--profile` prints the loader's cProfile (top 25 by
internal time) to stderr.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import torch
from demofactory.shards import Episode, shards_dir
from demofactory.shards.dataset import write_dataset
from demofactory.shards.export_robomimic import export_robomimic
from demofactory.shards.loader import _decode_jpeg, make_loader
from PIL import Image

CAMERAS = ("agentview", "robot0_eye_in_hand")
EPISODES_PER_SHARD = 5
HORIZON = 16  # make_loader's default action_horizon
STATE_LAYOUT = [["eef_pos", 3], ["eef_quat_xyzw", 4], ["gripper_qpos", 2]]
ACTION_LAYOUT = [["delta_pos", 3], ["delta_axis_angle", 3], ["gripper", 1]]


def _frame(episode: int, step: int, camera: int, size: int) -> bytes:
    """A smooth image (gradients and a slow wave that move with the step) as a quality-90 JPEG."""
    y, x = np.mgrid[0:size, 0:size] / size
    phase = 0.05 * step + episode + 2 * camera
    wave = 40 * np.sin(6 * x + phase) * np.cos(4 * y - phase)
    image = np.stack(
        [80 + 100 * x + wave, 60 + 120 * y - wave, 140 + 60 * x * y + 0.5 * wave], axis=-1
    )
    buffer = io.BytesIO()
    Image.fromarray(np.clip(image, 0, 255).astype(np.uint8)).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def build_dataset(root: Path, episodes: int, length: int, size: int) -> list[bytes]:
    """A whole dataset under `root`; returns every JPEG it holds (the ceiling's input)."""
    rng = np.random.default_rng(0)
    written, frames = [], []
    for shard in range((episodes + EPISODES_PER_SHARD - 1) // EPISODES_PER_SHARD):
        for index in range(
            shard * EPISODES_PER_SHARD, min(episodes, (shard + 1) * EPISODES_PER_SHARD)
        ):
            images = {
                name: [_frame(index, t, c, size) for t in range(length)]
                for c, name in enumerate(CAMERAS)
            }
            frames += [jpeg for camera_frames in images.values() for jpeg in camera_frames]
            written.append(
                Episode(
                    index=index,
                    shard=shard,
                    instruction="stack the red cube on the green cube",
                    seed=index,
                    actions=rng.uniform(-1, 1, size=(length, 7)),
                    states=np.cumsum(rng.normal(size=(length, 9)), 0),
                    sim_states=rng.normal(size=(length, 20)),
                    images=images,
                    provenance={"source_demo": "demo_0"},
                )
            )
    task = {"env": "Stack", "robot": "Panda", "controller": "OSC_POSE", "control_freq": 20}
    write_dataset(
        root,
        written,
        {
            "name": "bench",
            "fps": 20,
            "env": "Stack",
            "robot": "Panda",
            "cameras": [
                {"name": name, "width": size, "height": size, "format": "jpg"} for name in CAMERAS
            ],
            "state": {"dim": 9, "layout": STATE_LAYOUT},
            "action": {"dim": 7, "layout": ACTION_LAYOUT},
            "sim_state": {"dim": 20, "layout": "time, qpos, qvel (MuJoCo, flattened)"},
            "spec": {"name": "bench", "task": task},
        },
    )
    return frames


def run_loader(root: Path) -> int:
    return sum(1 for _ in make_loader(root, normalization="mean_std"))


def run_jpeg_ceiling(frames: list[bytes]) -> int:
    for data in frames:
        # the loader's own decode: the ceiling follows it when it changes
        _decode_jpeg(data, "uint8")
    return len(frames) // len(CAMERAS)


def run_hdf5(path: Path) -> int:
    steps = 0
    with h5py.File(path, "r") as f:
        for demo in f["data"].values():
            images = [demo[f"obs/{camera}_image"] for camera in CAMERAS]
            parts = [
                demo[f"obs/{key}"]
                for key in ("robot0_eef_pos", "robot0_eef_quat", "robot0_gripper_qpos")
            ]
            actions = demo["actions"]
            for t in range(demo.attrs["num_samples"]):
                for dataset in images:
                    torch.from_numpy(np.array(dataset[t].transpose(2, 0, 1), order="C"))
                torch.from_numpy(np.concatenate([part[t] for part in parts]).astype(np.float32))
                torch.from_numpy(actions[t : t + HORIZON].astype(np.float32))
                steps += 1
    return steps


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def rate(fn: Callable[[], int], clock: Callable[[], float] = time.perf_counter) -> float:
    """Steps per second of one call of `fn`, which returns the steps it read, timed by `clock`."""
    start = clock()
    steps = fn()
    return steps / (clock() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--length", type=int, default=100, help="steps per episode")
    parser.add_argument("--size", type=int, default=128, help="camera width and height")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="wall: elapsed time; cpu: this process's CPU time (steadier on a busy machine)",
    )
    parser.add_argument(
        "--profile", action="store_true", help="print the loader's cProfile to stderr"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)  # one core; the loader's own tensors are too small to use more
    with tempfile.TemporaryDirectory(prefix="bench_loader-") as tmp:
        root, hdf5 = Path(tmp) / "dataset", Path(tmp) / "robomimic.hdf5"
        frames = build_dataset(root, args.episodes, args.length, args.size)
        export_robomimic(root, hdf5)
        total = args.episodes * args.length
        assert (
            run_loader(root) == total and run_hdf5(hdf5) == total
        )  # warm the page cache, check counts
        runs = {
            "loader": lambda: run_loader(root),
            "jpeg_ceiling": lambda: run_jpeg_ceiling(frames),
            "hdf5": lambda: run_hdf5(hdf5),
        }
        rates = dict.fromkeys(runs, 0.0)
        for _ in range(args.repeats):  # interleaved, and the best kept: the round least disturbed
            for name, fn in runs.items():
                rates[name] = max(rates[name], rate(fn, CLOCKS[args.clock]))
        if args.profile:
            profile = cProfile.Profile()
            profile.runcall(run_loader, root)
            pstats.Stats(profile, stream=sys.stderr).sort_stats("tottime").print_stats(25)
        shard_bytes = sum(p.stat().st_size for p in shards_dir(root).glob("*.tar"))
        result = {
            "benchmark": "loader",
            "episodes": args.episodes,
            "steps": total,
            "cameras": len(CAMERAS),
            "size": args.size,
            "clock": args.clock,
            "jpeg_kib_mean": round(sum(map(len, frames)) / len(frames) / 1024, 2),
            "shard_mib": round(shard_bytes / 2**20, 1),
            "hdf5_mib": round(hdf5.stat().st_size / 2**20, 1),
            "loader_steps_per_s": round(rates["loader"], 1),
            "jpeg_ceiling_steps_per_s": round(rates["jpeg_ceiling"], 1),
            "hdf5_steps_per_s": round(rates["hdf5"], 1),
            "ratio_vs_jpeg_ceiling": round(rates["loader"] / rates["jpeg_ceiling"], 3),
            "ratio_vs_hdf5": round(rates["loader"] / rates["hdf5"], 3),
        }
    print(json.dumps(result))


if __name__ == "__main__":
    from _common import run  # benchmarks/_common.py: --json-out PATH

    run(main)
