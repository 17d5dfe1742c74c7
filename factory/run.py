"""`factory run`: the driver side of a dataset build, with resume.

    check the output directory ──► start the cluster (its actors build their envs) while this
    process resolves the spec and loads the seed demos (nothing written before both succeed)
    ──► lock DIR/.lock (one driver per directory) ──► dataset_info.json
    ──► skip shards already in the manifest with a matching checksum
    ──► ShardCluster.run ──► per finished shard: generation.json, then manifest.json (commit point;
        commits are spaced once they get expensive, see DatasetRecorder)
    ──► episodes.jsonl, stats.json

A failed write (disk full, read-only) is one line naming the file and the errno text;
shards already listed stay listed, and re-running the same command resumes.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import platform
import socket
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from factory.adapters import texture_bank_params
from factory.errors import DatasetWriteError, SpecError, UserError
from factory.output_dir import (
    GENERATION_FILENAME,
    LOCK_FILENAME,
    SEEDS_SOURCE,
    check_output_dir,
    clear_dataset,
    load_generation,
    refuse_shrinking,
    repair_records,
    require_dataset_info,
    shard_prefix,
    shards_dropped,
    task_named,
)
from factory.pipeline import ShardResult, ShardTask, plan_shards, result_from_json
from factory.progress import ProgressState, RunProgress
from factory.resolve import Resolved, resolve_spec
from factory.sim import ACTION_LAYOUT, PROPRIO_LAYOUT
from factory.spec import SceneSpec
from factory.worker_factory import ShardWorkerFactory
from generators.texture_bank import ensure_texture_bank
from shards import (
    DatasetError,
    Manifest,
    compute_stats,
    load_manifest,
    save_dataset_info,
    save_episodes,
    save_manifest,
    save_stats,
    shards_dir,
    verify_shard,
)
from shards.format import (
    EPISODES_FILENAME,
    MANIFEST_FILENAME,
    STATS_FILENAME,
    dumps_json,
    write_text_atomic,
)
from shards.metadata import camera_entry
from shards.stats import sidecar_path

if (
    TYPE_CHECKING
):  # ray is imported by the commands that start a cluster, not by every user of this module
    from cluster.runner import ClusterConfig, ShardCluster

GPUS_ENV = "DEMOFACTORY_GPUS_PER_WORKER"


def dataset_info(spec: SceneSpec, state_size: int) -> dict:
    """The dataset card: layout, cameras, versions and the spec itself."""
    versions = {
        pkg: _version(pkg)
        for pkg in ("demofactory", "robosuite", "mujoco", "numpy", "ray", "webdataset")
    }
    versions["python"] = platform.python_version()
    return {
        "name": spec.name,
        "fps": spec.task.control_freq,
        "env": spec.task.env,
        "robot": spec.task.robot,
        "cameras": [
            camera_entry(c.name, c.width, c.height, c.depth, c.segmentation, list(spec.objects))
            for c in spec.cameras
        ],
        "state": {
            "dim": sum(n for _, n in PROPRIO_LAYOUT),
            "layout": [[k, n] for k, n in PROPRIO_LAYOUT],
        },
        "action": {
            "dim": sum(n for _, n in ACTION_LAYOUT),
            "layout": [[k, n] for k, n in ACTION_LAYOUT],
            "controller": spec.task.controller,
            "range": [-1.0, 1.0],
        },
        "sim_state": {"dim": state_size, "layout": "time, qpos, qvel (MuJoCo, flattened)"},
        "instructions": list(spec.instructions),
        "sample_keys": [
            "<camera>.jpg",
            "<camera>_depth.png (cameras with depth)",
            "<camera>_seg.png (cameras with segmentation)",
            "action.npy",
            "state.npy",
            "sim_state.npy",
            "meta.json",
        ],
        "versions": versions,
        "spec_fingerprint": spec.fingerprint(),
        "spec": spec.model_dump(mode="json"),
    }


def _version(pkg: str) -> str:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return "unknown"


def finished_results(
    out_dir: Path, tasks: Sequence[ShardTask], verify: bool = True
) -> dict[str, ShardResult]:
    """Shards already done: in the manifest, checksum matching, same attempts as planned.

    verify=False skips the checksums (a quick look: what is left to do, at most).
    """
    listed, generation = load_manifest(out_dir).by_name(), load_generation(out_dir)
    done = {}
    for name, info in listed.items():  # not every planned task: a plan may hold millions
        task, entry = task_named(tasks, name), generation["shards"].get(name)
        if task is None or entry is None:
            continue
        planned = [task.attempt_ids[0], task.attempt_ids[-1] + 1]
        if entry.get("attempt_ids") == planned and (not verify or verify_shard(out_dir, info)):
            done[task.name] = result_from_json(task, info, entry)
    return done


class DatasetRecorder:
    """Driver-side bookkeeping: finished shards are entered in generation.json, then the manifest.

    A commit rewrites both files whole, so its cost grows with the dataset; commits are
    spaced to keep that under ~5% of the driver's time (every shard, until a commit takes
    longer than a few milliseconds). Shards finished but not yet committed when the driver
    dies are simply redone on resume.
    """

    COMMIT_COST_SHARE = 0.05  # at most this share of wall time spent rewriting generation/manifest

    def __init__(self, out_dir: Path, results: dict[str, ShardResult], clock=time.monotonic):
        self.out_dir, self.results, self._clock = out_dir, dict(results), clock
        self._extra = {k: v for k, v in load_generation(out_dir).items() if k != "shards"}
        self._pending, self._last_commit, self._commit_s = 0, float("-inf"), 0.0

    @property
    def manifest(self) -> Manifest:
        return Manifest(tuple(r.info for r in self.results.values()))

    def record(self, result: ShardResult) -> None:
        self.results[result.task.name] = result
        self._pending += 1
        self.maybe_commit()

    def maybe_commit(self) -> None:
        """Commit what is pending unless the last commit was too recent (see the class doc)."""
        if (
            self._pending
            and self._clock() - self._last_commit >= self._commit_s / self.COMMIT_COST_SHARE
        ):
            self.commit()

    def commit(self) -> None:
        """Write generation.json, then manifest.json (last: a shard counts only once listed
        there)."""
        if not self._pending:
            return
        start = self._clock()
        self._save_generation()
        self._save(MANIFEST_FILENAME, lambda: save_manifest(self.out_dir, self.manifest))
        self._pending, self._last_commit = 0, self._clock()
        self._commit_s = self._last_commit - start

    def _save_generation(self, wall_s: float | None = None) -> None:
        if wall_s is not None:
            self._extra["wall_s"] = round(self._extra.get("wall_s", 0.0) + wall_s, 3)
        data = {
            **self._extra,
            "shards": {name: r.to_json() for name, r in sorted(self.results.items())},
        }
        path = self.out_dir / GENERATION_FILENAME
        self._save(GENERATION_FILENAME, lambda: write_text_atomic(path, dumps_json(data, indent=2)))

    def _save(self, name: str, write) -> None:
        try:
            write()
        except OSError as err:
            text = f"[Errno {err.errno}] {err.strerror}" if err.errno else str(err)
            raise DatasetWriteError(
                f"{self.out_dir / name}: cannot write: {text}; "
                "shards listed in manifest.json are kept: "
                "fix this and run the same command again to resume"
            ) from None

    def prefix_for(self, target: int | None, tasks: list[ShardTask]) -> list[ShardTask] | None:
        """`shard_prefix` of the shards recorded so far."""
        return shard_prefix(self.results, target, tasks)

    def keep_only(self, kept: Sequence[ShardTask], held: set[str] = frozenset()) -> None:
        """Drop shards finished by this run past a "generate until N" prefix, from the records and
        the disk; shards in `held` (there before the run) stay."""
        names = {t.name for t in kept} | held
        self.discard([n for n in self.results if n not in names])

    def discard(self, names: Sequence[str]) -> None:
        """Unlist shards (manifest, then generation.json), then remove their files."""
        for name in names:
            self.results.pop(name, None)
        self._save(
            MANIFEST_FILENAME, lambda: save_manifest(self.out_dir, self.manifest)
        )  # unlisted first
        self._save_generation()
        for name in names:
            (shards_dir(self.out_dir) / name).unlink(missing_ok=True)
            sidecar_path(shards_dir(self.out_dir) / name).unlink(missing_ok=True)

    def finish(self, wall_s: float) -> None:
        """Write episodes.jsonl and stats.json from every finished shard."""
        self._save_generation(wall_s)
        self._save(MANIFEST_FILENAME, lambda: save_manifest(self.out_dir, self.manifest))
        self._pending = 0
        records = [e for r in self.results.values() for e in r.episodes]
        self._save(EPISODES_FILENAME, lambda: save_episodes(self.out_dir, records))
        # the workers' per-shard statistics, merged: one small file per shard (shards.stats)
        checksums = {info.name: info.sha256 for info in self.manifest.shards if info.samples > 0}
        extra = {"episodes": len(records), "transitions": sum(e.length for e in records)}
        if checksums:
            stats = compute_stats(self.out_dir, list(checksums), checksums=checksums)
            self._save(STATS_FILENAME, lambda: save_stats(self.out_dir, stats, extra))


def _remove_stale_temporaries(out_dir: Path) -> None:
    # A killed worker leaves its temporary shard behind; it never had a final name.
    for tmp in shards_dir(out_dir).glob(".shard-*.tmp-*"):
        tmp.unlink(missing_ok=True)


def lock_output_dir(out_dir: Path):
    """Lock DIR/.lock: one driver per dataset directory. Returns the open file; closing it unlocks.

    The kernel drops the lock when the process ends, however it ends (a SIGKILLed driver
    does not block its re-run).
    """
    path = out_dir / LOCK_FILENAME
    handle = open(path, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise UserError(
            f"{out_dir}: another `factory run` is writing this dataset ({holder}); "
            "wait for it or choose another --out"
        ) from None
    except OSError as err:  # a file system without locks (some NFS set-ups): run, but say so
        print(
            f"warning: {path}: cannot lock ({err.strerror}); make sure no other run writes here",
            file=sys.stderr,
        )
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
    handle.flush()
    return handle


def gpus_per_worker(spec: SceneSpec) -> float:
    """GPUs per Ray actor: $DEMOFACTORY_GPUS_PER_WORKER, else the spec's
    render.gpus_per_worker (0: CPU)."""
    text = os.environ.get(GPUS_ENV)
    if text is not None:
        try:
            value = float(text)
        except ValueError:
            raise UserError(
                f"${GPUS_ENV}: expected a number >= 0 (e.g. 1 or 0.25), got {text!r}"
            ) from None
        if not 0 <= value < float("inf"):  # NaN fails this too
            raise UserError(f"${GPUS_ENV}: expected a number >= 0 (e.g. 1 or 0.25), got {text!r}")
        return value
    return spec.render.gpus_per_worker


def run_dataset(
    spec: SceneSpec,
    out_dir: Path,
    workers: int | None,
    address: str | None,
    show_progress: bool = True,
    truncate: bool = False,
) -> None:
    """Build (or resume) the dataset of `spec` in `out_dir` on Ray.

    `workers` None: one per CPU of the cluster (the local one started, or the one at `address`).
    The cluster and its actors start while this process resolves the spec (builds the env,
    loads and annotates the seed demos): the two take seconds each, and overlap.
    A dataset never shrinks (fewer attempts, a lower --successes) nor changes kind (seed demos)
    unless `truncate`; what to do with `out_dir` is decided again under its lock.
    """
    from cluster.runner import ClusterConfig, ShardCluster

    resuming = check_output_dir(out_dir, spec, truncate)  # a first look, to refuse early
    tasks = plan_shards(spec)
    config = ClusterConfig(workers=workers, address=address, gpus_per_worker=gpus_per_worker(spec))
    left = _shards_left(out_dir, spec, tasks, truncate) if resuming else len(tasks)
    with (
        ThreadPoolExecutor(1, thread_name_prefix="resolve") as pool,
        contextlib.ExitStack() as stack,
    ):
        resolving = pool.submit(resolve_spec, spec)
        cluster = (
            stack.enter_context(
                ShardCluster(ShardWorkerFactory(spec), out_dir, config, max_workers=left)
            )
            if left
            else None
        )
        resolved = (
            resolving.result()
        )  # a bad spec raises here; the cluster goes, nothing was written
        if not resolved.demos:
            raise SpecError(spec.path, "seed_demos", "at least one seed demo is needed to generate")
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise UserError(f"{out_dir}: --out: cannot create ({err.strerror})") from None
        with lock_output_dir(out_dir):
            # Again, under the lock: another run may have written here since the first look.
            resuming = check_output_dir(out_dir, spec, truncate)
            _run_locked(
                resolved, tasks, out_dir, resuming, truncate, config, cluster, show_progress
            )


def _shards_left(
    out_dir: Path, spec: SceneSpec, tasks: Sequence[ShardTask], truncate: bool = False
) -> int:
    """A quick look (no checksums, no lock) at how many shards a resumed run has left: 0 starts
    no cluster.

    A run that would shrink the dataset is refused here already (and again under the lock).
    """
    target = spec.generation.target_successes
    try:
        done = finished_results(out_dir, tasks, verify=False)
        dropped = [] if truncate else shards_dropped(out_dir, tasks, done, target)
    except (DatasetError, UnicodeDecodeError):  # repaired under the lock; everything may be left
        return len(tasks)
    if dropped:
        refuse_shrinking(
            out_dir, spec, dropped, prefix_stops=shard_prefix(done, target, tasks) is not None
        )
    if shard_prefix(done, target, tasks) is not None:
        return 0
    return len(tasks) - len(done)


def _run_locked(
    resolved: Resolved,
    tasks: Sequence[ShardTask],
    out_dir: Path,
    resuming: bool,
    truncate: bool,
    config: ClusterConfig,
    cluster: ShardCluster | None,
    show_progress: bool,
) -> None:
    spec = resolved.spec
    target = spec.generation.target_successes
    if (
        resuming and require_dataset_info(out_dir).get("source") == SEEDS_SOURCE
    ):  # with --truncate only
        clear_dataset(out_dir)
        resuming = False
    if resuming:
        repair_records(out_dir, lambda line: print(f"warning: {line}", file=sys.stderr))
    done = finished_results(out_dir, tasks) if resuming else {}
    dropped = shards_dropped(out_dir, tasks, done, target) if resuming else []
    if dropped and not truncate:
        refuse_shrinking(
            out_dir, spec, dropped, prefix_stops=shard_prefix(done, target, tasks) is not None
        )
    shards_dir(out_dir).mkdir(exist_ok=True)
    _remove_stale_temporaries(out_dir)
    save_dataset_info(out_dir, dataset_info(spec, resolved.scene.state_size))
    bank = spec.appearance.textures.bank if spec.appearance.textures is not None else None
    if bank is not None:  # once per dataset, before any worker needs it; reused when complete
        params = texture_bank_params(bank)
        ensure_texture_bank(params, out_dir, spec_path=spec.path, progress=show_progress)
    # generation.adr: the physics ranges, widened by probes here, once per dataset (kept in
    # generation.json, which the recorder below carries on)
    from factory.adr import ensure_adr

    ensure_adr(
        resolved,
        out_dir,
        (lambda line: print(line, file=sys.stderr)) if show_progress else (lambda line: None),
    )
    recorder = DatasetRecorder(out_dir, done)
    if dropped:  # --truncate: unlisted first, then removed
        recorder.discard(dropped)
    held = set(recorder.results) if not truncate else set()  # never dropped by the prefix below
    left = len(tasks) - len(recorder.results)
    todo = (t for t in tasks if t.name not in recorder.results)  # lazily: a plan may hold millions
    if recorder.prefix_for(target, tasks) is not None:
        left = 0
    state = ProgressState(
        shards_total=len(tasks),
        attempts_total=spec.generation.attempts,
        target_successes=target,
        variants=spec.appearance.variants_per_trajectory,
    )
    start = time.perf_counter()
    with RunProgress(state, enabled=show_progress) as progress, contextlib.ExitStack() as stack:
        kept_before = list(recorder.results.values())  # what is left of `done` after --truncate
        progress.resumed(
            len(kept_before),
            sum(r.attempts for r in kept_before),
            sum(r.successes for r in kept_before),
        )

        def on_result(result: ShardResult) -> None:
            recorder.record(result)
            progress.shard_done(result)

        def should_stop() -> bool:  # asked between shards, a few times a second
            recorder.maybe_commit()  # a deferred commit does not wait for the next shard
            return recorder.prefix_for(target, tasks) is not None

        if left and cluster is None:  # the quick look missed a damaged shard
            from cluster.runner import ShardCluster

            workers = ShardWorkerFactory(spec)
            cluster = stack.enter_context(ShardCluster(workers, out_dir, config, max_workers=left))
        try:
            if left:
                cluster.run(
                    resolved.demos,
                    todo,
                    on_result,
                    on_attempt=progress.attempt,
                    should_stop=should_stop,
                    on_workers=progress.workers,
                    on_warning=progress.warn,
                )
        except BaseException:
            with contextlib.suppress(DatasetWriteError):  # the first error is the one to report
                recorder.commit()  # shards that finished before the error (or Ctrl-C) stay listed
            raise
        recorder.commit()
    kept = recorder.prefix_for(target, tasks)
    if kept is not None:
        recorder.keep_only(kept, held)
    _remove_stale_temporaries(out_dir)  # left by workers killed during this run
    recorder.finish(time.perf_counter() - start)
