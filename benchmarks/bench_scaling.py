"""Scaling and Ray overhead of dataset generation, physics only, in one run; prints one JSON object.

    .venv/bin/python benchmarks/bench_scaling.py [--attempts 100] [--rounds 2]
        [--scaling-attempts 40]

Lift (scene_specs/lift.yaml) with cameras: [], horizon 400, 2 attempts a shard:
(a) scaling: run_shards on one 2-CPU Ray cluster (started once), the same `--scaling-attempts`
    with 1 worker and then 2. `scaling_2_vs_1` = episodes/s with 2 over episodes/s with 1,
    counted from the first worker ready to the last shard recorded (target >= 1.7 on 2 cores);
    `scaling_2_vs_1_wall` counts from the call, actor start-up included.
(b) overhead: `factory run --workers 1` (the CLI end to end: its own local Ray cluster, the
    actor's start-up, stats) against ShardWorker.run_shard over the same shards in a plain loop
    in this process (spec resolution and stats included, like the CLI), `--rounds` times,
    interleaved as loop, CLI | CLI, loop | loop, CLI ...: this machine's speed drifts by 10-20 %
    over minutes, and alternating (in both orders) spreads a drift over both arms.
    `overhead_ratio` = episodes per core-minute of the CLI over the loop's, from the summed
    wall times (target >= 0.9);
    `per_round` gives each round's. `cpu_ratio` counts CPU seconds instead of wall seconds:
    the loop process's against every process of the CLI run (driver, GCS, raylet, agents,
    actors; sampled from /proc), which steal time from other tenants does not inflate.
    `overhead_in_actor` compares only the shard work (generation.json's per-shard wall time).
Also: bytes per episode and per step (for the shared file system's bandwidth); the driver's
own limits: shards per second and driver CPU per shard with near-empty shards (horizon 2, on
2 workers; `driver_cpu_ms_per_shard` of the real runs includes idle polling), and one commit
of its bookkeeping at 10,000 shards (a journal line and an fsync; benchmarks/bench_driver_scale.py
measures the driver per shard up to 100,000 shards).

Every Ray process here is on 127.0.0.1 (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0). Attempts vary
in length (successes ~280 steps, horizon failures 400), so small runs are noisy; a loaded
machine (see load_average) slows everything.
"""

from __future__ import annotations

import os

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = (
    "0"  # before ray is imported: a loopback-only local cluster
)
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import yaml  # noqa: E402
from bench_episodes_per_hour import run_measured  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def write_spec(path: Path, attempts: int, per_shard: int, horizon: int = 400) -> Path:
    data = yaml.safe_load((REPO / "scene_specs" / "lift.yaml").read_text())
    data["seed_demos"] = [str((REPO / "scene_specs" / p).resolve()) for p in data["seed_demos"]]
    data["name"] = "bench_scaling"
    data["task"]["horizon"] = horizon
    data["generation"].update(attempts=attempts, attempts_per_shard=per_shard)
    data["cameras"] = []
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run_loop(spec_path: Path, out: Path) -> tuple[float, float]:
    """Every shard with ShardWorker.run_shard in this process, timed from spec resolution to stats;
    (wall seconds, CPU seconds of this process)."""
    from demofactory.build.pipeline import ShardWorker
    from demofactory.build.records import plan_shards
    from demofactory.build.run import DatasetRecorder, dataset_info
    from demofactory.seeds.resolve import resolve_spec
    from demofactory.shards import save_dataset_info
    from demofactory.specs.spec import load_spec

    start, cpu = time.perf_counter(), time.process_time()
    resolved = resolve_spec(load_spec(spec_path))
    worker = ShardWorker(resolved.spec, resolved.demos, resolved.scene)
    out.mkdir(parents=True)
    save_dataset_info(out, dataset_info(resolved.spec, resolved.scene.state_size))
    recorder = DatasetRecorder(out, {})
    for task in plan_shards(resolved.spec):
        recorder.record(worker.run_shard(task, out))
    recorder.commit()
    recorder.finish(time.perf_counter() - start)
    return time.perf_counter() - start, time.process_time() - cpu


def run_cli(spec_path: Path, out: Path, workers: int) -> tuple[float, float]:
    """`factory run`; (wall seconds, CPU seconds of it and every process under it)."""
    return run_measured(
        [
            str(Path(sys.executable).parent / "factory"),
            "run",
            str(spec_path),
            "--out",
            str(out),
            "--workers",
            str(workers),
            "--no-progress",
        ]
    )


def run_in_cluster(resolved, out: Path, workers: int) -> dict:
    """run_shards on the connected cluster, as run_dataset does: wall and steady-state seconds."""
    from demofactory.build.records import plan_shards
    from demofactory.build.run import DatasetRecorder, dataset_info
    from demofactory.build.worker_factory import ShardWorkerFactory
    from demofactory.cluster.runner import ClusterConfig, run_shards
    from demofactory.shards import save_dataset_info

    out.mkdir(parents=True)
    save_dataset_info(out, dataset_info(resolved.spec, resolved.scene.state_size))
    recorder = DatasetRecorder(out, {})
    times = {"ready": None, "last": None}

    def on_workers(alive: int) -> None:
        if alive and times["ready"] is None:
            times["ready"] = time.perf_counter()

    def on_result(result) -> None:
        recorder.record(result)
        times["last"] = time.perf_counter()

    tasks = plan_shards(resolved.spec)
    start, cpu = time.perf_counter(), time.process_time()
    run_shards(
        ShardWorkerFactory(resolved.spec),
        resolved.demos,
        tasks,
        out,
        ClusterConfig(workers=workers),
        on_result=on_result,
        on_workers=on_workers,
    )
    recorder.commit()
    driver_cpu_s = time.process_time() - cpu  # every thread of this process: Ray's included
    recorder.finish(time.perf_counter() - start)
    return {
        "wall_s": times["last"] - start,
        "steady_s": times["last"] - times["ready"],
        "driver_cpu_ms_per_shard": 1000 * driver_cpu_s / len(tasks),
    }


def summary(out: Path) -> dict:
    from demofactory.build.report import summarize

    report = summarize(out)
    generation = json.loads((out / "generation.json").read_text())
    report["shard_work_s"] = sum(s["wall_s"] for s in generation["shards"].values())
    return report


def commit_time_at(shards: int, spec_path: Path, dataset: Path, out: Path) -> float:
    """One commit of a dataset of `shards` shards, built from `dataset`'s results, new names."""
    from demofactory.build.records import ShardTask, plan_shards
    from demofactory.build.run import DatasetRecorder, finished_results
    from demofactory.specs.spec import load_spec

    real = list(finished_results(dataset, plan_shards(load_spec(spec_path))).values())
    results = []
    for i in range(shards):
        r = real[i % len(real)]
        task = ShardTask(
            i, tuple(range(i * len(r.task.attempt_ids), (i + 1) * len(r.task.attempt_ids)))
        )
        info = dataclasses.replace(r.info, name=task.name)
        results.append(dataclasses.replace(r, task=task, info=info))
    out.mkdir(parents=True)
    big = DatasetRecorder(out, {r.task.name: r for r in results[:-1]})
    start = time.perf_counter()
    big.record(results[-1])  # the first record of a recorder commits at once
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--attempts", type=int, default=100, help="for the overhead runs (loop, CLI)"
    )
    parser.add_argument("--rounds", type=int, default=2, help="loop/CLI pairs, interleaved")
    parser.add_argument(
        "--scaling-attempts", type=int, default=40, help="for the 1- and 2-worker runs"
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the datasets written (printed as `out`)"
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_scaling_"))
    spec_path = write_spec(work / "lift_overhead.yaml", args.attempts, 2)
    scaling_spec = write_spec(work / "lift_scaling.yaml", args.scaling_attempts, 2)
    load_before = os.getloadavg()[0]

    rounds = []
    for r in range(
        args.rounds
    ):  # loop, CLI | CLI, loop | ...: a steady drift falls on both arms alike
        if r % 2 == 0:
            loop_s, loop_cpu = run_loop(spec_path, work / f"loop_{r}")
        cli_s, cli_cpu = run_cli(spec_path, work / f"cli_{r}", workers=1)
        if r % 2 == 1:
            loop_s, loop_cpu = run_loop(spec_path, work / f"loop_{r}")
        rounds.append(
            {
                "loop_s": loop_s,
                "cli_s": cli_s,
                "loop_cpu_s": loop_cpu,
                "cli_cpu_s": cli_cpu,
                "load_average": round(os.getloadavg()[0], 2),
            }
        )

    import ray
    from demofactory.seeds.resolve import resolve_spec
    from demofactory.specs.spec import load_spec

    resolved = resolve_spec(load_spec(scaling_spec))
    # Near-empty shards (horizon 2: one 2-step attempt each): the driver's own cost per shard.
    empty = resolve_spec(load_spec(write_spec(work / "lift_empty.yaml", 300, 1, horizon=2)))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    try:
        w1 = run_in_cluster(resolved, work / "workers_1", 1)
        w2 = run_in_cluster(resolved, work / "workers_2", 2)
        bound = run_in_cluster(empty, work / "empty_shards", 2)
    finally:
        ray.shutdown()

    loops = [summary(work / f"loop_{r}") for r in range(args.rounds)]
    clis = [summary(work / f"cli_{r}") for r in range(args.rounds)]
    r1, r2 = summary(work / "workers_1"), summary(work / "workers_2")
    pairs = [
        (work / "loop_0", work / f"{arm}_{r}", "overhead")
        for r in range(args.rounds)
        for arm in ("loop", "cli")
    ]
    for a, b, what in [*pairs, (work / "workers_1", work / "workers_2", "scaling")]:
        same = (a / "manifest.json").read_text() == (b / "manifest.json").read_text()
        assert same, f"the {what} runs must write the same shards"
    loop = loops[0]
    episodes, steps = loop["episodes"], loop["steps"]
    total = {
        key: sum(r[key] for r in rounds) for key in ("loop_s", "cli_s", "loop_cpu_s", "cli_cpu_s")
    }
    per_min = lambda n, seconds, cores=1: round(n * 60.0 / seconds / cores, 2)  # noqa: E731
    report = {
        "benchmark": "scaling",
        "spec": "scene_specs/lift.yaml, cameras: [], horizon 400, 2 attempts a shard",
        "cpus": os.cpu_count(),
        "load_average_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "overhead": {
            "attempts": args.attempts,
            "rounds": args.rounds,
            "episodes": episodes,
            "success_rate": loop["success_rate"],
            "episodes_per_core_minute": {
                "loop": per_min(episodes * args.rounds, total["loop_s"]),
                "cli_1_worker": per_min(episodes * args.rounds, total["cli_s"]),
            },
            "overhead_ratio": round(total["loop_s"] / total["cli_s"], 3),
            "cpu_ratio": round(total["loop_cpu_s"] / total["cli_cpu_s"], 3),
            "per_round": [
                {
                    **{k: round(v, 2) for k, v in r.items()},
                    "ratio": round(r["loop_s"] / r["cli_s"], 3),
                }
                for r in rounds
            ],
            "ray_fixed_s_per_run": round((total["cli_s"] - total["loop_s"]) / args.rounds, 2),
            "overhead_in_actor": round(
                sum(x["shard_work_s"] for x in loops) / sum(x["shard_work_s"] for x in clis), 3
            ),
        },
        "scaling": {
            "attempts": args.scaling_attempts,
            "episodes": r1["episodes"],
            "workers_1": {k: round(v, 2) for k, v in w1.items()},
            "workers_2": {k: round(v, 2) for k, v in w2.items()},
            "episodes_per_core_minute": {
                "workers_1": per_min(r1["episodes"], w1["steady_s"]),
                "workers_2": per_min(r2["episodes"], w2["steady_s"], cores=2),
            },
            "scaling_2_vs_1": round(w1["steady_s"] / w2["steady_s"], 3),
            "scaling_2_vs_1_wall": round(w1["wall_s"] / w2["wall_s"], 3),
        },
        "bytes_per_episode": round(loop["bytes"] / episodes),
        "bytes_per_step": round(loop["bytes"] / steps),
        "steps_per_episode": round(steps / episodes, 1),
        "driver": {
            "empty_shards_per_s_2_workers": round(300 / bound["steady_s"], 1),
            "cpu_ms_per_empty_shard": round(bound["driver_cpu_ms_per_shard"], 2),
            "commit_s_at_10000_shards": round(
                commit_time_at(10_000, spec_path, work / "loop_0", work / "commit"), 3
            ),
        },
    }
    if args.keep:
        report["out"] = str(work)
    else:
        shutil.rmtree(work)
    print(json.dumps(report))


if __name__ == "__main__":
    from demofactory.robots import repairs as robot_repairs

    robot_repairs.install()  # before any env is built, as the CLI does
    from _common import run  # benchmarks/_common.py: --json-out PATH

    run(main)
