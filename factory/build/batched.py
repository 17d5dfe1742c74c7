"""A shard's attempts as a batch of MuJoCo Warp worlds (generation.backend: mjwarp).

    ShardWorker + ShardTask
      ──► batch_starts: per attempt its seed (attempt_seed, as the CPU path) ─► its placement,
          the first draw of that seed (generators.mimicgen.attempt_placement) ─► the CPU scene
          reset to it ─► its MjData, one world's start
      ──► run_batch: BatchedWorlds(model, starts) + BatchedOSC (the arm's goal and OSC torques
          of every world in warp kernels) + GripperCommands (each world's gripper ctrl)
          each world's attempt is the CPU generator itself (generators.mimicgen.generate_attempt)
          on a WorldScene: a view of the CPU scene at that world's state
          ─► per control step: every live world's attempt runs, in attempt order, up to its
             next action (source choice, retargeted targets, noise from its own seed: the CPU
             generator's own code) ─► one batched control step of all worlds ─► every world's
             state copied from the device in one transfer ─► the finished worlds masked

The CPU generator's rollout is sequential code that asks the scene between actions (the hand's
pose, an object's pose at a subtask boundary, a predicate); rewriting it batched would be a
second generator to keep equal to the first. Instead each world's attempt runs in its own
thread, and exactly one thread runs at a time (a hand-off, not parallelism): the coordinator
resumes a world, the world runs until it asks to step (WorldScene.step) or its attempt ends.
Every query a world makes loads that world's state (copied from the device after the last
batched step) into the CPU scene and asks the CPU scene's own methods (`Scene.holds`,
`Scene.success`, `Scene.object_pose`): the predicates are evaluated on the host, on the
arrays copied from the device in one batch per control step, with CPU MuJoCo's collision
detection (mj_forward) on that state; not in a warp kernel.

Not batched (refused, naming the fallback generation.backend: cpu): a `physics:` section
(per-world physics draws would need per-world model fields), generation.rebalance's targeted
shards, subtask retries (a retry restores a snapshot of one world), transit: plan, two-arm
and mixed-robot specs, a robot without the factory's OSC loop.
"""

from __future__ import annotations

import threading
import time

import mujoco
import numpy as np
from demofactory.build.records import ShardTask
from demofactory.generators.mimicgen import (
    AttemptPlan,
    attempt_placement,
    attempt_seed,
    generate_attempt,
)
from demofactory.generators.records import Attempt

# `worker` below is a demofactory.build.pipeline.ShardWorker, not imported: pipeline runs
# these (ShardWorker.run_shard), and the layers test forbids the cycle.

FALLBACK = "set generation.backend: cpu"


def unsupported(spec) -> str | None:
    """What of `spec` the batched loop does not run (one phrase), or None."""
    gen = spec.generation
    if spec.task.two_arm is not None:
        return "two-arm specs"
    if spec.task.robots:
        return "mixed-robot specs (task.robots)"
    if spec.physics is not None:
        return "a physics: section (per-world physics draws)"
    if gen.rebalance is not None:
        return "generation.rebalance"
    if gen.subtask_retries:
        return "generation.subtask_retries"
    if gen.transit == "plan":
        return "generation.transit: plan"
    return None


def batch_starts(
    worker, task: ShardTask, marks: list | None = None
) -> list[tuple[AttemptPlan, mujoco.MjData]]:
    """(plan, start MjData) of each attempt of `task`, in its order: the state the CPU path's
    `generate_attempt` starts the attempt from, made by the same functions from the same seed.
    `marks`, a list: each attempt's start marks (`Scene.mark_start`: the heights and joint
    positions `lifted` and `opened` compare with) appended to it."""
    if worker.physics is not None:
        raise NotImplementedError("per-world physics draws are not landed for MuJoCo Warp")
    if task.targets:
        raise NotImplementedError("generation.rebalance's targeted shards are not landed")
    scene, spec = worker.scene, worker.spec
    starts = []
    for attempt_id in task.attempt_ids:
        plan = AttemptPlan(attempt_id, task.index, attempt_seed(spec.seed, task.index, attempt_id))
        _, placement = attempt_placement(worker.demos, plan, worker.params)
        demo = worker.demos[0]
        scene.reset_to(demo.start_state, placement, fixtures=demo.fixture_poses)
        if marks is not None:
            marks.append((dict(scene._start_z), dict(scene._start_q)))
        data = mujoco.MjData(scene.model)
        mujoco.mj_copyData(data, scene.model, scene.data)
        starts.append((plan, data))
    return starts


class _Batch:
    """The worlds' last states (copied from the device) and which one the CPU scene holds."""

    def __init__(self, scene, states: np.ndarray, marks: list):
        self.scene, self.states, self.marks = scene, states, marks
        self.loaded: int | None = None
        self.closed = np.zeros(len(states), dtype=bool)  # Scene.gripper_closed per world

    def load(self, w: int) -> None:
        if self.loaded != w:
            self.scene.set_state(self.states[w])
            self.scene.gripper_closed = bool(self.closed[w])
            self.scene._start_z, self.scene._start_q = self.marks[w]
            self.loaded = w

    def refresh(self, states: np.ndarray) -> None:
        self.states, self.loaded = states, None


class WorldScene:
    """The CPU `Scene` as seen from world `w` of a batch: every query reads that world's state;
    `step` hands the action to the batch and waits for the batched step."""

    def __init__(self, batch: _Batch, w: int, turn: _Turn):
        self._batch, self._w, self._turn = batch, w, turn

    def __getattr__(self, name):  # eef_pose, object_pose, holds, success, proprio, ...
        self._batch.load(self._w)
        return getattr(self._batch.scene, name)

    def reset_to(self, *args, **kwargs) -> None:
        """The world already starts where this reset puts the CPU scene (batch_starts)."""

    def get_state(self) -> np.ndarray:
        return self._batch.states[self._w].copy()

    def snapshot(self):
        raise NotImplementedError("subtask retries are not batched")

    def restore(self, snap) -> None:
        raise NotImplementedError("subtask retries are not batched")

    def step(self, action: np.ndarray) -> None:
        self._turn.step(np.asarray(action, dtype=np.float64))
        sign = self._batch.scene.gripper_sign
        self._batch.closed[self._w] = bool(action[-1] * sign > 0)


class _Turn:
    """One world's thread, run only while the coordinator waits for it (a strict hand-off)."""

    def __init__(self):
        self.go, self.back = threading.Semaphore(0), threading.Semaphore(0)
        self.action: np.ndarray | None = None
        self.result: Attempt | None = None
        self.error: BaseException | None = None
        self.finished = False
        self.abort = False  # the batch failed: a waiting world's step raises, and it ends

    def step(self, action: np.ndarray) -> None:  # on the world's thread
        self.action = action
        self.back.release()
        self.go.acquire()
        if self.abort:
            raise RuntimeError("the batch stopped")

    def resume(self) -> None:  # on the coordinator's
        self.action = None
        self.go.release()
        self.back.acquire()


def run_batch(
    worker, task: ShardTask, device: str = "cpu", timing: dict | None = None
) -> list[Attempt]:
    """Every attempt of `task` as one batch of worlds; the Attempts in the task's order, as
    `ShardWorker.run_attempt` returns them on the CPU path.

    `timing`, a dict: filled with where the loop's time went, in seconds of wall time:
    `device_s` (the batched control steps and the copies of every world's state from the
    device), `host_s` (every world's attempt logic and predicates, on this core), `setup_s`,
    and `control_steps` and `world_steps` (live worlds summed over control steps): what the
    throughput model calls h is host_s / world_steps (docs/cluster.md)."""
    from demofactory.simulation import mjwarp

    started = time.perf_counter()
    why = unsupported(worker.spec)
    if why is not None:
        raise NotImplementedError(f"{why} are not batched yet")
    scene = worker.scene
    stepper = scene._fast
    if stepper is None:
        raise NotImplementedError("the robot does not take the factory's OSC loop")
    scene.set_physics(None)  # as ShardWorker.run_attempt without a physics: section
    marks: list = []
    starts = batch_starts(worker, task, marks)
    n = len(starts)
    worlds = mjwarp.BatchedWorlds(scene.model, [d for _, d in starts], nworld=n, device=device)
    osc = mjwarp.BatchedOSC(worlds, mjwarp.ArmParams.from_stepper(stepper))
    hands = mjwarp.GripperCommands(stepper, n)
    batch = _Batch(scene, worlds.states(), marks)
    turns = [_Turn() for _ in range(n)]

    def attempt(w: int, plan: AttemptPlan) -> None:
        turn = turns[w]
        turn.go.acquire()
        try:
            turn.result = generate_attempt(
                WorldScene(batch, w, turn), worker.demos, plan, worker.params
            )
        except BaseException as err:  # noqa: BLE001 - re-raised on the coordinator's thread
            turn.error = err
        turn.finished = True
        turn.back.release()

    threads = [
        threading.Thread(target=attempt, args=(w, plan), daemon=True)
        for w, (plan, _) in enumerate(starts)
    ]
    for thread in threads:
        thread.start()
    last = np.zeros((n, 7))
    clock = {"device_s": 0.0, "host_s": 0.0, "control_steps": 0, "world_steps": 0}
    clock["setup_s"] = time.perf_counter() - started
    try:
        while True:
            tick = time.perf_counter()
            for turn in turns:  # every live world, in attempt order, up to its next action
                if not turn.finished:
                    turn.resume()
                    if turn.error is not None:
                        raise turn.error
            done = np.array([t.finished for t in turns])
            worlds.mask(done & ~worlds.done)
            clock["host_s"] += time.perf_counter() - tick
            if done.all():
                break
            actions = last.copy()
            for w, turn in enumerate(turns):
                if turn.action is not None:
                    actions[w] = turn.action
            # a finished world repeats its last action: masked, it is held where it ended
            tick = time.perf_counter()
            osc.control_step(actions, hands.ctrl(actions))
            last = actions
            batch.refresh(worlds.states())
            clock["device_s"] += time.perf_counter() - tick
            clock["control_steps"] += 1
            clock["world_steps"] += int((~done).sum())
    finally:
        if timing is not None:
            timing.update(clock)
        for turn in turns:  # a thread still waiting (an error above) is released to end
            if not turn.finished:
                turn.abort = True
                turn.go.release()
    return [turn.result for turn in turns]
