"""`factory run`: the driver side of a dataset build, with resume.

    check the output directory (nothing written before the spec fully resolves)
    ──► dataset_info.json ──► skip shards already in the manifest with a matching checksum
    ──► cluster.run_shards ──► per shard: generation.json, then manifest.json (commit point)
    ──► episodes.jsonl, stats.json
"""

from __future__ import annotations

import platform
import time
from importlib import metadata
from pathlib import Path

from factory.errors import UserError
from factory.pipeline import ShardResult, ShardTask, plan_shards, result_from_json
from factory.progress import AttemptProgress
from factory.resolve import Resolved
from factory.sim import ACTION_LAYOUT, PROPRIO_LAYOUT
from factory.spec import SceneSpec
from shards import (
    DatasetError,
    Manifest,
    compute_stats,
    load_dataset_info,
    load_manifest,
    save_dataset_info,
    save_episodes,
    save_manifest,
    save_stats,
    shards_dir,
    verify_shard,
)
from shards.format import dumps_json, read_json_file, write_text_atomic

GENERATION_FILENAME = "generation.json"


def check_output_dir(out_dir: Path, spec: SceneSpec) -> bool:
    """Refuse a directory holding anything but this spec's dataset; True when resuming."""
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"{out_dir}: output path exists and is not a directory")
    if not out_dir.exists() or not any(out_dir.iterdir()):
        return False
    try:
        info = load_dataset_info(out_dir)
    except DatasetError as err:
        raise UserError(f"{out_dir}: unreadable dataset_info.json ({err}); choose another --out") from None
    if info is None:
        raise UserError(f"{out_dir}: exists and is not a demofactory dataset (no dataset_info.json); choose another --out")
    if info.get("spec_fingerprint") != spec.fingerprint():
        name = info.get("spec", {}).get("name", "?")
        raise UserError(
            f"{out_dir}: holds a different dataset (spec {name!r}, fingerprint "
            f"{str(info.get('spec_fingerprint'))[:12]}; this spec: {spec.fingerprint()[:12]}); "
            "choose another --out or remove it"
        )
    return True


def dataset_info(spec: SceneSpec, state_size: int) -> dict:
    """The dataset card: layout, cameras, versions and the spec itself."""
    versions = {pkg: _version(pkg) for pkg in ("demofactory", "robosuite", "mujoco", "numpy", "ray", "webdataset")}
    versions["python"] = platform.python_version()
    return {
        "name": spec.name,
        "fps": spec.task.control_freq,
        "env": spec.task.env,
        "robot": spec.task.robot,
        "cameras": [{"name": c.name, "width": c.width, "height": c.height, "format": "jpg"} for c in spec.cameras],
        "state": {"dim": sum(n for _, n in PROPRIO_LAYOUT), "layout": [[k, n] for k, n in PROPRIO_LAYOUT]},
        "action": {"dim": sum(n for _, n in ACTION_LAYOUT), "layout": [[k, n] for k, n in ACTION_LAYOUT],
                   "controller": spec.task.controller, "range": [-1.0, 1.0]},
        "sim_state": {"dim": state_size, "layout": "time, qpos, qvel (MuJoCo, flattened)"},
        "instructions": list(spec.instructions),
        "sample_keys": ["<camera>.jpg", "action.npy", "state.npy", "sim_state.npy", "meta.json"],
        "versions": versions,
        "spec_fingerprint": spec.fingerprint(),
        "spec": spec.model_dump(mode="json"),
    }


def _version(pkg: str) -> str:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return "unknown"


def load_generation(out_dir: Path) -> dict:
    path = out_dir / GENERATION_FILENAME
    return read_json_file(path) if path.exists() else {"shards": {}}


def finished_results(out_dir: Path, tasks: list[ShardTask]) -> dict[str, ShardResult]:
    """Shards already done: in the manifest, checksum matching, same attempts as planned."""
    manifest, generation = load_manifest(out_dir), load_generation(out_dir)
    done = {}
    for task in tasks:
        info, entry = manifest.by_name().get(task.name), generation["shards"].get(task.name)
        if info is None or entry is None:
            continue
        planned = [task.attempt_ids[0], task.attempt_ids[-1] + 1]
        if entry.get("attempt_ids") == planned and verify_shard(out_dir, info):
            done[task.name] = result_from_json(task, info, entry)
    return done


class DatasetRecorder:
    """Driver-side bookkeeping: each finished shard is entered in generation.json, then the manifest."""

    def __init__(self, out_dir: Path, results: dict[str, ShardResult]):
        self.out_dir, self.results = out_dir, dict(results)
        self.manifest = Manifest(tuple(r.info for r in self.results.values()))

    def record(self, result: ShardResult) -> None:
        self.results[result.task.name] = result
        self._save_generation()
        self.manifest = self.manifest.with_shard(result.info)
        save_manifest(self.out_dir, self.manifest)  # last: a shard counts only once listed here

    def _save_generation(self, wall_s: float | None = None) -> None:
        data = load_generation(self.out_dir)
        data["shards"] = {name: r.to_json() for name, r in sorted(self.results.items())}
        if wall_s is not None:
            data["wall_s"] = round(data.get("wall_s", 0.0) + wall_s, 3)
        write_text_atomic(self.out_dir / GENERATION_FILENAME, dumps_json(data, indent=2))

    def prefix_for(self, target: int | None, tasks: list[ShardTask]) -> list[ShardTask] | None:
        """The shortest run of finished shards 0..j holding `target` successes, if there is one.

        Deciding by shard index, not by finishing order, keeps a "generate until N" dataset
        the same whatever the number of workers.
        """
        if target is None:
            return None
        total = 0
        for j, task in enumerate(tasks):
            if task.name not in self.results:
                return None
            total += self.results[task.name].successes
            if total >= target:
                return tasks[: j + 1]
        return None

    def keep_only(self, kept: list[ShardTask]) -> None:
        """Drop finished shards past a "generate until N" prefix, from the records and the disk."""
        names = {t.name for t in kept}
        for name in [n for n in self.results if n not in names]:
            del self.results[name]
            (shards_dir(self.out_dir) / name).unlink(missing_ok=True)
        self.manifest = Manifest(tuple(r.info for r in self.results.values()))
        save_manifest(self.out_dir, self.manifest)

    def finish(self, wall_s: float) -> None:
        """Write episodes.jsonl and stats.json from every finished shard."""
        self._save_generation(wall_s)
        save_manifest(self.out_dir, self.manifest)
        records = [e for r in self.results.values() for e in r.episodes]
        save_episodes(self.out_dir, records)
        names = [info.name for info in self.manifest.shards if info.samples > 0]
        extra = {"episodes": len(records), "transitions": sum(e.length for e in records)}
        if names:
            save_stats(self.out_dir, compute_stats(self.out_dir, names), extra)


def _remove_stale_temporaries(out_dir: Path) -> None:
    # A killed worker leaves its temporary shard behind; it never had a final name.
    for tmp in shards_dir(out_dir).glob(".shard-*.tmp-*"):
        tmp.unlink(missing_ok=True)


def run_dataset(resolved: Resolved, out_dir: Path, workers: int, address: str | None, show_progress: bool = True) -> None:
    """Build (or resume) the dataset of `resolved.spec` in `out_dir` on Ray."""
    from cluster.runner import ClusterConfig, run_shards

    spec = resolved.spec
    resuming = check_output_dir(out_dir, spec)
    tasks = plan_shards(spec)
    done = finished_results(out_dir, tasks) if resuming else {}
    out_dir.mkdir(parents=True, exist_ok=True)
    shards_dir(out_dir).mkdir(exist_ok=True)
    _remove_stale_temporaries(out_dir)
    save_dataset_info(out_dir, dataset_info(spec, resolved.scene.state_size))
    recorder = DatasetRecorder(out_dir, done)
    target = spec.generation.target_successes
    todo = [t for t in tasks if t.name not in done]
    if recorder.prefix_for(target, tasks) is not None:
        todo = []
    start = time.perf_counter()
    with AttemptProgress(total=spec.generation.attempts, enabled=show_progress) as progress:
        progress.advance_done(sum(r.attempts for r in done.values()), sum(r.successes for r in done.values()))
        config = ClusterConfig(workers=workers, address=address)
        run_shards(
            spec, resolved.demos, todo, out_dir, config, on_result=recorder.record, on_attempt=progress.attempt,
            should_stop=lambda: recorder.prefix_for(target, tasks) is not None,
        )
    kept = recorder.prefix_for(target, tasks)
    if kept is not None:
        recorder.keep_only(kept)
    recorder.finish(time.perf_counter() - start)



