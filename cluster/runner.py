"""Run shards on Ray: one actor per worker, each owning a robosuite env for its lifetime.

    driver: queue of ShardTasks ──► idle actor.run_shard(task) ──► ShardResult ──► on_result
    actors ──► progress queue (one item per attempt: success or not) ──► on_attempt

Ray appears nowhere outside `cluster/`: the actors call the same `ShardWorker`
that tests call directly. A shard whose actor dies is handed to a fresh actor;
shards are deterministic, so the redo writes the same bytes.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import ray
from ray.exceptions import RayActorError
from ray.util.queue import Empty, Queue

from factory.errors import UserError
from factory.pipeline import ShardResult, ShardTask, ShardWorker
from factory.records import AnnotatedDemo
from factory.spec import SceneSpec

# Environment the workers need; forwarded so that a remote cluster renders like the driver.
_FORWARDED_ENV = ("MUJOCO_GL", "PYOPENGL_PLATFORM", "MUJOCO_EGL_DEVICE_ID")


@dataclass(frozen=True)
class ClusterConfig:
    workers: int  # actors (one CPU each)
    address: str | None = None  # an existing cluster ("auto", "ray://host:10001", ...); None: start one
    max_actor_restarts: int = 3  # actors replaced after dying, over the whole run


def connect(config: ClusterConfig) -> bool:
    """Connect to Ray; returns True when this call started the local cluster (and so owns it)."""
    if ray.is_initialized():
        return False
    env_vars = {k: os.environ[k] for k in _FORWARDED_ENV if k in os.environ}
    runtime_env = {"env_vars": env_vars} if env_vars else None
    address = config.address or os.environ.get("RAY_ADDRESS")
    try:
        if address:
            ray.init(address=address, runtime_env=runtime_env, log_to_driver=False)
            return False
        ray.init(
            num_cpus=config.workers,
            include_dashboard=False,
            log_to_driver=False,  # robosuite chatter in workers; errors still come back as exceptions
            runtime_env=runtime_env,
        )
    except ConnectionError as err:
        raise UserError(f"--address {address}: cannot connect to a Ray cluster ({err})") from None
    return True


class _RayShardWorker(ShardWorker):
    """The actor: a ShardWorker that reports each attempt to a progress queue."""

    def run_shard_reporting(self, task: ShardTask, out_dir: str, progress: Queue) -> ShardResult:
        return self.run_shard(task, Path(out_dir), on_attempt=lambda ok: progress.put_nowait(bool(ok)))

    def ping(self) -> bool:
        return True


def run_shards(
    spec: SceneSpec,
    demos: Sequence[AnnotatedDemo],
    tasks: Sequence[ShardTask],
    out_dir: Path,
    config: ClusterConfig,
    on_result: Callable[[ShardResult], None],
    on_attempt: Callable[[bool], None] | None = None,
    should_stop: Callable[[], bool] = lambda: False,
) -> None:
    """Run the tasks in order on the cluster; `on_result` is called in the driver as each shard
    lands. Once `should_stop()` is true no new shard starts (running ones finish)."""
    if not tasks:
        return
    owns = connect(config)
    try:
        _Dispatcher(spec, demos, out_dir, config, on_result, on_attempt).run(tasks, should_stop)
    finally:
        if owns:
            ray.shutdown()


class _Dispatcher:
    def __init__(self, spec, demos, out_dir: Path, config: ClusterConfig, on_result, on_attempt):
        self.config, self.on_result, self.on_attempt = config, on_result, on_attempt
        self.out_dir = str(Path(out_dir).resolve())
        self.progress = Queue(maxsize=0, actor_options={"num_cpus": 0})
        self.actor_class = ray.remote(num_cpus=1, max_restarts=0)(_RayShardWorker)
        self.spec_ref, self.demos_ref = ray.put(spec), ray.put(list(demos))
        self.restarts = 0

    def _new_actor(self):
        return self.actor_class.remote(self.spec_ref, self.demos_ref)

    def run(self, tasks: Sequence[ShardTask], should_stop: Callable[[], bool]) -> None:
        queue = deque(tasks)
        idle = [self._new_actor() for _ in range(min(self.config.workers, len(tasks)))]
        running: dict = {}  # object ref -> (actor, task)
        while running or (queue and not should_stop()):
            while queue and idle and not should_stop():
                actor, task = idle.pop(), queue.popleft()
                ref = actor.run_shard_reporting.remote(task, self.out_dir, self.progress)
                running[ref] = (actor, task)
            ready, _ = ray.wait(list(running), num_returns=1, timeout=0.25)
            self._drain_progress()
            for ref in ready:
                actor, task = running.pop(ref)
                try:
                    result = ray.get(ref)
                except RayActorError:
                    queue.appendleft(task)  # the shard is redone from scratch, elsewhere
                    idle.append(self._replace(actor))
                    continue
                self._drain_progress()
                self.on_result(result)
                idle.append(actor)
        self._drain_progress()

    def _replace(self, dead_actor):
        self.restarts += 1
        if self.restarts > self.config.max_actor_restarts:
            raise RuntimeError(f"{self.restarts} workers died; giving up (max_actor_restarts exceeded)")
        ray.kill(dead_actor, no_restart=True)
        return self._new_actor()

    def _drain_progress(self) -> None:
        while True:
            try:
                items = self.progress.get_nowait_batch(self.progress.qsize())
            except Empty:
                return
            if not items:
                return
            for ok in items:
                if self.on_attempt is not None:
                    self.on_attempt(ok)
