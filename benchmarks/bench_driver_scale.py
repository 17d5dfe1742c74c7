"""The driver's work per shard as the dataset grows; prints one JSON object.

    .venv/bin/python benchmarks/bench_driver_scale.py [--shards 1000,10000,100000]
        [--old 1000,10000] [--episodes 10] [--steps 500] [--state-dim 40]

Drives the real `demofactory.build.recorder.DatasetRecorder` (what `factory run` calls per finished
shard:
`record`, the `maybe_commit` asked between shards, then `finish`) with simulated shard results:
`--episodes` episodes of `--steps` steps a shard, each episode record carrying a provenance of
the size real ones have (~0.7 kB), and the worker's statistics sidecar of [episodes * steps, 7]
actions and [.., state-dim] states (a pool of 8 distinct sidecars, hard-linked under each
shard's name, so 100,000 shards cost no disk; the tars themselves are not needed). Each size runs
in a fresh process: `peak_rss_mb` is that process's peak resident memory (getrusage), and
`driver_rss_mb` the part above the process before the run. Only the driver's calls are timed
(making the results and linking the sidecars, the workers' side, is not).
`time_ratio_largest_vs_smallest`: driver seconds per shard at the largest size over the smallest
(target <= 2); memory target <= 2 GB at 100,000.

`--old`: the same at these sizes with the recorder before the journal, which rewrote
generation.json and manifest.json per commit and kept every episode record (factory/build/run.py at
git revision `--old-rev`, read with `git show`), as a reference measured in the same run.

`quantiles_on_real_data`: the merged sketch's q01..q99 against numpy's exact quantiles on real
robot data: every seed demo of scene_specs/demos (human and scripted trajectories, each demo a
part, merged), or the tars of `--dataset DIR` (one part a shard); the error as a share of each
dimension's range, its maximum against the stated bound (`QUANTILE_ERROR_OF_RANGE`) and the
issue's target (0.5 %).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from demofactory.build.records import ShardResult, ShardTask  # noqa: E402
from demofactory.shards import EpisodeRecord, ShardInfo, shard_name, shards_dir  # noqa: E402
from demofactory.shards.partial_stats import QUANTILE_ERROR_OF_RANGE, merge_all, partial_stats  # noqa: E402
from demofactory.shards.stats import save_sidecar, sidecar_path  # noqa: E402

POOL = 8
QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)


def make_pool(work: Path, args) -> list[str]:
    """POOL sidecars of plausible shard data; returns the sha256 each names."""
    rng = np.random.default_rng(0)
    shas = []
    n = args.episodes * args.steps
    for p in range(POOL):
        actions = np.clip(rng.normal(0, 0.4, (n, 7)), -1, 1)
        actions[:, 6] = np.sign(actions[:, 6])  # a gripper: two values
        states = rng.normal(size=(n, args.state_dim)) * rng.uniform(0.01, 2, args.state_dim)
        sha = hashlib.sha256(f"pool {p}".encode()).hexdigest()
        parts = {"action": partial_stats(actions), "state": partial_stats(states)}
        save_sidecar(work / f"pool-{p}.tar", parts, sha)
        shas.append(sha)
    return shas


def make_result(index: int, args, sha: str) -> ShardResult:
    """A finished shard as a worker reports it (plain data, as it arrives from Ray)."""
    rng = np.random.default_rng(index)
    first = index * args.episodes
    episodes = tuple(
        EpisodeRecord(
            index=first + k,
            shard=shard_name(index),
            length=args.steps,
            instruction="lift the red cube",
            seed=int(rng.integers(2**63)),
            provenance={
                "appearance": {"cameras": {}, "lights": [], "surfaces": {}},
                "language": {"attributes": {"target": {"color": "red", "name": "cube"}}},
                "order": [0, 1],
                "paraphrases": ["pick up the red block", "raise the red cube off the table"],
                "placement": {"target": rng.normal(size=3).round(6).tolist()},
                "reached": [0, 1],
                "sources": ["lift_colour_scripted.hdf5:demo_5"] * 2,
                "trajectory": k,
                "variant": 0,
            },
        )
        for k in range(args.episodes)
    )
    info = ShardInfo(
        name=shard_name(index),
        samples=args.episodes * args.steps,
        episodes=args.episodes,
        bytes=1_000_000 + index,
        sha256=sha,
    )
    return ShardResult(
        task=ShardTask(index, tuple(range(first, first + args.episodes))),
        info=info,
        attempts=args.episodes,
        successes=args.episodes,
        failures={},
        episodes=episodes,
        wall_s=12.5,
        steps_simulated=args.episodes * args.steps,
        subtasks={"0": {"reached": args.episodes, "failed": 0, "retries": 0}},
        node="f" * 56,
    )


def old_recorder_class(rev: str):
    """DatasetRecorder as factory/build/run.py had it at `rev` (before the journal)."""
    source = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{rev}:factory/build/run.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    module = types.ModuleType("old_run")
    module.__file__ = "old_run.py"
    sys.modules["old_run"] = module
    exec(compile(source, f"{rev}:factory/build/run.py", "exec"), module.__dict__)
    return module.DatasetRecorder


def run_one(shards: int, args) -> dict:
    """One size in this process: the recorder's calls timed, the process's peak memory."""
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    with tempfile.TemporaryDirectory(prefix="bench_driver_", dir=args.tmp) as tmp:
        work = Path(tmp)
        shas = make_pool(work, args)
        out = work / "out"
        shards_dir(out).mkdir(parents=True)
        if args.impl == "old":
            recorder = old_recorder_class(args.old_rev)(out, {})
        else:
            from demofactory.build.recorder import DatasetRecorder

            recorder = DatasetRecorder(out, {})
        record_s = 0.0
        for i in range(shards):
            result = make_result(i, args, shas[i % POOL])
            os.link(
                sidecar_path(work / f"pool-{i % POOL}.tar"),
                sidecar_path(shards_dir(out) / result.info.name),
            )
            start = time.perf_counter()
            recorder.record(result)
            recorder.maybe_commit()  # asked between shards
            record_s += time.perf_counter() - start
        start = time.perf_counter()
        recorder.commit()
        recorder.finish(record_s)
        finish_s = time.perf_counter() - start
        stats = json.loads((out / "stats.json").read_text())
        assert stats["episodes"] == shards * args.episodes, stats["episodes"]
        sizes = {p.name: p.stat().st_size for p in out.iterdir() if p.is_file()}
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "impl": args.impl,
        "shards": shards,
        "record_ms_per_shard": round(1000 * record_s / shards, 4),
        "finish_s": round(finish_s, 3),
        "driver_ms_per_shard": round(1000 * (record_s + finish_s) / shards, 4),
        "peak_rss_mb": round(peak, 1),
        "driver_rss_mb": round(peak - base_rss, 1),
        "files_mb": {k: round(v / 2**20, 1) for k, v in sorted(sizes.items())},
    }


def quantile_errors(dataset: Path | None) -> dict:
    """Sketch quantiles against numpy's exact ones on real data (see the module doc)."""
    if dataset is None:
        import h5py

        groups: dict[str, list[np.ndarray]] = {}  # key and width: files differ in state width
        files = sorted((REPO / "scene_specs" / "demos").glob("*.hdf5"))
        for path in files:
            with h5py.File(path, "r") as f:
                for demo in f["data"].values():
                    for key, name in (("action", "actions"), ("state", "states")):
                        array = np.asarray(demo[name], dtype=np.float64)
                        groups.setdefault(f"{key}[{array.shape[1]}]", []).append(array)
        demos = sum(len(v) for k, v in groups.items() if k.startswith("action"))
        source = f"{demos} seed demos in {len(files)} files of scene_specs/demos"
    else:
        from demofactory.shards import load_manifest
        from demofactory.shards.stats import _read_arrays

        groups = {"action": [], "state": []}
        for info in load_manifest(dataset).shards:
            if info.samples:
                collected = {"action": [], "state": []}
                _read_arrays(shards_dir(dataset) / info.name, collected)
                for key, rows in collected.items():
                    groups[key].append(np.stack(rows).astype(np.float64))
        source = f"{len(groups['action'])} shards of {dataset}"
    worst, per_group = 0.0, {}
    for name, arrays in groups.items():
        merged = merge_all(partial_stats(a) for a in arrays)
        values = np.concatenate(arrays)
        span = values.max(0) - values.min(0)
        error = 0.0
        for q in QUANTILES:
            diff = np.abs(np.asarray(merged.quantiles(q)) - np.quantile(values, q, axis=0))
            share = np.divide(diff, span, out=np.zeros_like(diff), where=span > 0)
            error = max(error, float(share.max()))
        per_group[name] = {"steps": len(values), "dims": values.shape[1], "max_error": error}
        worst = max(worst, error)
    return {
        "source": source,
        "quantiles": list(QUANTILES),
        "max_error_of_range": worst,
        "stated_bound": QUANTILE_ERROR_OF_RANGE,
        "target": 0.005,
        "within_bound": worst <= QUANTILE_ERROR_OF_RANGE,
        "per_key": per_group,
    }


def table(report: dict) -> tuple[list[str], list[list[str]]]:
    """docs/benchmarks.md's table of one run (written with `--json-out`, benchmarks/_common.py)."""

    def seconds(value: float) -> str:
        return f"{value:.0f} s" if value >= 100 else f"{value:.1f} s"

    rows = []
    for run in report["runs"]:
        driver, record = run["driver_ms_per_shard"], run["record_ms_per_shard"]
        rows.append(
            [
                f"{run['shards']:,}",
                f"{driver:.2f} ({record:.2f} + {driver - record:.2f})",
                seconds(run["finish_s"]),
                f"{run['peak_rss_mb']:,.0f} MB",
            ]
        )
    for run in report["old_recorder"]:
        rows.append(
            [
                f"old recorder, {run['shards']:,}",
                f"{run['driver_ms_per_shard']:.2f}",
                seconds(run["finish_s"]),
                f"{run['peak_rss_mb']:,.0f} MB",
            ]
        )
    columns = ["shards", "driver ms a shard (record + finish)", "finish"]
    return [*columns, "peak memory of the process"], rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", default="1000,10000,100000", help="sizes, comma-separated")
    parser.add_argument("--old", default="1000,10000", help="sizes for the old recorder ('' none)")
    parser.add_argument(  # the last commit whose factory/build/run.py rewrote both files per commit
        "--old-rev", default="514456ce1794", help="git revision of the old factory/build/run.py"
    )
    parser.add_argument("--episodes", type=int, default=10, help="episodes a shard")
    parser.add_argument("--steps", type=int, default=500, help="steps an episode")
    parser.add_argument("--state-dim", type=int, default=40)
    parser.add_argument("--dataset", type=Path, help="real dataset for the quantile check")
    parser.add_argument("--tmp", default=None, help="where the datasets are written")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child: one size
    parser.add_argument("--impl", default="new", choices=("new", "old"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(run_one(args.one, args)))
        return

    def child(size: int, impl: str) -> dict:
        command = [sys.executable, __file__, "--one", str(size), "--impl", impl]
        for flag in ("episodes", "steps", "state_dim", "old_rev", "tmp"):
            value = getattr(args, flag)
            if value is not None:
                command += [f"--{flag.replace('_', '-')}", str(value)]
        done = subprocess.run(command, check=True, capture_output=True, text=True)
        return json.loads(done.stdout.strip().splitlines()[-1])

    sizes = [int(s) for s in args.shards.split(",") if s]
    runs = [child(size, "new") for size in sizes]
    old = [child(int(s), "old") for s in args.old.split(",") if s]
    small, large = runs[0], runs[-1]
    report = {
        "episodes_per_shard": args.episodes,
        "steps_per_episode": args.steps,
        "state_dim": args.state_dim,
        "load_average": os.getloadavg()[0],
        "runs": runs,
        "old_recorder": old,
        "time_ratio_largest_vs_smallest": round(
            large["driver_ms_per_shard"] / small["driver_ms_per_shard"], 3
        ),
        "largest_peak_rss_mb": large["peak_rss_mb"],
        "quantiles_on_real_data": quantile_errors(args.dataset),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    from _common import run  # benchmarks/_common.py: --json-out PATH

    run(main, table)
