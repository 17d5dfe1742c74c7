"""`factory run`: the driver side of a dataset build, with resume.

    check the output directory ──► start the cluster (its actors build their envs) while this
    process resolves the spec and loads the seed demos (nothing written before both succeed)
    ──► lock DIR/.lock (one driver per directory) ──► dataset_info.json
    ──► skip shards already in the manifest with a matching checksum
    ──► ShardCluster.run ──► per finished shard: a line appended to journal.jsonl (the commit
        point; demofactory.build.recorder), its statistics merged from its sidecar
    ──► generation.json, episodes.jsonl, manifest.json (the journal folded in), stats.json

A failed write (disk full, read-only) is one line naming the file and the errno text;
shards already listed stay listed, and re-running the same command resumes.
"""

from __future__ import annotations

import contextlib
import os
import platform
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from demofactory.build.output_dir import (
    SEEDS_SOURCE,
    check_output_dir,
    clear_dataset,
    load_generation,
    lock_output_dir,
    refuse_shrinking,
    repair_records,
    require_dataset_info,
    shard_prefix,
    shards_dropped,
    task_named,
)
from demofactory.build.progress import ProgressState, RunProgress
from demofactory.build.recorder import DatasetRecorder
from demofactory.build.records import ShardResult, ShardTask, plan_shards, result_from_json
from demofactory.build.worker_factory import ShardWorkerFactory
from demofactory.errors import USER_FACING_ERRORS, DatasetWriteError, SpecError, UserError
from demofactory.generators.texture_bank import ensure_texture_bank
from demofactory.seeds.resolve import Resolved, resolve_spec
from demofactory.shards import (
    DatasetError,
    ShardInfo,
    load_manifest,
    save_dataset_info,
    shards_dir,
    verify_shard,
)
from demofactory.shards.metadata import camera_entry
from demofactory.shards.store import is_remote
from demofactory.simulation.scene import ACTION_LAYOUT
from demofactory.specs.adapters import texture_bank_params
from demofactory.specs.spec import SceneSpec

# ray is imported by the commands that start a cluster, not by every user of this module
if TYPE_CHECKING:
    from demofactory.build.stored_run import StoredDataset
    from demofactory.cluster.runner import ClusterConfig, ShardCluster

GPUS_ENV = "DEMOFACTORY_GPUS_PER_WORKER"


def dataset_info(
    spec: SceneSpec, state_size: int, resolved_robots: Mapping[str, Resolved] | None = None
) -> dict:
    """The dataset card: layout, cameras, versions and the spec itself.

    `embodiments`: per robot its state and action layout (demofactory.robots.embodiments); a
    mixed-robot
    dataset's `robot` is its robots joined by "+", its state the widest robot's, zero-padded.
    `resolved_robots`: each robot, resolved (its MuJoCo state size, its gripper's closing sign);
    None: `state_size` for task.robot, closing on +1."""
    from demofactory.robots.embodiments import (
        embodiments_info,
        robot_shares,
        state_layout,
        state_width,
    )

    robots = [r for r, _ in robot_shares(spec.task)]
    if resolved_robots:
        sizes = {r: x.scene.state_size for r, x in resolved_robots.items()}
        signs = {r: x.scene.gripper_sign for r, x in resolved_robots.items()}
    else:
        sizes, signs = {spec.task.robot: state_size}, {}
    width = state_width(spec)
    layout = (
        state_layout(robots[0])
        if len(robots) == 1
        else [["eef_pos", 3], ["eef_quat_xyzw", 4], ["gripper_qpos", width - 7]]
    )
    action_layout = [[k, n] for k, n in ACTION_LAYOUT]
    if spec.task.two_arm is not None:  # per arm, right first (demofactory.simulation.bimanual)
        from demofactory.simulation.bimanual import two_arm_layouts

        # each arm's gripper part, if its robot has a gripper (TwoArmPegInHole's have none)
        layout, action_layout = two_arm_layouts(spec.task)
        width = sum(n for _, n in layout)
    versions = {
        pkg: _version(pkg)
        for pkg in ("demofactory", "robosuite", "mujoco", "numpy", "ray", "webdataset")
    }
    versions["python"] = platform.python_version()
    return {
        "name": spec.name,
        "fps": spec.task.control_freq,
        "env": spec.task.env,
        "robot": "+".join(robots),
        "embodiments": _arm_embodiments(spec, embodiments_info(spec, sizes, signs), layout),
        "cameras": [
            camera_entry(c.name, c.width, c.height, c.depth, c.segmentation, list(spec.objects))
            for c in spec.cameras
        ],
        "state": {"dim": width, "layout": layout},
        "action": {
            "dim": sum(n for _, n in action_layout),
            "layout": action_layout,
            "controller": spec.task.controller,
            "range": [-1.0, 1.0],
        },
        "sim_state": {"dim": state_size, "layout": "time, qpos, qvel (MuJoCo, flattened)"},
        "instructions": list(spec.instructions),
        "shard_layout": spec.output.shard_layout,  # demofactory.shards.shard_layout
        "sample_keys": (
            [
                "<camera>.jpg",
                "<camera>_depth.png (cameras with depth)",
                "<camera>_seg.png (cameras with segmentation)",
                "action.npy",
                "state.npy",
                "sim_state.npy",
                "meta.json",
            ]
            if spec.output.shard_layout == "step"
            else [
                "t<step>.<camera>.jpg",
                "t<step>.<camera>_depth.png (cameras with depth)",
                "t<step>.<camera>_seg.png (cameras with segmentation)",
                "action.npy [T, A]",
                "state.npy [T, S]",
                "sim_state.npy [T, N]",
                "episode.json",
            ]
        ),
        "versions": versions,
        "backend": backend_info(spec),  # resuming with the other backend is refused
        "spec_fingerprint": spec.fingerprint(),
        "spec": spec.model_dump(mode="json"),
    }


def backend_info(spec: SceneSpec) -> dict:
    """{name, and for mjwarp the versions of MuJoCo Warp and warp}: what made the physics."""
    if spec.generation.backend == "cpu":
        return {"name": "cpu"}
    from demofactory.simulation import mjwarp

    return {"name": spec.generation.backend, **mjwarp.versions()}


def refuse_unlanded_backend(spec: SceneSpec) -> None:
    """backend mjwarp: the extra must be installed (one line how), and the spec must be one the
    batched attempt loop runs (demofactory.build.batched.unsupported; else one line naming what
    and the fallback): a run that silently took the CPU path would record a backend that did
    not make it."""
    if spec.generation.backend != "mjwarp":
        return
    from demofactory.build.batched import unsupported
    from demofactory.simulation import mjwarp

    mjwarp.require_mjwarp(str(spec.path))
    why = unsupported(spec)
    if why is not None:
        raise SpecError(
            spec.path,
            "generation.backend",
            f"mjwarp does not batch {why} yet (docs/mjwarp.md); set generation.backend: cpu",
        )


def _arm_embodiments(spec: SceneSpec, info: dict, state_layout: list) -> dict:
    """`embodiments` with a two-arm spec's per-arm layouts (the one-arm spec's as they are)."""
    if spec.task.two_arm is None:
        return info
    from demofactory.simulation.bimanual import two_arm_layouts
    from demofactory.specs.arms import arm_names

    actions = two_arm_layouts(spec.task)[1]
    for entry in info.values():
        entry["state"] = {"dim": sum(n for _, n in state_layout), "layout": state_layout}
        entry["action"] = {
            **entry["action"],
            "dim": sum(n for _, n in actions),
            "layout": actions,
        }
        entry["arms"] = list(arm_names(spec.task))
        entry["env_configuration"] = spec.task.two_arm.configuration
    return info


def add_camera_mounts(info: dict, scene) -> dict:
    """`info` with each camera a robot of a two-arm scene carries marked `mount` (robot index,
    arm, whether on its wrist: `TwoArmScene.camera_mounts`), as `factory preview` labels it;
    a one-arm dataset's cameras as they were."""
    mounts = getattr(scene, "camera_mounts", None)
    if mounts is None:
        return info
    found = mounts([camera["name"] for camera in info["cameras"]])
    for camera in info["cameras"]:
        if camera["name"] in found:
            camera["mount"] = found[camera["name"]]
    return info


def _version(pkg: str) -> str:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return "unknown"


def finished_results(
    out_dir: Path,
    tasks: Sequence[ShardTask],
    verify: bool = True,
    shard_ok: Callable[[ShardInfo], bool] | None = None,
) -> dict[str, ShardResult]:
    """Shards already done: in the manifest, checksum matching, same attempts as planned.

    verify=False skips the checksums (a quick look: what is left to do, at most). `shard_ok`
    replaces the local checksum test (a stored dataset's: the store holds it at its size).
    """
    shard_ok = shard_ok or (lambda info: verify_shard(out_dir, info))
    listed, generation = load_manifest(out_dir).by_name(), load_generation(out_dir)
    done = {}
    for name, info in listed.items():  # not every planned task: a plan may hold millions
        task, entry = task_named(tasks, name), generation["shards"].get(name)
        if task is None or entry is None:
            continue
        planned = [task.attempt_ids[0], task.attempt_ids[-1] + 1]
        if entry.get("attempt_ids") == planned and (not verify or shard_ok(info)):
            done[task.name] = result_from_json(task, info, entry)
    return done


def cluster_size(spec: SceneSpec, left: int) -> int:
    """Actors worth starting: one per shard left, or (generation.rebalance, whose extra rounds
    are not known yet) as many as its extra attempts could fill."""
    rebalance = spec.generation.rebalance
    if rebalance is None:
        return left
    extra = rebalance.max_extra_attempts or spec.generation.attempts
    return max(left, -(-extra // spec.generation.attempts_per_shard), 1)


def kept_prefix(recorder: DatasetRecorder, target: int | None, tasks) -> bool:
    """Whether every planned shard runs (no --successes prefix cuts them): rebalance then."""
    return recorder.prefix_for(target, tasks) is None


def _rebalance(spec, tasks, recorder, out_dir, run):
    """generation.rebalance's rounds (demofactory.build.rebalance), each run as the planned shards
    were;
    the record goes into generation.json. Returns the plan with the extra shards."""
    from demofactory.build.rebalance import extend_plan

    base = tasks.base if hasattr(tasks, "base") else tasks
    while True:
        recorder.commit()  # the journal holds every shard so far: the next round follows
        tasks, record = extend_plan(spec, base, load_generation(out_dir))
        todo = [tasks[i] for i in range(len(base), len(tasks))]
        todo = [t for t in todo if t.name not in recorder.results]
        if not todo:
            recorder.set_extra("rebalance", record)
            return tasks
        run(todo)


def _remove_stale_temporaries(out_dir: Path) -> None:
    # A killed worker leaves its temporary shard behind; it never had a final name.
    for tmp in shards_dir(out_dir).glob(".shard-*.tmp-*"):
        tmp.unlink(missing_ok=True)


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
    out_dir: Path | str,
    workers: int | None,
    address: str | None,
    show_progress: bool = True,
    truncate: bool = False,
) -> Path:
    """Build (or resume) the dataset of `spec` in `out_dir` on Ray; returns the directory that
    holds it (for a store's URL, its local copy: demofactory.build.stored_run).

    `workers` None: one per CPU of the cluster (the local one started, or the one at `address`).
    The cluster and its actors start while this process resolves the spec (builds the env,
    loads and annotates the seed demos): the two take seconds each, and overlap.
    A dataset never shrinks (fewer attempts, a lower --successes) nor changes kind (seed demos)
    unless `truncate`; what to do with `out_dir` is decided again under its lock.
    """
    if not is_remote(str(out_dir)):
        return _run_dataset(spec, Path(out_dir), None, workers, address, show_progress, truncate)
    from demofactory.build.stored_run import StoredDataset

    # the store checked first (a wrong URL costs no work); its local copy locked, then pulled:
    # a second driver never overwrites the copy a first one is writing
    with StoredDataset(str(out_dir)) as stored:
        return _run_dataset(spec, stored.local, stored, workers, address, show_progress, truncate)


def _run_dataset(
    spec: SceneSpec,
    out_dir: Path,
    stored: StoredDataset | None,
    workers: int | None,
    address: str | None,
    show_progress: bool,
    truncate: bool,
) -> Path:
    from demofactory.cluster.runner import ClusterConfig, ShardCluster

    dest = stored.url if stored is not None else out_dir  # where workers put shards
    resuming = check_output_dir(out_dir, spec, truncate)  # a first look, to refuse early
    refuse_unlanded_backend(spec)
    tasks = planned_tasks(spec, out_dir if resuming and not truncate else None)
    config = ClusterConfig(
        workers=workers,
        address=address,
        gpus_per_worker=gpus_per_worker(spec),
        worker_env=stored.worker_env() if stored is not None else {},
        user_errors=USER_FACING_ERRORS,
        # backend mjwarp: batch actors generate the shards, the other workers render them
        batch_gpus=spec.generation.gpus_per_batch if spec.generation.backend == "mjwarp" else None,
        batch_workers=spec.generation.batch_workers,
    )
    left = _shards_left(out_dir, spec, tasks, truncate) if resuming else len(tasks)
    with (
        ThreadPoolExecutor(1, thread_name_prefix="resolve") as pool,
        contextlib.ExitStack() as stack,
    ):
        resolving = pool.submit(resolve_spec, spec)
        cluster = (
            stack.enter_context(
                ShardCluster(
                    ShardWorkerFactory(spec), dest, config, max_workers=cluster_size(spec, left)
                )
            )
            if left
            else None
        )
        # a bad spec raises here; the cluster goes, nothing was written
        resolved = resolving.result()
        if not resolved.demos:
            raise SpecError(spec.path, "seed_demos", "at least one seed demo is needed to generate")
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise UserError(f"{out_dir}: --out: cannot create ({err.strerror})") from None
        with lock_output_dir(out_dir) if stored is None else contextlib.nullcontext():
            # Again, under the lock: another run may have written here since the first look.
            resuming = check_output_dir(out_dir, spec, truncate)
            _run_locked(
                resolved, tasks, out_dir, resuming, truncate, config, cluster, show_progress, stored
            )
    return out_dir


def planned_tasks(spec: SceneSpec, out_dir: Path | None) -> Sequence[ShardTask]:
    """The spec's shards, then (generation.rebalance) the extra rounds the shards recorded in
    `out_dir` already decide (demofactory.build.rebalance: each round follows from the ones before).
    None (a new dataset, or --truncate: the extra shards are dropped and their rounds redone
    from what stays): the spec's shards only."""
    tasks = plan_shards(spec)
    if spec.generation.rebalance is None or out_dir is None:
        return tasks
    from demofactory.build.rebalance import extend_plan

    generation = load_generation(out_dir)
    before = generation.get("rebalance", {}).get("planned_attempts")
    if before is not None and before != spec.generation.attempts:
        # the extra shards follow the planned ones: more planned shards would take their places
        raise UserError(
            f"{out_dir}: generation.attempts: the dataset was rebalanced after {before} planned "
            f"attempts, got {spec.generation.attempts}; expected {before} (or --truncate to "
            "start over)"
        )
    return extend_plan(spec, tasks, generation)[0]


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
    stored: StoredDataset | None = None,
) -> None:
    spec = resolved.spec
    shard_ok = stored.shard_stored if stored is not None else None
    sync = stored.sync if stored is not None else (lambda now=True: None)
    target = spec.generation.target_successes
    # with --truncate only
    if resuming and require_dataset_info(out_dir).get("source") == SEEDS_SOURCE:
        clear_dataset(out_dir)
        resuming = False
    if resuming:
        repair_records(out_dir, lambda line: print(f"warning: {line}", file=sys.stderr))
    done = finished_results(out_dir, tasks, shard_ok=shard_ok) if resuming else {}
    dropped = shards_dropped(out_dir, tasks, done, target) if resuming else []
    if dropped and not truncate:
        refuse_shrinking(
            out_dir, spec, dropped, prefix_stops=shard_prefix(done, target, tasks) is not None
        )
    shards_dir(out_dir).mkdir(exist_ok=True)
    _remove_stale_temporaries(out_dir)
    robots = resolved.robots or {spec.task.robot: resolved}  # each robot's state size and sign
    info = dataset_info(spec, resolved.scene.state_size, robots)
    save_dataset_info(out_dir, add_camera_mounts(info, resolved.scene))
    bank = spec.appearance.textures.bank if spec.appearance.textures is not None else None
    if bank is not None:  # once per dataset, before any worker needs it; reused when complete
        params = texture_bank_params(bank)
        ensure_texture_bank(params, out_dir, spec_path=spec.path, progress=show_progress)
    # generation.adr: the physics ranges, widened by probes here, once per dataset (kept in
    # generation.json, which the recorder below carries on)
    from demofactory.robustness.adr import ensure_adr

    ensure_adr(
        resolved,
        out_dir,
        (lambda line: print(line, file=sys.stderr)) if show_progress else (lambda line: None),
    )
    recorder = DatasetRecorder(out_dir, done)
    if dropped:  # --truncate: unlisted first, then removed
        recorder.discard(dropped)
        if stored is not None:
            sync()
            stored.remove_shards(dropped)
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
            if stored is not None:  # the worker put it in the store; its statistics come here
                stored.fetch_sidecar(result.info)
            recorder.record(result)
            progress.shard_done(result)

        def should_stop() -> bool:  # asked between shards, a few times a second
            recorder.maybe_commit()  # a deferred commit does not wait for the next shard
            sync(now=False)  # a stored dataset: the commits so far, to the store
            return recorder.prefix_for(target, tasks) is not None

        rebalancing = spec.generation.rebalance is not None
        if (left or rebalancing) and cluster is None:  # the quick look missed a damaged shard
            # (or generation.rebalance may plan extra shards after the planned ones)
            from demofactory.cluster.runner import ShardCluster

            workers = ShardWorkerFactory(spec)
            dest = stored.url if stored is not None else out_dir
            cluster = stack.enter_context(
                ShardCluster(workers, dest, config, max_workers=cluster_size(spec, left))
            )
        sync()  # dataset_info, the texture bank, ADR: in the store before a worker needs them

        def run(todo) -> None:
            cluster.run(
                resolved.worker_demos,  # a mixed-robot spec's: every robot's
                todo,
                on_result,
                on_attempt=progress.attempt,
                should_stop=should_stop,
                on_workers=progress.workers,
                on_warning=progress.warn,
            )

        try:
            if left:
                run(todo)
            if rebalancing and kept_prefix(recorder, target, tasks):
                tasks = _rebalance(spec, tasks, recorder, out_dir, run)
        except BaseException:
            with contextlib.suppress(DatasetWriteError, DatasetError):  # the first error is
                recorder.commit()  # reported; shards finished before it (or Ctrl-C) stay listed
                sync()
            raise
        recorder.commit()
    kept = recorder.prefix_for(target, tasks)
    if kept is not None:
        before = set(recorder.results)
        recorder.keep_only(kept, held)
        if stored is not None:  # unlisted in the store first, then its objects removed
            sync()
            stored.remove_shards(before - set(recorder.results))
    _remove_stale_temporaries(out_dir)  # left by workers killed during this run
    recorder.finish(time.perf_counter() - start)
    sync()
