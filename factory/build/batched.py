"""A shard's attempts as a batch of MuJoCo Warp worlds (generation.backend: mjwarp).

    ShardWorker + ShardTask
      ──► batch_starts: per attempt its seed (attempt_seed, as the CPU path) ─► its physics
          draw (ShardWorker.draw_physics) applied to the CPU scene ─► its placement, the first
          draw of that seed (generators.mimicgen.attempt_placement) ─► the CPU scene reset to
          it ─► its MjData, the model's values under the draw, the OSC gains: a WorldStart
      ──► run_batch: BatchedWorlds(model, starts) + the draws' model values per world
          (BatchedWorlds.set_model_rows) + BatchedOSC (the arm's goal and OSC torques of every
          world in warp kernels, each world's gains) + GripperCommands (each world's gripper)
          each world's attempt is the CPU generator itself (generators.mimicgen.generate_attempt)
          on a WorldScene: a view of the CPU scene at that world's state
          ─► per control step: every live world's attempt runs, in attempt order, up to its
             next action (source choice, retargeted targets, noise from its own seed: the CPU
             generator's own code) ─► one batched control step of all worlds ─► the frames
             the attempts ask for (the grip site, the objects' bodies) gathered on the device
             as the last substep's step1 left them (where the CPU path reads them) ─► every
             world's state and frames copied from the device in one transfer each ─► the
             finished worlds masked

The CPU generator's rollout is sequential code that asks the scene between actions (the hand's
pose, an object's pose at a subtask boundary, a predicate); rewriting it batched would be a
second generator to keep equal to the first. Instead each world's attempt runs in its own
thread, and exactly one thread runs at a time (a hand-off, not parallelism): the coordinator
resumes a world, the world runs until it asks to step (WorldScene.step) or its attempt ends.

What a world asks every control step is answered from its frames as the device computed them
(WorldScene.eef_pose, object_pose, proprio), and so are the task's predicates, one code path
with the CPU scene's (`Scene.leaf_holds` on a world's `_WorldReads`): the kinematic ones
(lifted, near, opened, joint) and inside, on_peg on its frames, joint positions and the model's
geometry; grasped, touching, contact, on_top on its contacts (its rows of MuJoCo Warp's contact
list) and surface distances (MuJoCo Warp's GJK/EPA), computed on the device for the world that
asks (`mjwarp.WorldContacts`). After the CPU path's control step, CPU MuJoCo's data holds
positions and contacts computed at the last substep's start (mj_step1 computes them, mj_step2
moves the state on), and its generator reads them there; MuJoCo Warp's data after a batched
step holds the same, and a world loaded on the host gets its positions there too
(`Scene.set_state(positions=)`, `BatchedOSC.positions_qpos`).

What the device cannot answer loads the world's state into the CPU scene and asks its own
methods: robosuite's own success checks, and the contact and distance predicates before the
batch's first step and for the rest of a step after a restore (`_Batch.fresh`) or on a geom
MuJoCo Warp's convex collision does not take (mjwarp.CONVEX). The generator asks predicates at
a subtask's end and over the task's last `success_hold_steps`, not every step.

A `physics:` section's draws act per world, as `ShardWorker.run_attempt` applies them on the
CPU path: the model values a draw changes (friction, masses, sizes, joint damping and
armature, gravity, and what mj_setConst derives from them) become model fields with a row per
world on the device (MuJoCo Warp reads row w % K of its `*` fields); the OSC gains are a row per
world in the torque kernel; the action delay is a queue per world (DeviceBatch.step). The CPU
scene takes world w's values before it answers world w's queries (WorldPhysics.apply), so
predicates see the world's own sizes; the scene is nominal again when the batch ends.

Subtask retries (generation.subtask_retries) restore one world to its snapshot: its state,
solver warm start and ctrl written to the device, its hand and delay queue on the host
(DeviceBatch.snapshot/restore); the other worlds step on. The device is touched only from the
coordinator's thread: a world asks it for the snapshot and the restore (_Turn.ask).

Not batched (refused, naming the fallback generation.backend: cpu): generation.rebalance's
targeted shards, transit: plan, two-arm and mixed-robot specs, a robot without the factory's
OSC loop.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import mujoco
import numpy as np
from demofactory.build.records import ShardTask
from demofactory.generators.mimicgen import (
    AttemptPlan,
    attempt_placement,
    attempt_seed,
    generate_attempt,
)
from demofactory.generators.poses import make_pose
from demofactory.generators.predicates import Predicate, parse_predicate
from demofactory.generators.records import Attempt
from demofactory.simulation.physics import ActionDelay, PhysicsDraw, model_rows, set_model_rows
from demofactory.simulation.scene import (
    KINEMATIC_PREDICATES,
    Snapshot,
    proprio_of,
    touching_geoms,
)

# `worker` below is a demofactory.build.pipeline.ShardWorker, not imported: pipeline runs
# these (ShardWorker.run_shard), and the layers test forbids the cycle.

FALLBACK = "set generation.backend: cpu"
# Simple predicates world by world on the device's arrays (_Batch.on_device): on frames and
# joint positions, with the model's geometry...
GEOMETRY_PREDICATES = frozenset({"inside", "on_peg"})
FRAME_PREDICATES = KINEMATIC_PREDICATES | GEOMETRY_PREDICATES
# ... and on contacts and surface distances (while the device's are the last step's)
CONTACT_PREDICATES = frozenset({"grasped", "contact", "touching", "on_top"})
EEF = "<grip site>"  # DeviceBatch.slots: the grip site's frame, beside the objects' bodies


def unsupported(spec) -> str | None:
    """What of `spec` the batched loop does not run (one phrase), or None."""
    gen = spec.generation
    if spec.task.two_arm is not None:
        return "two-arm specs"
    if spec.task.robots:
        return "mixed-robot specs (task.robots)"
    if gen.rebalance is not None:
        return "generation.rebalance"
    if gen.transit == "plan":
        return "generation.transit: plan"
    return None


@dataclasses.dataclass
class WorldStart:
    """Where one world of a batch starts: as the CPU path's attempt starts, under its draw.

    `draw`: the attempt's physics draw (None: the spec has no physics: section); `rows`: the
    model's values under it (`physics.model_rows`; None without a physics: section); `gains`:
    the arm's OSC kp and kd under it; `marks`: the start marks (`Scene.mark_start`: heights
    and joint positions `lifted` and `opened` compare with); `hand`: the gripper's
    speed-limited command as the reset left it (robosuite's `current_action`)."""

    plan: AttemptPlan
    data: mujoco.MjData
    draw: PhysicsDraw | None
    rows: dict[str, np.ndarray] | None
    gains: tuple[np.ndarray, np.ndarray] | None
    marks: tuple[dict, dict]
    hand: np.ndarray | None = None


def batch_starts(worker, task: ShardTask) -> list[WorldStart]:
    """Each attempt of `task`'s start, in its order: the state the CPU path's
    `generate_attempt` starts the attempt from, under the physics draw `ShardWorker.run_attempt`
    applies, made by the same functions from the same seed. The CPU scene is left nominal."""
    if task.targets:
        raise NotImplementedError("generation.rebalance's targeted shards are not landed")
    scene, spec = worker.scene, worker.spec
    stepper = scene._fast
    starts = []
    try:
        for attempt_id in task.attempt_ids:
            seed = attempt_seed(spec.seed, task.index, attempt_id)
            plan = AttemptPlan(attempt_id, task.index, seed)
            draw = worker.draw_physics(plan.seed)
            scene.set_physics(draw)  # as run_attempt: the reset below re-applies it
            _, placement = attempt_placement(worker.demos, plan, worker.params)
            demo = worker.demos[0]
            scene.reset_to(demo.start_state, placement, fixtures=demo.fixture_poses)
            data = mujoco.MjData(scene.model)
            mujoco.mj_copyData(data, scene.model, scene.data)
            starts.append(
                WorldStart(
                    plan=plan,
                    data=data,
                    draw=draw,
                    rows=None if worker.physics is None else model_rows(scene.model),
                    gains=None
                    if stepper is None
                    else (np.array(stepper.kp, dtype=float), np.array(stepper.kd, dtype=float)),
                    marks=(dict(scene._start_z), dict(scene._start_q)),
                    hand=None
                    if stepper is None
                    else np.array(stepper.gripper_model.current_action, copy=True),
                )
            )
    finally:
        scene.set_physics(None)
    return starts


class WorldPhysics:
    """Each world's physics draw where it acts, from `batch_starts`: the model values the
    draws changed (`rows`, one dict a world; `stacked`, [N, ...] a value, for
    `BatchedWorlds.set_model_rows`), the OSC gains ([N, 6] kp, kd) and an action delay a world.

    The CPU scene answers every world's queries (`_Batch.load`), so it takes the world's
    values before loading its state: a bigger cube's contacts, a heavier one's forces are the
    world's own. `nominal`: the values the scene had before (put back by `restore`)."""

    def __init__(self, scene, starts: list[WorldStart]):
        nominal = model_rows(scene.model)
        names = [
            name
            for name, values in nominal.items()
            if any(not np.array_equal(s.rows[name], values) for s in starts)
        ]
        self.scene = scene
        self.nominal = {name: nominal[name] for name in names}
        self.rows = [{name: s.rows[name] for name in names} for s in starts]
        self.stacked = {name: np.stack([s.rows[name] for s in starts]) for name in names}
        self.gains = (
            np.stack([s.gains[0] for s in starts]),
            np.stack([s.gains[1] for s in starts]),
        )
        self.delays = [ActionDelay(0 if s.draw is None else s.draw.delay) for s in starts]
        self.cavities: list[dict] = [{} for _ in starts]  # Scene._cavities: sizes differ
        self.applied: int | None = None

    def apply(self, w: int) -> None:
        """The CPU scene's model as world `w`'s."""
        if self.applied != w:
            set_model_rows(self.scene.model, self.rows[w])
            self.scene._cavities = self.cavities[w]
            self.applied = w

    def restore(self) -> None:
        set_model_rows(self.scene.model, self.nominal)
        self.scene._cavities = {}
        self.applied = None


class _Batch:
    """The worlds' last states and frames (copied from the device: `DeviceBatch.read`) and
    which world the CPU scene holds."""

    def __init__(self, device_batch: DeviceBatch, starts: list):
        self.device = device_batch
        self.scene, self.physics = device_batch.scene, device_batch.physics
        self.slots = device_batch.slots
        self.states, (self.pos, self.mat), self.positions = device_batch.read()
        self.marks = [s.marks for s in starts]
        self.loaded: int | None = None
        n = len(self.states)
        # Scene.gripper_closed per world: unknown (None) after the reset, as on the CPU path
        self.closed: list[bool | None] = [None] * n
        # Whether a world's contacts and geom positions on the device are where its frames
        # are (the last control step's): not before the first step (MuJoCo Warp's data holds
        # the first world's start then), nor, for the rest of a step, after a restore (its
        # device kinematics moved every world's geoms to the state now).
        self.fresh = np.zeros(n, dtype=bool)
        self.reads = [_WorldReads(self, w) for w in range(n)]
        self.host_leaves = 0  # simple predicates answered by the CPU scene (a state load)

    def load(self, w: int) -> None:
        if self.loaded != w:
            if self.physics is not None:
                self.physics.apply(w)
            self.scene.set_state(self.states[w], positions=self.positions[w])
            self.scene.gripper_closed = self.closed[w]
            self.scene._start_z, self.scene._start_q = self.marks[w]
            self.loaded = w

    def refresh(self, read: tuple) -> None:
        """Every world as a control step left it (`DeviceBatch.step`)."""
        self.states, (self.pos, self.mat), self.positions = read
        self.loaded = None
        self.fresh[:] = True
        for reads in self.reads:
            reads.contacts = None
            reads.distances.clear()

    def restore(self, w: int, snap: Snapshot) -> None:
        """World w back to `snap` (DeviceBatch.restore), its state and frames read again; the
        other worlds' stay as the last step left them (what their queries read this step)."""
        self.device.restore(w, snap)
        states, (pos, mat), positions = self.device.read()
        self.states[w], self.pos[w], self.mat[w] = states[w], pos[w], mat[w]
        self.positions[w] = positions[w]
        if self.loaded == w:
            self.loaded = None
        self.fresh[:] = False

    def frame(self, w: int, slot: str) -> tuple[np.ndarray, np.ndarray]:
        """World w's position [3] and rotation [3, 3] of an object's body (by its spec name)
        or of the grip site (EEF), as computed on the device."""
        i = self.slots[slot]
        return self.pos[w, i], self.mat[w, i]

    def leaf_holds(self, w: int, leaf: Predicate) -> bool:
        """A simple predicate in world w, on what the device computed (`_WorldReads`: its
        frames, joint positions, contacts and surface distances) where it can be; else by the
        CPU scene on w's state (`on_device`)."""
        scene = self.scene
        if self.on_device(w, leaf):
            if leaf.name in GEOMETRY_PREDICATES and self.physics is not None:
                # the objects' geometry under w's draw (a cavity's walls, a peg's top)
                self.physics.apply(w)
                if self.loaded != w:
                    self.loaded = None
            return scene.leaf_holds(leaf, self.reads[w])
        self.load(w)
        self.host_leaves += 1
        return scene._leaf_holds(leaf)

    def on_device(self, w: int, leaf: Predicate) -> bool:
        """Whether world w's arrays on the device answer `leaf`: the kinematic ones and
        `inside`/`on_peg` (frames and the model's geometry) always; those reading contacts or
        surface distances while they are the last step's (`fresh`) and every geom their
        distances take is one MuJoCo Warp's convex collision takes (mjwarp.CONVEX)."""
        if leaf.name in FRAME_PREDICATES:
            return True
        if leaf.name not in CONTACT_PREDICATES or not self.fresh[w]:
            return False
        covers = self.device.contacts.covers
        return all(covers(a | b) for a, b in self.scene.distance_sets(leaf))


class _WorldReads:
    """`scene.Reads` of world w of a batch: its frames and joint positions as copied from the
    device after the last control step, its contacts and surface distances computed on the
    device when asked (`mjwarp.WorldContacts`; its contact pairs kept until the next step)."""

    def __init__(self, batch: _Batch, w: int):
        self._batch, self._w = batch, w
        self.contacts: np.ndarray | None = None  # [k, 2] geom pairs, this step's
        self.distances: dict[tuple, float] = {}  # (a, b, cap) -> distance, this step's

    @property
    def qpos(self) -> np.ndarray:
        return self._batch.states[self._w, 1 : 1 + self._batch.scene.model.nq]

    @property
    def marks(self) -> tuple[dict, dict]:
        return self._batch.marks[self._w]

    @property
    def closed(self) -> bool | None:
        return self._batch.closed[self._w]

    def position(self, obj: str) -> np.ndarray:
        return self._batch.frame(self._w, obj)[0]

    def rotation(self, obj: str) -> np.ndarray:
        return self._batch.frame(self._w, obj)[1]

    def touching(self, geoms: frozenset[int]) -> set[int]:
        """As `Scene._touching`, of the world's contacts on the device."""
        if self.contacts is None:
            self.contacts = self._batch.device.contacts.contacts(self._w)
        return touching_geoms(self.contacts[:, 0], self.contacts[:, 1], geoms)

    def distance(self, a: frozenset[int], b: frozenset[int], cap: float) -> float:
        key = (a, b, cap)
        if key not in self.distances:
            self.distances[key] = self._batch.device.contacts.distance(self._w, a, b, cap)
        return self.distances[key]


class DeviceBatch:
    """The device side of a batch, as `run_batch` drives it: the worlds from their starts, each
    under its start's physics draw (model values, OSC gains, action delay: WorldPhysics),
    their OSC loop (BatchedOSC) and hands (GripperCommands); `step` is one control step."""

    def __init__(self, worker, starts: list[WorldStart], device: str = "cpu"):
        from demofactory.simulation import mjwarp

        scene = worker.scene
        stepper = scene._fast
        if stepper is None:
            raise NotImplementedError("the robot does not take the factory's OSC loop")
        n = len(starts)
        self.worlds = mjwarp.BatchedWorlds(
            scene.model, [s.data for s in starts], nworld=n, device=device
        )
        self.physics = None if worker.physics is None else WorldPhysics(scene, starts)
        # the MuJoCo Warp model fields with a row per world (the draws changed them)
        self.per_world: list[str] = []
        if self.physics is not None:
            self.per_world = self.worlds.set_model_rows(self.physics.stacked)
        self.osc = mjwarp.BatchedOSC(
            self.worlds,
            mjwarp.ArmParams.from_stepper(stepper),
            gains=None if self.physics is None else self.physics.gains,
        )
        self.hands = mjwarp.GripperCommands(stepper, n, [s.hand for s in starts])
        self.last: np.ndarray | None = None  # each world's acting action, the last step
        # the frames the attempts ask for every control step (the grip site's pose, for the
        # next action and the proprio; the objects' poses), computed on the device
        self.scene = scene
        names = list(scene.bodies)
        self.slots = {name: i for i, name in enumerate(names)} | {EEF: len(names)}
        self.frames = mjwarp.WorldFrames(
            self.worlds, [scene.bodies[name] for name in names], [scene._eef_site]
        )
        # the contact and distance predicates' reads, computed for the world that asks
        self.contacts = mjwarp.WorldContacts(self.worlds)

    def read(self, stepped: bool = False) -> tuple:
        """(states, frames, positions): every world's state [N, 1 + nq + nv], its frames
        (`mjwarp.WorldFrames.read`, in `slots` order) and the qpos [N, nq] they and the
        contacts were computed at. `stepped`: as the last control step left them, at its last
        substep's start, as the CPU path's queries find CPU MuJoCo's data after `Scene.step`
        (`BatchedOSC.positions_qpos`); else at the state now, as after the CPU scene's reset
        or restore (an mj_forward)."""
        states = self.worlds.states()
        if stepped:
            return states, self.frames.read(kinematics=False), self.osc.positions_qpos()
        return states, self.frames.read(), states[:, 1 : 1 + self.worlds.model.nq]

    def snapshot(self, w: int) -> Snapshot:
        """World w's restorable point, as `Scene.snapshot` takes the CPU scene's: its state,
        solver warm start and ctrl (from the device), its hand's command and the actions its
        draw's delay still holds back."""
        worlds = self.worlds
        pending = () if self.physics is None else self.physics.delays[w].pending
        return Snapshot(
            state=worlds.states()[w],
            warmstart=worlds.world_rows(w, "qacc_warmstart"),
            ctrl=worlds.world_rows(w, "ctrl"),
            gripper_action=self.hands.hands[w].copy(),
            pending=tuple(a.copy() for a in pending),
        )

    def restore(self, w: int, snap: Snapshot) -> None:
        """World w exactly back to `snap` (a retried subtask starts where its first try did,
        as `Scene.restore`); the other worlds are left as they are."""
        nq = self.worlds.model.nq
        self.worlds.set_world_rows(
            w,
            time=snap.state[0],
            qpos=snap.state[1 : 1 + nq],
            qvel=snap.state[1 + nq :],
            qacc_warmstart=snap.warmstart,
            ctrl=snap.ctrl,
        )
        self.hands.hands[w] = np.array(snap.gripper_action, copy=True)
        if self.physics is not None:
            self.physics.delays[w].pending = deque(a.copy() for a in snap.pending)

    def step(self, given: dict[int, np.ndarray]) -> np.ndarray:
        """One control step of every world; `given`: world -> the action its attempt gives now
        (as to `Scene.step`: under a draw with a delay, the one given `delay` steps before
        acts). A world given none (finished, masked) repeats its last: it is held where it
        ended. Returns every world's state and frames after the step (`read`)."""
        if self.last is None:
            width = len(next(iter(given.values())))
            self.last = np.zeros((self.worlds.nworld, width))
        acting = self.last.copy()
        for w, action in given.items():
            action = np.asarray(action, dtype=np.float64)
            acting[w] = action if self.physics is None else self.physics.delays[w](action)
        self.osc.control_step(acting, self.hands.ctrl(acting))
        self.last = acting
        return self.read(stepped=True)


class WorldScene:
    """The CPU `Scene` as seen from world `w` of a batch: every query reads that world's state;
    `step` hands the action to the batch and waits for the batched step."""

    def __init__(self, batch: _Batch, w: int, turn: _Turn):
        self._batch, self._w, self._turn = batch, w, turn

    def __getattr__(self, name):  # drop_height, place_shift, controller_limits, data, ...
        self._batch.load(self._w)
        return getattr(self._batch.scene, name)

    # What an attempt asks every control step, answered from the world's frames as the device
    # computed them, without loading its state into the CPU scene (an mj_forward a world a step)
    def eef_pose(self) -> np.ndarray:
        return make_pose(*self._batch.frame(self._w, EEF))

    def object_pose(self, name: str) -> np.ndarray:
        return make_pose(*self._batch.frame(self._w, name))

    def proprio(self) -> np.ndarray:
        scene = self._batch.scene
        gripper_q = self._batch.states[self._w, 1 + scene._gripper_qpos]
        return proprio_of(*self._batch.frame(self._w, EEF), gripper_q)

    def holds(self, predicate: Predicate | str) -> bool:
        """As `Scene.holds`, its kinematic leaves on the device's values (`_Batch.leaf_holds`)."""
        p = parse_predicate(predicate) if isinstance(predicate, str) else predicate
        return p.evaluate(self._leaf_holds)

    def _leaf_holds(self, leaf: Predicate) -> bool:
        if leaf.name == "success":
            return self.success()
        return self._batch.leaf_holds(self._w, leaf)

    def success(self) -> bool:
        """As `Scene.success`: the spec's `task.success` (`holds`), else robosuite's check on
        the world's state in the CPU scene."""
        spec_success = self._batch.scene._success
        if spec_success is not None:
            return self.holds(spec_success)
        self._batch.load(self._w)
        return self._batch.scene.success()

    def reset_to(self, *args, **kwargs) -> None:
        """The world already starts where this reset puts the CPU scene (batch_starts)."""

    def get_state(self) -> np.ndarray:
        return self._batch.states[self._w].copy()

    def snapshot(self) -> Snapshot:
        """As `Scene.snapshot`, of this world (read from the device by the coordinator)."""
        return self._turn.ask(lambda: self._batch.device.snapshot(self._w))

    def restore(self, snap: Snapshot) -> None:
        """As `Scene.restore`, this world alone (written to the device by the coordinator)."""
        self._turn.ask(lambda: self._batch.restore(self._w, snap))

    def step(self, action: np.ndarray) -> None:
        """As `Scene.step`: the action goes to the batch (DeviceBatch.step delays it as the
        world's draw says); the gripper counts as closed from the action given."""
        self._turn.step(np.asarray(action, dtype=np.float64))
        sign = self._batch.scene.gripper_sign
        self._batch.closed[self._w] = bool(action[-1] * sign > 0)


class _Turn:
    """One world's thread, run only while the coordinator waits for it (a strict hand-off).

    The device is only touched from the coordinator's thread: what a world needs done there
    (a snapshot of it, a restore) it asks for (`ask`), and waits."""

    def __init__(self):
        self.go, self.back = threading.Semaphore(0), threading.Semaphore(0)
        self.action: np.ndarray | None = None
        self.request: Callable[[], Any] | None = None  # work asked of the coordinator
        self.reply: Any = None
        self.result: Attempt | None = None
        self.error: BaseException | None = None
        self.finished = False
        self.abort = False  # the batch failed: a waiting world's step raises, and it ends

    def step(self, action: np.ndarray) -> None:  # on the world's thread
        self.action = action
        self._hand_back()

    def ask(self, work: Callable[[], Any]) -> Any:  # on the world's thread
        """`work()` run on the coordinator's thread; its result."""
        self.request = work
        self._hand_back()
        reply, self.reply = self.reply, None
        return reply

    def _hand_back(self) -> None:
        self.back.release()
        self.go.acquire()
        if self.abort:
            raise RuntimeError("the batch stopped")

    def resume(self) -> None:  # on the coordinator's
        """Run the world up to its next action (or its end), doing what it asks meanwhile."""
        self.action = None
        self.go.release()
        self.back.acquire()
        while self.request is not None:
            work, self.request = self.request, None
            self.reply = work()
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
    throughput model calls h is host_s / world_steps (docs/cluster.md); `host_leaves`, the
    simple predicates the device could not answer (each loaded its world's state on the host)."""
    started = time.perf_counter()
    why = unsupported(worker.spec)
    if why is not None:
        raise NotImplementedError(f"{why} are not batched yet")
    scene = worker.scene
    if scene._fast is None:
        raise NotImplementedError("the robot does not take the factory's OSC loop")
    starts = batch_starts(worker, task)  # leaves the CPU scene nominal
    n = len(starts)
    device_batch = DeviceBatch(worker, starts, device)
    worlds, physics = device_batch.worlds, device_batch.physics
    batch = _Batch(device_batch, starts)
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
        threading.Thread(target=attempt, args=(w, start.plan), daemon=True)
        for w, start in enumerate(starts)
    ]
    for thread in threads:
        thread.start()
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
            given = {w: t.action for w, t in enumerate(turns) if t.action is not None}
            tick = time.perf_counter()
            batch.refresh(device_batch.step(given))
            clock["device_s"] += time.perf_counter() - tick
            clock["control_steps"] += 1
            clock["world_steps"] += int((~done).sum())
    finally:
        if timing is not None:
            timing.update(clock, host_leaves=batch.host_leaves)
        for turn in turns:  # a thread still waiting (an error above) is released to end
            if not turn.finished:
                turn.abort = True
                turn.go.release()
        if physics is not None:
            physics.restore()
    results = [turn.result for turn in turns]
    for attempt, start in zip(results, starts, strict=True):
        if start.draw is not None:  # as run_attempt: what a re-simulation needs
            attempt.provenance["physics"] = start.draw.to_json()
    return results
