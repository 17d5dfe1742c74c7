"""Rendered successful Stack episodes per core-hour, end to end, against NVlabs' MimicGen.

Prints one JSON object.

    .venv/bin/python benchmarks/bench_episodes_per_hour.py [--attempts 10]
        [--spec scene_specs/stack.yaml]

Runs `factory run SPEC --workers 1` (the CLI in a subprocess: its own local Ray
cluster, spec resolution and demo annotation, generation, rendering of the
successes at the spec's cameras (Stack: agentview and robot0_eye_in_hand, 84x84),
shard writing, stats) into a temporary folder, and counts the rendered successful
episodes it wrote. Three ways to count core-hours:

- `cpu`: CPU time (user + system, all threads) of the command and every process under
  it (driver, Ray's GCS and raylet, the worker actor), sampled from /proc twice a second:
  the cores the run really used, whatever else the machine runs;
- `end_to_end`: one core for the command's whole wall time (start-up included);
- `in_worker`: one core for the worker's shard time (generation.json's per-shard wall_s:
  generate + render + write), i.e. the steady state of a long run.

`cpu_s_by_process` splits the `cpu` seconds by process name (from /proc/<pid>/cmdline): the
driver (`factory`), the worker (`ray::_ShardActor`), Ray's `gcs_server`, `raylet`, dashboard
and agents.

On a shared machine the wall-clock figures suffer twice: other jobs take the cores, and
Ray runs its workers at nice 15 (Ray's default worker niceness), below them.

The reference is MimicGen (NVlabs/mimicgen) generating Stack from the same human
demo with the same two 84x84 cameras, measured on this kind of machine: 65 % success
over 20 attempts at 120 s an attempt = 184 s per rendered success = 19.6 rendered
successes per core-hour (figure from the project's issue 4). `ratio` = ours / that.
Small runs are noisy (success is a coin flip per attempt), and a busy machine slows
everything: see `load_average`.

`--detail auto` (or a face budget) runs the spec twice in one invocation, as it is
(`render.detail: full`) and with `render.detail` set, full first then the other, each in
its own temporary folder, the decimation cache empty (`DEMOFACTORY_CACHE` in a temporary
folder: the decimation is paid inside the run). The JSON then holds both runs and
`detail_ratio` = the detailed run's rendered successes per core-hour / the full run's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TICKS = os.sysconf("SC_CLK_TCK")
MIMICGEN_STACK = {
    "rendered_successes_per_core_hour": 19.6,
    "success_rate": 0.65,
    "attempts": 20,
    "s_per_attempt": 120.0,
    "s_per_rendered_success": 184.0,
    "cameras": "agentview, robot0_eye_in_hand at 84x84",
    "source": "NVlabs MimicGen generating Stack from the same human demo, measured on this kind of "
    "machine (figure quoted in the project's issue 4)",
}


def run_factory(spec: Path, out: Path, attempts: int) -> tuple[float, float, dict[str, float]]:
    """`factory run` with one worker; returns its wall time, its processes' CPU time (seconds)
    and that CPU time by process name."""
    return run_measured_by_process(
        [
            str(Path(sys.executable).parent / "factory"),
            "run",
            str(spec),
            "--out",
            str(out),
            "--attempts",
            str(attempts),
            "--workers",
            "1",
            "--no-progress",
        ]
    )


def run_measured(command: list[str]) -> tuple[float, float]:
    """Run `command`; (wall seconds, CPU seconds of it and every process under it, sampled twice a
    second). Exits with the command's output tail if it fails."""
    wall, cpu, _ = run_measured_by_process(command)
    return wall, cpu


def run_measured_by_process(command: list[str]) -> tuple[float, float, dict[str, float]]:
    """`run_measured`, and the CPU seconds by process name (`_process_name`)."""
    start = time.perf_counter()
    cpu: dict[int, float] = {}  # pid -> CPU seconds, the latest sample
    names: dict[int, str] = {}
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(command, stdout=log, stderr=log, env=dict(os.environ))
        while process.poll() is None:
            sample_cpu(process.pid, cpu, names)
            time.sleep(0.5)
        wall = time.perf_counter() - start
        if process.returncode != 0:
            log.seek(0)
            sys.exit(
                f"{command[0]} failed ({process.returncode}):\n"
                f"{log.read()[-2000:].decode(errors='replace')}"
            )
    by_name: dict[str, float] = {}
    for pid, seconds in cpu.items():
        name = names.get(pid, "?")
        by_name[name] = round(by_name.get(name, 0.0) + seconds, 1)
    return wall, sum(cpu.values()), dict(sorted(by_name.items(), key=lambda kv: -kv[1]))


def sample_cpu(root: int, cpu: dict[int, float], names: dict[int, str] | None = None) -> None:
    """Record the CPU seconds of `root` and all its descendants (from /proc/<pid>/stat), and
    their names into `names`."""
    parents, times = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # the process ended meanwhile
            continue
        pid = int(entry)
        parents[pid] = int(fields[1])  # ppid (field 4 of stat)
        times[pid] = (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime (fields 14, 15)
    for pid, seconds in times.items():
        ancestor = pid
        while ancestor not in (root, 0, 1) and ancestor in parents:
            ancestor = parents[ancestor]
        if ancestor == root:
            cpu[pid] = max(cpu.get(pid, 0.0), seconds)
            if names is not None:
                names[pid] = _process_name(pid) or names.get(pid, "?")


def _process_name(pid: int) -> str | None:
    """A process's name from its command line: Ray's title (`ray::_ShardActor`, set by Ray over
    the worker's argv), else the script a Python runs (`dashboard.py`), else the program."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().decode(errors="replace").split("\0")
    except OSError:  # the process ended meanwhile
        return None
    if not args or not args[0]:
        return None
    if args[0].startswith("ray::"):
        return args[0].split()[0].split(".")[0]
    program = os.path.basename(args[0].split()[0])
    if program.startswith("python"):
        script = next((a for a in args[1:] if a and not a.startswith("-")), None)
        if script:
            return os.path.basename(script)
    return program


def summarize(
    out: Path,
    wall_s: float,
    cpu_s: float,
    attempts: int,
    load_before: float,
    cpu_by_process: dict[str, float] | None = None,
) -> dict:
    generation = json.loads((out / "generation.json").read_text())["shards"]
    info = json.loads((out / "dataset_info.json").read_text())
    successes = sum(entry["successes"] for entry in generation.values())
    worker_s = sum(entry["wall_s"] for entry in generation.values())
    steps = sum(e["length"] for entry in generation.values() for e in entry["episodes"])
    reference = MIMICGEN_STACK["rendered_successes_per_core_hour"]
    per_hour = {
        "cpu": successes / (cpu_s / 3600),
        "end_to_end": successes / (wall_s / 3600),
        "in_worker": successes / (worker_s / 3600),
    }
    return {
        "benchmark": "episodes_per_hour",
        "spec": info["spec"]["name"],
        "cameras": [f"{c['name']} {c['width']}x{c['height']}" for c in info["cameras"]],
        "workers": 1,
        "attempts": attempts,
        "successes": successes,
        "success_rate": round(successes / attempts, 3),
        "frames_rendered": steps * len(info["cameras"]),
        "wall_s": round(wall_s, 1),
        "worker_s": round(worker_s, 1),
        "cpu_s": round(cpu_s, 1),
        "cpu_s_by_process": cpu_by_process or {},
        "s_per_rendered_success": {
            k: round(3600 / v, 1) if v else None for k, v in per_hour.items()
        },
        "rendered_successes_per_core_hour": {k: round(v, 1) for k, v in per_hour.items()},
        "ratio_vs_mimicgen": {k: round(v / reference, 2) for k, v in per_hour.items()},
        "reference": MIMICGEN_STACK,
        "load_average": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
        "cpus": os.cpu_count(),
    }


def spec_with_detail(spec: Path, detail: str, out: Path) -> Path:
    """`spec` with `render.detail` set, seed demos made absolute, written to `out`."""
    import yaml
    from demofactory.specs.spec import load_raw_spec

    raw = load_raw_spec(spec)
    raw["seed_demos"] = [str((spec.parent / p).resolve()) for p in raw["seed_demos"]]
    raw.setdefault("render", {})["detail"] = int(detail) if detail.isdigit() else detail
    out.write_text(yaml.safe_dump(raw, sort_keys=False))
    return out


def measure(spec: Path, tmp: Path, attempts: int) -> dict:
    load_before = os.getloadavg()[0]
    out = tmp / "stack"
    wall, cpu, by_process = run_factory(spec, out, attempts)
    return summarize(out, wall, cpu, attempts, load_before, by_process)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", type=Path, default=REPO / "scene_specs" / "stack.yaml")
    parser.add_argument("--attempts", type=int, default=10)
    parser.add_argument(
        "--detail", default=None, help="also run with render.detail set (auto, or faces)"
    )
    args = parser.parse_args()
    if args.detail is None:
        with tempfile.TemporaryDirectory(prefix="bench-eph-") as tmp:
            print(json.dumps(measure(args.spec, Path(tmp), args.attempts)))
        return
    runs = {}
    with tempfile.TemporaryDirectory(prefix="bench-eph-") as tmp:
        tmp = Path(tmp)
        detailed = spec_with_detail(args.spec, args.detail, tmp / "spec_detail.yaml")
        os.environ["DEMOFACTORY_CACHE"] = str(tmp / "cache")  # cold: decimation paid in the run
        for name, spec in (("full", args.spec), (args.detail, detailed)):
            (tmp / name).mkdir()
            runs[name] = measure(spec, tmp / name, args.attempts)
    full, other = runs["full"], runs[args.detail]
    print(
        json.dumps(
            {
                "benchmark": "episodes_per_hour_detail",
                "detail": args.detail,
                "runs": runs,
                "detail_ratio": {
                    k: round(v / full["rendered_successes_per_core_hour"][k], 2)
                    if full["rendered_successes_per_core_hour"][k]
                    else None
                    for k, v in other["rendered_successes_per_core_hour"].items()
                },
            }
        )
    )


if __name__ == "__main__":
    from _common import run  # benchmarks/_common.py: --json-out PATH

    run(main)
