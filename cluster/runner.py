"""Run shards on Ray: one actor per worker, each owning a runner (a robosuite env) for its lifetime.

    driver: connect, start actors (each calls make_worker(): ─┐ meanwhile: resolve the spec,
            builds its env from the spec)                     │ load the seed demos
            set_demos once, then queue of tasks ──► an idle actor: run_shard(task)
                ──► result (+ node) ──► on_result
    actors ──► progress actor, on the driver's node: (shard, success) per attempt ──► on_attempt

With a batch stage (ClusterConfig.batch_gpus: generation.backend mjwarp), the queue feeds batch
actors first, each on a CPU and a GPU share: generate(task) ──► the shard's attempts, left in
the object store ──► an idle actor: run_shard(task, attempts) renders and writes them. A batch
actor runs ahead of the render workers by at most as many shards as there are of them.

The cluster does not know what it runs: `demofactory.build.run` passes a `WorkerFactory` (a
picklable
callable that builds the factory's `ShardWorker` in the actor), and tasks and results are
records of the factory's, opaque here. Only small records cross the object store (the worker
factory and annotated demos once, then tasks, results, progress); each actor writes its shard
to the shared output directory itself. Ray appears nowhere outside `cluster/`: the actors call
the same `ShardWorker` that tests call directly.

Faults, and what happens:
  an actor dies mid-shard        its shard goes back to the front of the queue and a fresh
  (killed, OOM, node lost)       actor starts (where there is room); shards are deterministic,
                                 so the redo writes the same bytes. A shard whose worker died
                                 `max_shard_retries` times is an error (it crashes workers).
  a node joins                   without --workers, the pool grows by a worker a CPU it brings
                                 (checked every _GROW_EVERY_S while shards are queued).
  a batch actor dies mid-shard   its shard goes back to the front of the queue and a fresh
                                 batch actor starts; a render worker that dies holding a
                                 generated shard's attempts: the shard is rendered again
                                 from them (generated again only if they were lost too).
  an actor fails in __init__     an error at once: every worker would fail alike.
  a shard raises (e.g. the       no new shard starts; running ones finish and are recorded; then
  disk is full)                  the error (one line for an OSError).
  the driver dies                Ray ends its actors; a re-run resumes from the manifest.

Why one module: the fault table above is implemented by one scheduling loop and the actor
bookkeeping it mutates; splitting them would put a fault's detection and its handling in two
files.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import ray
from demofactory.cluster.address import START_HINT, TOKEN_HINT, first_line, probe_address
from demofactory.cluster.errors import ClusterAddressError, ClusterError, ShardWriteError
from demofactory.cluster.gpu import GPU_WAIT_ENV, apply_gpu_render_env, gpu_wait_s
from demofactory.cluster.reaper import children, release, watch_local_cluster
from ray.exceptions import AuthenticationError, ObjectLostError, RayActorError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

__all__ = [
    "ClusterConfig",
    "ClusterError",
    "ShardCluster",
    "ShardRunner",
    "ShardWriteError",
    "WorkerFactory",
    "run_shards",
]

# Environment the workers need; forwarded so that a remote cluster renders like the driver.
_FORWARDED_ENV = ("MUJOCO_GL", "PYOPENGL_PLATFORM", "MUJOCO_EGL_DEVICE_ID")
_POLL_S = 0.5  # how often the driver takes the attempts reported while shards run
_GROW_EVERY_S = 2.0  # how often an auto-sized pool looks for CPUs that joined the cluster

# Ray turns token authentication on for a new local cluster and says so in a warning line
# (above the progress bar, or beside a one-line error). It stays on; the line goes. Ray's
# warning that authentication is *off* is left alone.
logging.getLogger("ray._private.authentication.authentication_token_setup").addFilter(
    lambda record: not record.getMessage().startswith("Token authentication is enabled")
)


@dataclass(frozen=True)
class ClusterConfig:
    # actors, one CPU each; None: one per CPU the cluster has, growing as nodes join
    workers: int | None
    address: str | None = (
        None  # an existing cluster ("auto", "10.0.0.1:6379", ...); None: start one
    )
    max_shard_retries: int = 3  # times one shard may lose its worker before the run gives up
    gpus_per_worker: float = (
        0.0  # GPUs per actor (fractions share a GPU); > 0: MuJoCo renders with EGL on it
    )
    # environment variables set in every worker (Ray's runtime_env env_vars)
    worker_env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    user_errors: tuple[type, ...] = ()  # raised by a worker: reported as they are, one line
    # None: each worker generates the shards it renders. A number: a batch stage, whose
    # `batch_workers` actors generate whole shards (the runner's `generate`: MuJoCo Warp
    # batches) on this GPU share each (0, or a cluster without a GPU: warp's CPU device); the
    # workers above take each shard's attempts and render and write it
    batch_gpus: float | None = None
    batch_workers: int = 1


class ShardTask(Protocol):
    """A unit of work as the cluster sees it (the factory's `ShardTask`)."""

    index: int  # the shard's index
    name: str  # the shard's file name


class ShardRunner(Protocol):
    """What each actor holds for its lifetime and runs whole shards with (the factory's
    `ShardWorker`). Tasks and results are plain picklable records, opaque to the cluster
    but for `task.index` and the result's `node` field (a dataclass)."""

    demos: list

    def run_shard(self, task, out_dir: Path, on_attempt: Callable[[bool], None] | None = None):
        """Generate, render and write one shard to `out_dir`; returns its result record.
        With a batch stage it is called with `attempts=`, the shard's attempts `generate`
        made on a batch actor: only rendered and written here."""

    def generate(self, task) -> list:
        """A batch stage's half: the shard's attempts, not rendered (picklable records)."""


# Called once in each actor, after it chose its GPU: builds its runner. It crosses to the actor
# pickled, so it must not import the simulator at module level (a `functools.partial` of a
# function in a light module, or a small dataclass with `__call__`).
WorkerFactory = Callable[[], ShardRunner]


@dataclass(frozen=True)
class WorkerInfo:
    """Where an actor runs: Ray node id, process id, GPU ids Ray assigned."""

    node: str
    pid: int
    gpus: tuple[str, ...] = ()

    def describe(self, kind: str = "worker") -> str:
        return f"{kind} pid {self.pid} on node {self.node[:8]}"


def connect(config: ClusterConfig) -> subprocess.Popen | None:
    """Connect to Ray. Returns the reaper of the local cluster this call started (and so owns:
    it ends that cluster even if this process is SIGKILLed), None when joining one."""
    if ray.is_initialized():
        return None
    address = config.address or os.environ.get("RAY_ADDRESS")
    flag = "--address" if config.address else "$RAY_ADDRESS"
    if address:
        probe_address(address, flag)
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        if address:
            env_vars = {k: os.environ[k] for k in _FORWARDED_ENV if k in os.environ}
            env_vars |= dict(config.worker_env)
            runtime_env = {"env_vars": env_vars} if env_vars else None
            ray.init(
                address=address,
                runtime_env=runtime_env,
                log_to_driver=False,
                logging_level=logging.WARNING,
            )
            return None
        before = children(os.getpid())
        # --workers counts the render workers: a batch stage's actors take a CPU each more
        batch = config.batch_workers if config.batch_gpus is not None else 0
        _start_local(None if config.workers is None else config.workers + batch)
    except ConnectionError as err:
        raise ClusterAddressError(
            f"{flag} {address}: cannot connect to a Ray cluster ({first_line(err)}); {START_HINT}"
        ) from None
    except AuthenticationError:  # RAY_AUTH_MODE=token and no token (Ray's text: a paragraph)
        where = f"{flag} {address}" if address else "a local Ray cluster"
        raise ClusterAddressError(f"{where}: no Ray auth token to send; {TOKEN_HINT}") from None
    finally:
        # ray.init makes SIGTERM a bare sys.exit, which aborts the driver mid-teardown (exit 134);
        # the caller's handler (the CLI's: a clean "interrupted") stays in charge.
        if sigterm is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, sigterm)
    # gcs, raylet, ...
    started = {pid: t for pid, t in children(os.getpid()).items() if before.get(pid) != t}
    return watch_local_cluster(started)


# A local start-up that times out is tried again, this many times in all, after these pauses:
# on a loaded machine (load 5-7 on 2 cores) Ray's node start-up misses its own deadline about
# one time in ten, and the same command succeeds when run again.
START_TRIES, START_BACKOFF_S = 3, (2.0, 5.0)
_STARTUP_TIMEOUT = re.compile(r"timed out during startup|Timed out while waiting for", re.I)


def _start_local(workers: int | None) -> None:
    """ray.init of a local cluster, retried (START_TRIES) when Ray's start-up times out; then
    one ClusterError line. Every other error is raised as Ray raised it."""
    for attempt in range(START_TRIES):
        try:
            # No runtime_env: the local workers inherit this process's environment, and a job
            # with one starts each worker through the runtime-env agent (≈ 2 s more per actor).
            ray.init(
                num_cpus=workers,
                include_dashboard=False,
                # robosuite chatter in workers; errors still come back as exceptions
                log_to_driver=False,
                logging_level=logging.WARNING,  # no "Started a local Ray instance" lines
            )
            return
        except Exception as err:  # noqa: BLE001 - Ray raises a bare Exception for this one
            if not _STARTUP_TIMEOUT.search(str(err)) or isinstance(err, ConnectionError):
                raise
            ray.shutdown()  # the half-started node's processes, before the next try
            if attempt + 1 == START_TRIES:
                raise ClusterError(
                    f"a local Ray cluster did not start in {START_TRIES} tries "
                    f"({first_line(err)}); the machine is probably overloaded: run the same "
                    "command again when it is less busy, or pass --address of a running cluster"
                ) from None
            time.sleep(START_BACKOFF_S[min(attempt, len(START_BACKOFF_S) - 1)])


class _ShardActor:
    """The actor: picks its GPU (if any), then holds one runner for its lifetime.

    `make_worker` builds the runner (its env) without the seed demos, so that it can start while
    the driver is still loading them; `set_demos` hands them over before the first shard (an
    actor runs one caller's calls in the order they were made).
    """

    def __init__(self, make_worker: WorkerFactory):
        context = ray.get_runtime_context()
        self.info = WorkerInfo(
            context.get_node_id(), os.getpid(), tuple(str(g) for g in ray.get_gpu_ids())
        )
        apply_gpu_render_env(self.info.gpus)  # before this process creates its first renderer
        self.worker = make_worker()  # imports mujoco (and so fixes MUJOCO_GL) only now

    def describe(self) -> WorkerInfo:
        return self.info

    def set_demos(self, demos: Sequence) -> None:
        self.worker.demos = list(demos)

    def run_shard(self, task, out_dir: str, progress, attempts=None):
        extra = {} if attempts is None else {"attempts": attempts}  # made by a batch actor
        result = self.worker.run_shard(  # out_dir: a folder, or a store's URL
            task, out_dir, on_attempt=_Reporter(progress, task.index), **extra
        )
        return dataclasses.replace(result, node=self.info.node)


class _BatchActor(_ShardActor):
    """A batch stage's actor: generates whole shards' attempts on its device (warp's CUDA
    device when Ray gave it a GPU share and warp sees one, else warp's CPU device); renders
    nothing. Its GPU is not set up for EGL: it draws no frame."""

    def __init__(self, make_worker: WorkerFactory, on_gpu: bool):
        context = ray.get_runtime_context()
        self.info = WorkerInfo(
            context.get_node_id(), os.getpid(), tuple(str(g) for g in ray.get_gpu_ids())
        )
        self.device = None if on_gpu else "cpu"  # None: the runner's default (CUDA if seen)
        self.worker = make_worker()

    @ray.method(num_returns=2)
    def generate(self, task, out_dir: str) -> tuple[int, list]:
        """(attempts made, the attempts): two objects, so that the driver waits on the small
        one and hands the other, unread, to a render worker (both owned by the driver: they
        outlive this actor). `out_dir`: the dataset, whose ADR ranges the draws take."""
        attempts = self.worker.generate(task, self.device, out_dir)
        return len(attempts), attempts


class _Reporter:
    """on_attempt inside the actor: one (shard, success) item per attempt to the progress actor."""

    def __init__(self, progress, shard: int):
        self.progress, self.shard, self.lost = progress, shard, False

    def __call__(self, success: bool) -> None:
        if self.lost:
            return
        try:  # waited for: the driver sees a shard's attempts no later than its result
            ray.get(self.progress.put.remote(self.shard, bool(success)))
        except Exception:  # noqa: BLE001 - the bar is display only: losing it must not lose the shard
            self.lost = True


class _Progress:
    """The progress actor: (shard, success) per attempt, taken by the driver in one call."""

    def __init__(self):
        self.items: list[tuple[int, bool]] = []

    def put(self, shard: int, success: bool) -> None:
        self.items.append((shard, success))

    def take(self) -> list[tuple[int, bool]]:
        items, self.items = self.items, []
        return items


def run_shards(
    make_worker: WorkerFactory,
    demos: Sequence,
    tasks: Sequence,
    out_dir: Path,
    config: ClusterConfig,
    on_result: Callable,
    **callbacks,
) -> None:
    """Run the tasks in order on the cluster (`ShardCluster.run`, whose callbacks it takes);
    connects, and shuts down a local cluster it started."""
    if not tasks:
        return
    with ShardCluster(make_worker, out_dir, config, max_workers=len(tasks)) as cluster:
        cluster.run(demos, tasks, on_result, **callbacks)


class ShardCluster:
    """A connected cluster whose actors start building their envs as soon as it is made.

    The driver can do other work meanwhile (resolve the spec, load the seed demos, make a
    texture bank) and then call `run`; `close` (or leaving the `with`) ends the actors, and the
    local cluster if this object started it.
    """

    def __init__(
        self, make_worker: WorkerFactory, out_dir: Path, config: ClusterConfig, max_workers: int
    ):
        self.reaper = connect(config)
        try:
            self.dispatcher = _Dispatcher(
                make_worker, out_dir, config, max_workers, local=self.reaper is not None
            )
        except BaseException:
            self._disconnect()
            raise

    def run(
        self,
        demos: Sequence,
        tasks: Iterable,
        on_result: Callable,
        on_attempt: Callable[[int, bool], None] | None = None,
        should_stop: Callable[[], bool] = lambda: False,
        on_workers: Callable[[int], None] | None = None,
        on_warning: Callable[[str], None] | None = None,
    ) -> None:
        """Run the tasks in order; `on_result` is called in the driver as each shard lands,
        `on_attempt(shard index, success)` per attempt, `on_workers(n)` when the number of live
        workers changes, `on_warning(line)` when a worker dies and its shard is redone.
        `should_stop()` is asked every poll (about twice a second); once it is true no new
        shard starts (running ones finish)."""
        self.dispatcher.run(
            demos, tasks, on_result, on_attempt, should_stop, on_workers, on_warning
        )

    def close(self) -> None:
        try:
            self.dispatcher.close()
        finally:
            self._disconnect()

    def _disconnect(self) -> None:
        if self.reaper is not None:  # the local cluster is ours
            ray.shutdown()
            release(self.reaper)
            self.reaper = None

    def __enter__(self) -> ShardCluster:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _TaskQueue:
    """Shards to run: those given back by lost workers first, then `tasks` in order, drawn lazily
    (a plan of millions of shards is never held as a list)."""

    def __init__(self, tasks: Iterable[ShardTask]):
        self._again: deque[ShardTask] = deque()
        self._rest = iter(tasks)
        self._next = next(self._rest, None)

    def __bool__(self) -> bool:
        return bool(self._again) or self._next is not None

    def popleft(self) -> ShardTask:
        if self._again:
            return self._again.popleft()
        task, self._next = self._next, next(self._rest, None)
        return task

    def appendleft(self, task: ShardTask) -> None:
        self._again.appendleft(task)


@dataclass
class _Worker:
    actor: object  # the ActorHandle
    info: WorkerInfo | None = None


class _Dispatcher:
    def __init__(
        self,
        make_worker: WorkerFactory,
        out_dir: Path,
        config: ClusterConfig,
        max_workers: int,
        local: bool = False,
    ):
        self.config = config
        self.on_result: Callable = lambda result: None
        self.on_attempt: Callable | None = None
        self.on_workers: Callable = lambda n: None
        self.on_warning: Callable = lambda line: print(f"warning: {line}", file=sys.stderr)
        cluster = ray.cluster_resources()
        self.early_warnings: list[str] = []  # said once `run` has somewhere to say them
        # the batch stage (config.batch_gpus): its actors and the GPU share each takes
        self.batchers = 0 if config.batch_gpus is None else max(1, config.batch_workers)
        self.batch_share = config.batch_gpus or 0.0
        if self.batchers and not cluster.get("GPU"):
            self.batch_share = 0.0
            self.early_warnings.append(
                "the cluster has no GPU: the batches of worlds run on warp's CPU device "
                "(for development; docs/mjwarp.md)"
            )
        self.max_workers = max_workers
        self.workers = max(1, min(max_workers, config.workers or self._capacity(cluster)))
        self._next_grow = time.monotonic() + _GROW_EVERY_S
        # A store's URL (a str) goes to the workers as it is; a local path, absolute.
        self.out_dir = str(out_dir.resolve()) if isinstance(out_dir, Path) else str(out_dir)
        options = {"num_cpus": 1, "max_restarts": 0}
        missing = {} if local else _env_missing(config.worker_env)
        if missing:  # e.g. how to reach an object store, as the driver does (an actor with a
            # runtime_env starts through Ray's runtime-env agent, ≈ 1-2 s more: only when needed)
            options["runtime_env"] = {"env_vars": missing}
        # give up if no render worker (or, with a batch stage, no batch actor) has started by
        # then: the GPU or CPU they wait for never joined; wait_error: the one line said then
        self.start_deadline: float | None = None
        self.wait_error = ""
        cpus_left = cluster.get("CPU", 0) - self.batchers
        if self.batchers and cpus_left < 1:
            # A cluster this process started has a CPU more per batch actor (connect_or_start):
            # a remote one whose CPUs the batch actors take could not render until nodes join.
            wait_s = gpu_wait_s()
            self.start_deadline = time.monotonic() + wait_s
            cpus = cluster.get("CPU", 0)
            taken = (
                f"the cluster has {cpus:g} CPU{'s' if cpus != 1 else ''} and the batch stage's "
                f"actors take {self.batchers} (generation.batch_workers, a CPU each)"
            )
            fixes = "add nodes" + (", lower generation.batch_workers" if self.batchers > 1 else "")
            self.wait_error = (
                f"no render worker and batch actor could both start within {wait_s:.0f} s: "
                f"{taken}, none left to render, and no node joined; {fixes}, or wait longer "
                f"with ${GPU_WAIT_ENV}"
            )
            self.early_warnings.append(
                f"{taken}, none left to render: the run waits for nodes to join; "
                f"giving up after {wait_s:.0f} s (${GPU_WAIT_ENV})"
            )
        if config.gpus_per_worker > 0:
            options["num_gpus"] = config.gpus_per_worker
            left = cluster.get("GPU", 0) - self.batchers * self.batch_share
            if cluster.get("GPU") and left < config.gpus_per_worker:
                raise ClusterError(
                    f"generation.batch_workers {self.batchers} x generation.gpus_per_batch "
                    f"{self.batch_share:g} leave {max(left, 0):g} of the cluster's "
                    f"{cluster['GPU']:g} GPUs, less than one render worker's "
                    f"render.gpus_per_worker {config.gpus_per_worker:g}; lower one of them"
                )
            if not cluster.get("GPU"):
                # Nothing will ever join a cluster this process started: the workers would wait
                # forever.
                if local:
                    raise ClusterError(
                        f"render.gpus_per_worker is {config.gpus_per_worker}, "
                        "and this machine has no GPU Ray can use; "
                        "set it to 0 (CPU rendering) or join a GPU cluster with --address"
                    )
                wait_s = gpu_wait_s()
                self.start_deadline = time.monotonic() + wait_s
                self.wait_error = (
                    f"no worker could start within {wait_s:.0f} s: "
                    f"each asks for {config.gpus_per_worker} GPU "
                    "(render.gpus_per_worker) and no GPU node joined the cluster; "
                    f"add GPU nodes, set it to 0, or wait longer with ${GPU_WAIT_ENV}"
                )
                self.early_warnings.append(
                    f"{config.gpus_per_worker} GPU per worker asked, "
                    "and the cluster has no GPU (yet): the workers start once GPU nodes join; "
                    f"giving up after {wait_s:.0f} s (${GPU_WAIT_ENV})"
                )
        self.actor_class = ray.remote(**options)(_ShardActor)
        self.factory_ref = ray.put(make_worker)
        batch_options = {"num_cpus": 1, "max_restarts": 0}
        if "runtime_env" in options:
            batch_options["runtime_env"] = options["runtime_env"]
        if self.batch_share > 0:  # Ray counts it with the render workers' shares
            batch_options["num_gpus"] = self.batch_share
        self.batch_class = ray.remote(**batch_options)(_BatchActor)
        self.batch_starting: dict = {}  # describe() ref -> _Worker
        self.batch_idle: list[_Worker] = []
        self.generating: dict = {}  # generate ref -> (_Worker, ShardTask)
        # generated shards waiting for a render worker: (task, ref of its attempts)
        self.generated: deque = deque()
        self.attempts_of: dict = {}  # shard index -> ref of its attempts, until it is written
        self.demos_ref = None  # set by run()
        self.starting: dict = {}  # describe() ref -> _Worker
        self.idle: list[_Worker] = []
        self.running: dict = {}  # run_shard ref -> (_Worker, ShardTask)
        self.deaths: Counter = Counter()  # shard index -> workers lost while running it
        self.lost_while_starting = 0
        self.error: BaseException | None = None
        for _ in range(self.workers):
            self._start_worker()
        for _ in range(self.batchers):
            self._start_worker(batch=True)
        # Made after the workers, so that they get the worker processes Ray has already started.
        # The progress actor lives on the driver's node: losing another node must not lose the
        # progress.
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)
        self.progress = ray.remote(num_cpus=0, scheduling_strategy=here)(_Progress).remote()

    def run(
        self,
        demos,
        tasks: Iterable[ShardTask],
        on_result,
        on_attempt,
        should_stop: Callable[[], bool],
        on_workers,
        on_warning,
    ) -> None:
        self.on_result, self.on_attempt = on_result, on_attempt
        if on_workers is not None:
            self.on_workers = on_workers
        if on_warning is not None:
            self.on_warning = on_warning
        for line in self.early_warnings:
            self.on_warning(line)
        self.demos_ref = ray.put(list(demos))
        for worker in [
            *self.starting.values(),
            *self.batch_starting.values(),
        ]:  # every actor is still "starting" here (run handles the events)
            worker.actor.set_demos.remote(self.demos_ref)
        queue = _TaskQueue(tasks)
        stopping = lambda: self.error is not None or should_stop()  # noqa: E731
        while self.running or self.generating or ((queue or self.generated) and not stopping()):
            self._dispatch(queue, stopping)
            refs = (
                list(self.running)
                + list(self.starting)
                + list(self.generating)
                + list(self.batch_starting)
            )
            if not refs:
                break
            ready, rest = ray.wait(refs, num_returns=1, timeout=_POLL_S)
            self._check_start_deadline()
            # Asked every poll, whether a worker is free or not: the driver's periodic work
            # (deferred commits, a store's sync) rides on should_stop.
            if not stopping() and queue:
                self._grow()
            # everything else done by now too, in one pass: many workers, one driver
            if ready and rest:
                ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
            self._drain_progress()
            for ref in ready:
                if ref in self.starting:
                    self._started(self.starting.pop(ref), ref)
                elif ref in self.batch_starting:
                    self._started(self.batch_starting.pop(ref), ref, batch=True)
                elif ref in self.generating:
                    self._generated(*self.generating.pop(ref), ref, queue)
                else:
                    self._finished(*self.running.pop(ref), ref, queue)
        self._drain_progress()
        if self.error is not None:
            raise self.error

    def _dispatch(self, queue: _TaskQueue, stopping: Callable[[], bool]) -> None:
        """Start what can start: without a batch stage, a queued shard on each idle worker; with
        one, a queued shard on each idle batch actor (while fewer shards than render workers
        are generated or being generated: their attempts wait in the object store) and a
        generated shard on each idle render worker."""
        if not self.batchers:
            while queue and self.idle and not stopping():
                worker, task = self.idle.pop(), queue.popleft()
                self._render(worker, task)
            return
        while self.generated and self.idle and not stopping():
            task, attempts = self.generated.popleft()
            self._render(self.idle.pop(), task, attempts)
        ahead = max(1, len(self.idle) + len(self.running) + len(self.starting))
        while (
            queue
            and self.batch_idle
            and len(self.generated) + len(self.generating) < ahead
            and not stopping()
        ):
            batcher, task = self.batch_idle.pop(), queue.popleft()
            done, attempts = batcher.actor.generate.remote(task, self.out_dir)
            self.generating[done] = (batcher, task, attempts)

    def _render(self, worker: _Worker, task: ShardTask, attempts=None) -> None:
        args = (task, self.out_dir, self.progress) + (() if attempts is None else (attempts,))
        self.running[worker.actor.run_shard.remote(*args)] = (worker, task)

    def _check_start_deadline(self) -> None:
        """ClusterError once the deadline passed with no render worker (or, with a batch
        stage, no batch actor) started: the room they wait for (a GPU, a CPU) never joined."""
        if self.start_deadline is None:
            return
        rendering = bool(self.idle or self.running)
        generating = not self.batchers or bool(self.batch_idle or self.generating)
        if rendering and generating:
            self.start_deadline = None  # both kinds started: the room is there
            return
        if time.monotonic() > self.start_deadline:
            raise ClusterError(self.wait_error)

    def _capacity(self, resources: dict) -> int:
        """Workers the cluster's resources hold: one a CPU (and `gpus_per_worker` GPU each),
        after the batch stage's actors (a CPU and `batch_share` GPU each)."""
        return render_capacity(
            resources, self.config.gpus_per_worker, self.batchers, self.batch_share
        )

    def _grow(self) -> None:
        """An auto-sized pool (no --workers) takes the nodes that joined: a worker for each CPU
        the cluster has beyond the workers it holds, up to one a shard. (A lost node's workers
        are replaced by `_lost`; their replacements wait for room, so none is added here.)"""
        if self.config.workers or time.monotonic() < self._next_grow:
            return
        self._next_grow = time.monotonic() + _GROW_EVERY_S
        have = len(self.idle) + len(self.running) + len(self.starting)
        wanted = min(self.max_workers, self._capacity(ray.cluster_resources()))
        for _ in range(wanted - have):
            self._start_worker()

    def _generated(
        self, batcher: _Worker, task: ShardTask, attempts, done, queue: _TaskQueue
    ) -> None:
        """A batch actor returned: the shard's attempts wait for a render worker (their ref:
        they stay in the object store), or the batch actor died (the shard is generated again,
        by another) or raised (the run stops, as when a shard raises)."""
        try:
            ray.get(done)
        except RayActorError as err:
            self._lost(batcher, task, err, queue, batch=True)
            return
        except RayTaskError as err:
            self.batch_idle.append(batcher)
            self._fail(_shard_error(task, err, self.out_dir, self.config.user_errors))
            return
        self.batch_idle.append(batcher)
        self.attempts_of[task.index] = attempts
        self.generated.append((task, attempts))

    def _start_worker(self, batch: bool = False) -> None:
        """Start a render worker, or (`batch`) a batch stage's actor."""
        if batch:
            actor = self.batch_class.remote(self.factory_ref, self.batch_share > 0)
        else:
            actor = self.actor_class.remote(self.factory_ref)
        if self.demos_ref is not None:  # a replacement, started while shards run
            actor.set_demos.remote(self.demos_ref)
        starting = self.batch_starting if batch else self.starting
        starting[actor.describe.remote()] = _Worker(actor)

    def _started(self, worker: _Worker, ref, batch: bool = False) -> None:
        what = "batch actor" if batch else "worker"
        try:
            worker.info = ray.get(ref)
        except RayActorError as err:
            if err.actor_init_failed:
                self._fail(ClusterError(f"a {what} failed to start: {_raised(err)}"))
                return
            self.lost_while_starting += (
                1  # e.g. its node went away; bounded so that a crash loop ends
            )
            if self.lost_while_starting > self.config.max_shard_retries * self.workers:
                self._fail(
                    ClusterError(
                        f"{self.lost_while_starting} workers died while starting; "
                        f"last: {_death_reason(err)}"
                    )
                )
            else:
                self.on_warning(
                    f"a {what} died while starting ({_death_reason(err)}); starting another"
                )
                self._start_worker(batch)
            return
        if batch:
            self.batch_idle.append(worker)
            return
        self.idle.append(worker)
        self._report_workers()

    def _finished(self, worker: _Worker, task: ShardTask, ref, queue: _TaskQueue) -> None:
        try:
            result = ray.get(ref)
        except RayActorError as err:
            self._lost(worker, task, err, queue)
            return
        except ObjectLostError as err:  # a batch stage's attempts, lost with their node
            self.idle.append(worker)
            self.attempts_of.pop(task.index, None)
            queue.appendleft(task)  # generated again
            self.on_warning(
                f"{task.name}: its attempts were lost ({_first_line(err)}); "
                "the shard is generated again"
            )
            return
        except RayTaskError as err:
            self.idle.append(worker)
            self._fail(_shard_error(task, err, self.out_dir, self.config.user_errors))
            return
        self.attempts_of.pop(task.index, None)
        # its attempts were drained just before: they were queued before it returned
        self.on_result(result)
        self.idle.append(worker)

    def _lost(
        self,
        worker: _Worker,
        task: ShardTask,
        err: RayActorError,
        queue: _TaskQueue,
        batch: bool = False,
    ) -> None:
        """`worker` (a batch actor when `batch`) died running `task`: the shard is redone by
        another (rendered again from its attempts when a batch stage made them already)."""
        ray.kill(worker.actor, no_restart=True)
        self._report_workers()
        self.deaths[task.index] += 1
        why = "its node was preempted" if getattr(err, "preempted", False) else _death_reason(err)
        if self.deaths[task.index] > self.config.max_shard_retries:
            self._fail(
                ClusterError(
                    f"{task.name}: its worker died {self.deaths[task.index]} times; "
                    f"giving up (last: {why})"
                )
            )
            return
        attempts = None if batch else self.attempts_of.get(task.index)
        if attempts is not None:  # rendered again from the attempts already generated
            self.generated.appendleft((task, attempts))
        else:  # redone from scratch, on whichever worker is free first
            queue.appendleft(task)
        who = worker.info.describe("batch actor" if batch else "worker")
        self.on_warning(f"{who} died during {task.name} ({why}); the shard is redone")
        self._start_worker(batch)

    def _fail(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error

    def _report_workers(self) -> None:
        self.on_workers(len(self.idle) + len(self.running))

    def _drain_progress(self) -> None:
        try:
            items = ray.get(self.progress.take.remote())
        except RayActorError:  # display only: a lost progress actor loses the bar, not the run
            return
        if self.on_attempt is not None:
            for shard, success in items:
                self.on_attempt(shard, success)

    def close(self) -> None:
        """End every actor of this run (idle, starting, and the progress actor)."""
        actors = [w.actor for w in self.idle] + [w.actor for w in self.starting.values()]
        actors += [w.actor for w, _ in self.running.values()] + [self.progress]
        actors += [w.actor for w in self.batch_idle]
        actors += [w.actor for w in self.batch_starting.values()]
        actors += [w.actor for w, _, _ in self.generating.values()]
        for actor in actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone, or the cluster is; nothing is left to end
                pass
        self.idle.clear()
        self.starting.clear()
        self.running.clear()
        self.batch_idle.clear()
        self.batch_starting.clear()
        self.generating.clear()
        self.generated.clear()


def render_capacity(
    resources: Mapping[str, float],
    gpus_per_worker: float = 0.0,
    batchers: int = 0,
    batch_share: float = 0.0,
) -> int:
    """Render workers a cluster of `resources` (Ray's CPU and GPU totals) holds: one a CPU,
    and `gpus_per_worker` GPU each when > 0, once the batch stage's `batchers` actors have
    taken a CPU and `batch_share` GPU each. At least 1 (a worker waits for room)."""
    cpus = int(resources.get("CPU", 0)) - batchers
    if gpus_per_worker > 0:
        gpus = resources.get("GPU", 0) - batchers * batch_share
        cpus = min(cpus, int(gpus / gpus_per_worker + 1e-9))
    return max(1, cpus)


def _env_missing(wanted: Mapping[str, str]) -> dict[str, str]:
    """The variables of `wanted` that this job's workers would not have: a cluster this process
    did not start does not pass them on, unless the job's runtime_env (`connect`) holds them."""
    if not wanted:
        return {}
    job = (ray.get_runtime_context().runtime_env or {}).get("env_vars") or {}
    return {k: v for k, v in wanted.items() if job.get(k) != v}


def _shard_error(
    task: ShardTask, err: RayTaskError, out_dir: str, user_errors: tuple[type, ...] = ()
) -> BaseException:
    """A one-line error for a shard that could not be written, or a user's error the worker
    raised (e.g. an object store that stayed unreachable) as it is; any other error as raised."""
    cause = getattr(err, "cause", None)
    if user_errors and isinstance(cause, user_errors):
        return cause
    if isinstance(cause, OSError):
        text = f"[Errno {cause.errno}] {cause.strerror}" if cause.errno else str(cause)
        return ShardWriteError(
            f"{Path(out_dir) / 'shards' / task.name}: cannot write the shard: {text}; "
            "finished shards stay listed in manifest.json: "
            "fix this and run the same command again to resume"
        )
    return err


def _death_reason(err: RayActorError) -> str:
    """Ray's own words for why a worker died ("Worker unexpectedly exits with ...",
    "... low on memory")."""
    found = re.search(r"Worker exit detail: (.+?)(?:\.\s|$)", str(err), flags=re.S)
    return " ".join(found.group(1).split()) if found else _first_line(err)


def _raised(err: BaseException) -> str:
    """The exception line ("GpuRenderError: ...") at the end of a remote traceback."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return (
        re.sub(r"^(?:\w+\.)+(?=\w+(?:Error|Exception)\b)", "", lines[-1])
        if lines
        else type(err).__name__
    )


def _first_line(err: BaseException) -> str:
    text = str(getattr(err, "cause", None) or err).strip()
    return text.splitlines()[0] if text else type(err).__name__
