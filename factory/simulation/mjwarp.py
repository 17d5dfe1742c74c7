"""MuJoCo Warp (`generation.backend: mjwarp`): the checks, and a batch of worlds of one model.

    factory validate, backend mjwarp
      ──► require_mjwarp: the gpu extra imports (else one line: how to install it)
      ──► check_model: mujoco_warp's own put_model takes the env's MjModel on warp's CPU device
          (else one line: the feature it refused, and the fallback, backend cpu)
    BatchedWorlds(model, states, device)
      ──► N worlds in lockstep: set_ctrl [N, nu] ─► step() (one mujoco_warp.step for all)
          ─► qpos / qvel [N, ...] on the host; finished worlds are masked (their state held)

MuJoCo Warp computes in float32, CPU MuJoCo in float64: the two never agree bit for bit, so a
dataset records which backend made it and a resume with the other one is refused
(demofactory.build.output_dir). tests/simulation/test_mjwarp_reference.py bounds the per-step
difference on Stack against CPU MuJoCo, the same state and controls both ways.

    BatchedOSC(worlds, ArmParams.from_stepper(fast_stepper))
      ──► per control step: step1 ─► every world's goal from its own pose (arm_goal kernel)
          ─► per substep: mujoco_warp.jac ─► OSC torques, every world in one warp kernel
             (mjwarp_kernels.osc_torques) ─► step2; the masked worlds skipped and held

    GripperCommands(fast_stepper, N): each world's gripper ctrl from its actions (robosuite's
      speed-limited command, a hand state per world, on the host)

The attempt loop over these is demofactory.build.batched (run_batch); what it does not batch
is refused there and at `factory run` (docs/mjwarp.md).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import mujoco
import numpy as np
from demofactory.errors import SpecError

INSTALL = "pip install 'demofactory[gpu]'"
FALLBACK = "set generation.backend: cpu"
# Contacts and constraint rows per world MuJoCo Warp preallocates (it cannot grow them while
# stepping): the CPU data's own count times this, at least the floors below. Stack starts with
# 8 contacts and 33 rows, 13 and 48 at most over bench_batched's trace (measured); a batch that
# runs out is an error (`BatchedWorlds.check_capacity`), not dropped contacts.
HEADROOM = 4
MIN_CONTACTS, MIN_ROWS = 64, 256


@functools.cache
def _import():
    """(warp, mujoco_warp) or the ImportError's text."""
    try:
        import mujoco_warp
        import warp
    except ImportError as err:
        return str(err)
    warp.config.quiet = True  # warp prints its device table and each kernel load otherwise
    return warp, mujoco_warp


def available() -> bool:
    return not isinstance(_import(), str)


def require_mjwarp(where: str) -> tuple:
    """(warp, mujoco_warp), or SpecError: the extra is not installed, and how to install it."""
    found = _import()
    if isinstance(found, str):
        raise SpecError(
            where,
            "generation.backend",
            f"mjwarp needs MuJoCo Warp, which is not installed ({found}): {INSTALL}, or {FALLBACK}",
        )
    return found


def default_device() -> str:
    """The device a run's batches go to: the first CUDA device warp sees, else warp's CPU."""
    warp, _ = require_mjwarp("<backend>")
    return "cuda:0" if warp.is_cuda_available() else "cpu"


def versions() -> dict[str, str]:
    """The versions a dataset made with MuJoCo Warp records beside the backend's name."""
    warp, mujoco_warp = require_mjwarp("<backend>")
    from importlib import metadata

    return {
        "mujoco_warp": metadata.version("mujoco-warp"),
        "warp": warp.__version__,
        "mujoco": mujoco.__version__,
    }


def refusal(model: mujoco.MjModel) -> str | None:
    """What MuJoCo Warp refuses in `model` (its own put_model's message), or None.

    Its checks are the authority (the features it implements change from release to release),
    so the model is put on warp's CPU device, which needs no GPU and takes ~0.1 s on Stack."""
    warp, mujoco_warp = require_mjwarp("<backend>")
    try:
        with warp.ScopedDevice("cpu"):
            mujoco_warp.put_model(model)
    except (NotImplementedError, ValueError) as err:
        return str(err).strip().rstrip(".")
    return None


def check_model(model: mujoco.MjModel, where: str) -> None:
    """SpecError naming the feature MuJoCo Warp does not support in `model`, and the fallback."""
    why = refusal(model)
    if why is not None:
        raise SpecError(
            where,
            "generation.backend",
            f"MuJoCo Warp cannot run this model ({why}); {FALLBACK} (MuJoCo on the CPU)",
        )


class BatchedWorlds:
    """N worlds of one model stepped together by mujoco_warp on `device` ("cpu", "cuda:0").

    `start`: an MjData every world starts from (its whole state: qpos, qvel, act, ctrl,
    warm start), or a list of N of them (per-world placements). `mask(done)` holds the worlds
    marked done where they are: a batch runs until its last world finishes, and a finished
    world's stored trajectory must end where it succeeded."""

    def __init__(self, model: mujoco.MjModel, start, nworld: int, device: str = "cpu"):
        warp, mujoco_warp = require_mjwarp("<backend>")
        self.warp, self.mjw, self.device = warp, mujoco_warp, device
        self.model, self.nworld = model, nworld
        starts = start if isinstance(start, list) else [start] * nworld
        if len(starts) != nworld:
            raise ValueError(f"{len(starts)} start states for {nworld} worlds")
        first = starts[0]
        contacts = max(MIN_CONTACTS, HEADROOM * max(d.ncon for d in starts))
        rows = max(MIN_ROWS, HEADROOM * max(d.nefc for d in starts))
        with warp.ScopedDevice(device):
            self.wmodel = mujoco_warp.put_model(model)
            self.wdata = mujoco_warp.put_data(
                model, first, nworld=nworld, nconmax=contacts, njmax=rows
            )
        if any(d is not first for d in starts):
            self._write(
                qpos=np.stack([d.qpos for d in starts]),
                qvel=np.stack([d.qvel for d in starts]),
                act=np.stack([d.act for d in starts]),
                ctrl=np.stack([d.ctrl for d in starts]),
                qacc_warmstart=np.stack([d.qacc_warmstart for d in starts]),
                time=np.array([d.time for d in starts]),
            )
        self.done = np.zeros(nworld, dtype=bool)
        self._held: dict[str, np.ndarray] | None = None

    def set_model_rows(self, rows: dict[str, np.ndarray]) -> list[str]:
        """Per-world model values: `rows` maps a name of `physics.model_rows` ("body_mass",
        "opt.gravity", "stat.meaninertia", ...) to its values in every world, [N, ...].
        MuJoCo Warp reads a model field of shape [K, ...] at world w from row w % K (its `*`
        fields: one row, every world alike, as put_model makes them); each field named is
        replaced by one with a row per world. The names MuJoCo Warp's model has no field for
        (dof_M0, dof_length, actuator_length0, the statistics but meaninertia: CPU MuJoCo's
        own, which MuJoCo Warp does not read) are left out; the names used are returned."""
        used = []
        with self.warp.ScopedDevice(self.device):
            for name, values in rows.items():
                owner, field = self.wmodel, name
                if "." in name:
                    head, field = name.split(".", 1)
                    owner = getattr(self.wmodel, head)
                old = getattr(owner, field, None)
                if old is None:
                    continue
                values = np.asarray(values)
                if len(values) != self.nworld:
                    raise ValueError(f"{name}: {len(values)} rows for {self.nworld} worlds")
                shape = (self.nworld, *old.shape[1:])  # old: [1, ...] of the dtype's items
                new = self.warp.array(
                    values.astype(np.float32).reshape(*shape, *_item_shape(old.dtype)),
                    dtype=old.dtype,
                    shape=shape,
                )
                setattr(owner, field, new)
                used.append(name)
        return used

    def check_capacity(self) -> None:
        """RuntimeError when the contacts or constraint rows outgrew what was preallocated:
        MuJoCo Warp then leaves the rest out (it prints, and steps on), and the states would
        no longer be the model's."""
        d = self.wdata
        contacts, rows = int(d.nacon.numpy()[0]), int(d.nefc.numpy().max())
        if contacts > d.naconmax or rows > d.njmax:
            raise RuntimeError(
                f"MuJoCo Warp ran out of room: {contacts} contacts for {d.naconmax}, "
                f"{rows} constraint rows for {d.njmax} (mjwarp.HEADROOM)"
            )

    def world_rows(self, w: int, name: str) -> np.ndarray:
        """World w's values of a data field ("ctrl", "qacc_warmstart", ...), float64."""
        return self._read(name)[w]

    def set_world_rows(self, w: int, **fields: np.ndarray) -> None:
        """World w's values of data fields (qpos=..., ctrl=...); the other worlds' stay. A
        whole field's round trip: what a subtask retry's restore needs, a few an attempt."""
        rows = {}
        for name, values in fields.items():
            now = self._read(name)
            now[w] = values
            rows[name] = now
        self._write(**rows)

    def _write(self, **fields: np.ndarray) -> None:
        for name, values in fields.items():
            target = getattr(self.wdata, name)
            target.assign(self.warp.array(values.astype(np.float32), device=self.device))

    def _read(self, name: str) -> np.ndarray:
        return getattr(self.wdata, name).numpy().astype(np.float64)

    @property
    def qpos(self) -> np.ndarray:
        return self._read("qpos")

    @property
    def qvel(self) -> np.ndarray:
        return self._read("qvel")

    def states(self) -> np.ndarray:
        """[N, 1 + nq + nv]: time, qpos, qvel per world (the CPU path's state layout)."""
        return np.concatenate([self._read("time")[:, None], self.qpos, self.qvel], axis=1)

    def set_ctrl(self, ctrl: np.ndarray) -> None:
        """ctrl [N, nu] (or [nu]: every world alike)."""
        ctrl = np.broadcast_to(np.asarray(ctrl, dtype=np.float64), (self.nworld, self.model.nu))
        self._write(ctrl=np.ascontiguousarray(ctrl))

    def mask(self, done: np.ndarray) -> None:
        """Mark worlds finished (done [N] bool, added to those already): from now on their
        state stays as it is now."""
        self.done |= np.asarray(done, dtype=bool)
        if self.done.any():
            self._held = {n: self._read(n) for n in ("qpos", "qvel", "act", "time")}

    def step(self, substeps: int = 1) -> None:
        """`substeps` physics steps of every world; the masked ones are put back after."""
        with self.warp.ScopedDevice(self.device):
            for _ in range(substeps):
                self.mjw.step(self.wmodel, self.wdata)
            self.warp.synchronize()
        if substeps:
            self.check_capacity()
        if self._held is not None:
            # Held on the host: a finished world's few arrays written back after each step
            # (mujoco_warp steps every world; a per-world skip needs its kernels changed).
            now = {n: self._read(n) for n in self._held}
            keep = self.done
            self._write(**{n: np.where(_rows(keep, v), self._held[n], v) for n, v in now.items()})


class WorldFrames:
    """Where some bodies and sites are in every world (what `Scene.eef_pose`, `object_pose`
    and `proprio` read), gathered on the device into one [N, k, 12] array and copied in one
    transfer. After a control step the bodies' and sites' positions on the device are those
    of the state before the last integration (step1 computes them, step2 moves the state on),
    as CPU MuJoCo's are after the CPU path's control step, which is what its queries read:
    `read(kinematics=False)` gathers those; `read()` first recomputes them for the state now
    (after a reset or a restore: mj_forward's)."""

    def __init__(self, worlds: BatchedWorlds, bodies: Sequence[int], sites: Sequence[int]):
        from demofactory.simulation import mjwarp_kernels

        wp = worlds.warp
        self.worlds, self.nbody = worlds, len(bodies)
        self._gather = mjwarp_kernels.gather_frames
        with wp.ScopedDevice(worlds.device):
            self._bodies = wp.array(np.asarray(bodies, dtype=np.int32), dtype=int)
            self._sites = wp.array(np.asarray(sites, dtype=np.int32), dtype=int)
            self._out = wp.zeros((worlds.nworld, len(bodies) + len(sites), 12), dtype=float)

    def read(self, kinematics: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """(positions [N, k, 3], rotations [N, k, 3, 3]), float64: the bodies given, then the
        sites, in their order, in every world; `kinematics`: computed for the state now
        first, else as the last step left them."""
        worlds, wp = self.worlds, self.worlds.warp
        d = worlds.wdata
        with wp.ScopedDevice(worlds.device):
            if kinematics:
                worlds.mjw.kinematics(worlds.wmodel, d)
            wp.launch(
                self._gather,
                dim=self._out.shape[:2],
                inputs=[d.xpos, d.xmat, d.site_xpos, d.site_xmat, self._bodies, self._sites],
                outputs=[self._out],
            )
            frames = self._out.numpy().astype(np.float64)
        n, k = frames.shape[:2]
        return frames[..., :3], frames[..., 3:].reshape(n, k, 3, 3)


# Geom types MuJoCo Warp's convex collision (GJK/EPA) takes; a pair with another (a plane, a
# height field, an SDF) has no distance on the device (WorldContacts.covers).
CONVEX = frozenset(
    {
        mujoco.mjtGeom.mjGEOM_SPHERE,
        mujoco.mjtGeom.mjGEOM_CAPSULE,
        mujoco.mjtGeom.mjGEOM_ELLIPSOID,
        mujoco.mjtGeom.mjGEOM_CYLINDER,
        mujoco.mjtGeom.mjGEOM_BOX,
        mujoco.mjtGeom.mjGEOM_MESH,
    }
)


class WorldContacts:
    """What the contact and distance predicates read of one world, computed on the device
    where the world's geoms are now (after a control step: where its last step1 put them, as
    CPU MuJoCo's data holds them after the CPU path's step): the geom pairs in contact
    (`contacts`: MuJoCo Warp's own contact list, the world's rows) and the surface distance
    between two geom sets (`distance`: MuJoCo Warp's GJK/EPA, a thread a pair, as CPU MuJoCo's
    mj_geomDistance). One launch and one small copy each, for the world that asks."""

    def __init__(self, worlds: BatchedWorlds):
        from demofactory.simulation import mjwarp_kernels

        wp = worlds.warp
        self.worlds, self._k = worlds, mjwarp_kernels
        self._types = worlds.model.geom_type
        d = worlds.wdata
        with wp.ScopedDevice(worlds.device):
            self._count = wp.zeros(1, dtype=int)
            self._pairs_out = wp.zeros(d.naconmax, dtype=wp.vec2i)
        # geom pairs on the device and their distances' array, by geom set pair
        self._sets: dict[tuple[frozenset, frozenset], tuple] = {}
        self._rows = 0  # EPA scratch rows allocated (one a pair)

    def covers(self, geoms) -> bool:
        """Whether every geom of `geoms` has a distance on the device (a convex type)."""
        return all(int(self._types[g]) in CONVEX for g in geoms)

    def contacts(self, w: int) -> np.ndarray:
        """[k, 2] geom ids of world w's contacts (CPU MuJoCo's data.contact.geom), any order."""
        worlds, wp = self.worlds, self.worlds.warp
        d = worlds.wdata
        with wp.ScopedDevice(worlds.device):
            self._count.zero_()
            wp.launch(
                self._k.world_contacts,
                dim=d.naconmax,
                inputs=[d.nacon, d.contact.geom, d.contact.worldid, d.contact.type, w],
                outputs=[self._count, self._pairs_out],
            )
            n = int(self._count.numpy()[0])
            return self._pairs_out.numpy()[:n].reshape(n, 2)

    def distance(self, w: int, a: frozenset, b: frozenset, cap: float) -> float:
        """Smallest signed surface distance between geom sets a and b in world w, as
        `Scene._distance` (more than `cap`: some value over it). Every geom convex (`covers`)."""
        if not a or not b:
            return cap + 1.0
        worlds, wp = self.worlds, self.worlds.warp
        m, d = worlds.wmodel, worlds.wdata
        key = (a, b)
        with wp.ScopedDevice(worlds.device):
            if key not in self._sets:
                ids = np.array([(g, h) for g in sorted(a) for h in sorted(b)], dtype=np.int32)
                self._sets[key] = (wp.array(ids, dtype=wp.vec2i), wp.empty(len(ids), dtype=float))
            pairs, out = self._sets[key]
            if pairs.shape[0] > self._rows:
                self._scratch(pairs.shape[0])
            wp.launch(
                self._k.geom_distances,
                dim=pairs.shape[0],
                inputs=[
                    m.geom_type,
                    m.geom_dataid,
                    m.geom_size,
                    m.mesh_vertadr,
                    m.mesh_vertnum,
                    m.mesh_graphadr,
                    m.mesh_vert,
                    m.mesh_graph,
                    m.mesh_polynum,
                    m.mesh_polyadr,
                    m.mesh_polynormal,
                    m.mesh_polyvertadr,
                    m.mesh_polyvertnum,
                    m.mesh_polyvert,
                    m.mesh_polymapadr,
                    m.mesh_polymapnum,
                    m.mesh_polymap,
                    m.opt.ccd_tolerance,
                    m.opt.ccd_iterations,
                    d.geom_xpos,
                    d.geom_xmat,
                    w,
                    pairs,
                    cap + 1.0,
                    *self._epa,
                ],
                outputs=[out],
            )
            return min(float(out.numpy().min()), cap + 1.0)

    def _scratch(self, rows: int) -> None:
        """EPA's work arrays, a row a pair (sized as MuJoCo Warp's narrowphase sizes them)."""
        from mujoco_warp._src.types import MJ_MAX_EPAFACES, MJ_MAX_EPAHORIZON

        wp = self.worlds.warp
        it = self.worlds.wmodel.opt.ccd_iterations
        verts, faces = 10 + 2 * it, 6 + MJ_MAX_EPAFACES * it
        self._epa = [
            wp.empty((rows, verts), dtype=wp.vec3),
            wp.empty((rows, verts), dtype=int),
            wp.empty((rows, faces), dtype=int),
            wp.empty((rows, faces), dtype=wp.vec3),
            wp.empty((rows, faces), dtype=float),
            wp.empty((rows, MJ_MAX_EPAHORIZON), dtype=int),
        ]
        self._rows = rows


def _item_shape(dtype) -> tuple[int, ...]:
    """The numpy shape of one item of a warp dtype: () for float, (3,) for vec3, (3, 3)..."""
    return tuple(getattr(dtype, "_shape_", ()))


def _rows(mask: np.ndarray, values: np.ndarray) -> np.ndarray:
    return mask.reshape((-1,) + (1,) * (values.ndim - 1))


@dataclasses.dataclass(frozen=True)
class ArmParams:
    """What the OSC loop needs of a robot, as plain arrays: the CPU path's `FastStepper`'s
    indices, gains, ranges and action scaling (`from_stepper`), so that a batch (or a
    benchmark where robosuite is missing, `as_arrays` / `from_arrays`) computes with exactly
    the same ones."""

    qvel_index: np.ndarray
    qpos_index: np.ndarray
    kp: np.ndarray
    kd: np.ndarray
    initial_joint: np.ndarray
    arm_act: np.ndarray
    arm_low: np.ndarray
    arm_high: np.ndarray
    grip_act: np.ndarray
    grip_low: np.ndarray
    grip_high: np.ndarray
    scaling: np.ndarray  # [5, 6]: input min, input max, input shift, scale, output shift
    ref_site: int
    center_site: int
    arm_first: int  # the arm's first component in the action
    substeps: int

    @classmethod
    def from_stepper(cls, stepper) -> ArmParams:
        if stepper.joint or stepper.absolute:  # generation's controller is delta OSC_POSE
            raise NotImplementedError("BatchedOSC runs the delta OSC_POSE controller only")
        if stepper._arm_scale is None:
            stepper._world_goal(np.zeros(7))  # robosuite computes its scale on first use
        return cls(
            **{
                f: np.asarray(getattr(stepper, f))
                for f in ("qvel_index", "qpos_index", "kp", "kd", "arm_act", "arm_low")
                + ("arm_high", "grip_act", "grip_low", "grip_high")
            },
            initial_joint=np.asarray(stepper._initial_joint),
            scaling=np.array(stepper._arm_scale),
            ref_site=int(stepper.ref_site),
            center_site=int(stepper.center_site),
            arm_first=int(stepper.arm_slice.start or 0),
            substeps=int(stepper.substeps),
        )

    def as_arrays(self, prefix: str = "arm_") -> dict[str, np.ndarray]:
        return {
            prefix + f.name: np.asarray(getattr(self, f.name)) for f in dataclasses.fields(self)
        }

    @classmethod
    def from_arrays(cls, arrays, prefix: str = "arm_") -> ArmParams:
        values = {f.name: np.asarray(arrays[prefix + f.name]) for f in dataclasses.fields(cls)}
        for name in ("ref_site", "center_site", "arm_first", "substeps"):
            values[name] = int(values[name])
        return cls(**values)


class GripperCommands:
    """Each world's gripper ctrl from its actions: robosuite's own speed-limited command
    (`format_action`, which keeps the hand's state) and scaling, as `FastStepper._set_grip`
    computes it, with one hand state per world. On the host: it depends on the actions alone,
    and robosuite's gripper classes differ in how they format."""

    def __init__(self, stepper, nworld: int, hands: list | None = None):
        """`hands`: each world's hand state to start from (robosuite's `current_action` as
        its attempt's reset left it); None: the stepper's hand now, in every world."""
        self.stepper = stepper
        if hands is None:
            now = np.array(stepper.gripper_model.current_action, copy=True)
            hands = [now] * nworld
        if len(hands) != nworld:
            raise ValueError(f"{len(hands)} hand states for {nworld} worlds")
        self.hands = [np.array(h, copy=True) for h in hands]

    def ctrl(self, actions: np.ndarray) -> np.ndarray:
        """[N, ng] the gripper's ctrl, clipped to its range, for actions [N, 7]."""
        stepper = self.stepper
        hand = stepper.gripper_model
        saved = (np.array(hand.current_action, copy=True), getattr(stepper, "_grip_ctrl", None))
        out = []
        try:
            for w, action in enumerate(actions):
                hand.current_action = self.hands[w]
                stepper._set_grip(np.asarray(action))
                self.hands[w] = np.array(hand.current_action, copy=True)
                out.append(np.clip(stepper._grip_ctrl, stepper.grip_low, stepper.grip_high))
        finally:  # the CPU path's own hand is left as it was
            hand.current_action = saved[0]
            if saved[1] is not None:
                stepper._grip_ctrl = saved[1]
        return np.array(out, dtype=np.float64).reshape(len(actions), -1)


class BatchedOSC:
    """robosuite's OSC_POSE arm for every world at once, on the device.

    Per control step: mujoco_warp's step1, then every world's world-frame goal from its own
    pose (`mjwarp_kernels.arm_goal`: `fast_step.arm_goal`) and the gripper's ctrl; per
    substep: mujoco_warp's `jac` of the reference site and its mass matrix feed
    `mjwarp_kernels.osc_torques` (`fast_step.osc_torques`: uncoupled position and
    orientation, gravity compensation, nullspace posture), the torques clipped into ctrl
    as `osc_control` does, then step2. A control step's only transfers to the device are the
    actions [N, 7], the gripper's ctrl [N, ng] and the mask [N]. The finished worlds
    (`worlds.mask`) get no new torques and are held where they finished."""

    def __init__(
        self,
        worlds: BatchedWorlds,
        arm: ArmParams,
        gains: tuple[np.ndarray, np.ndarray] | None = None,
    ):
        """`gains`: (kp, kd), each [N, 6], every world's own (a physics draw scales them per
        attempt); None: the arm's for every world."""
        from demofactory.simulation import mjwarp_kernels

        if worlds.wmodel.is_sparse:
            raise NotImplementedError("BatchedOSC reads a dense mass matrix (nv <= 60 here)")
        self.worlds, self.arm, self._kernels = worlds, arm, mjwarp_kernels
        wp, nworld, n = worlds.warp, worlds.nworld, len(arm.qvel_index)
        with wp.ScopedDevice(worlds.device):

            def ints(values):
                return wp.array(np.asarray(values, dtype=np.int32), dtype=int)

            def floats(values):
                return wp.array(np.asarray(values, dtype=np.float32), dtype=float)

            kp, kd = (arm.kp[None], arm.kd[None]) if gains is None else gains
            if np.shape(kp) != (nworld, len(arm.kp)) and gains is not None:
                raise ValueError(f"gains of shape {np.shape(kp)} for {nworld} worlds")
            self._const = (
                ints(arm.qvel_index),
                ints(arm.qpos_index),
                floats(kp),
                floats(kd),
                floats(arm.initial_joint),
                ints(arm.arm_act),
                floats(arm.arm_low),
                floats(arm.arm_high),
            )
            self._grip = (ints(arm.grip_act), floats(arm.grip_low), floats(arm.grip_high))
            self._scaling = wp.array(arm.scaling.astype(np.float32), dtype=float)
            body = int(worlds.model.site_bodyid[arm.ref_site])
            self._body = ints(np.full(nworld, body))
            self._point = wp.zeros(nworld, dtype=wp.vec3)
            nv = worlds.model.nv
            self._jacp = wp.zeros((nworld, 3, nv), dtype=float)
            self._jacr = wp.zeros((nworld, 3, nv), dtype=float)
            self._scratch = (
                wp.zeros((nworld, 6, n), dtype=float),  # the arm's Jacobian
                wp.zeros((nworld, n, n), dtype=float),  # its mass matrix
                wp.zeros((nworld, n, n), dtype=float),  # its Cholesky factor
                wp.zeros((nworld, 6, 6), dtype=float),  # J M^-1 J^T
                wp.zeros((nworld, 3, 3), dtype=float),  # one 3x3 block of it
                wp.zeros((nworld, 4, n), dtype=float),  # column, posture goal, M goal, M^-1 ...
                wp.zeros((nworld, 3, 6), dtype=float),  # wrench, a 3-vector of it, L J M^-1 ...
            )
            self._actions = wp.zeros((nworld, 7), dtype=float)
            # qpos at the last substep's mj_step1: what the bodies' positions and contacts left
            # on the device after a control step were computed at (positions_qpos)
            self._positions_qpos = wp.zeros((nworld, worlds.model.nq), dtype=float)
            self._grip_ctrl = wp.zeros((nworld, len(arm.grip_act)), dtype=float)
            self._goal_pos = wp.zeros(nworld, dtype=wp.vec3)
            self._goal_ori = wp.zeros(nworld, dtype=wp.mat33)
            self._active = wp.ones(nworld, dtype=int)

    def control_step(self, actions: np.ndarray, grip: np.ndarray) -> None:
        """One control step of every world: actions [N, 7] (OSC delta pose + gripper), grip
        [N, ng] the gripper's ctrl (robosuite's speed-limited command, formatted per attempt
        on the host: it depends on the actions only)."""
        worlds, wp, mjw, k = self.worlds, self.worlds.warp, self.worlds.mjw, self._kernels
        d = worlds.wdata
        with wp.ScopedDevice(worlds.device):
            given = np.ascontiguousarray(actions, dtype=np.float32)
            if self._actions.shape != given.shape:  # the gripper's share of an action varies
                self._actions = wp.array(given, dtype=float)
            else:
                self._actions.assign(given)
            self._grip_ctrl.assign(np.ascontiguousarray(grip, dtype=np.float32))
            self._active.assign((~worlds.done).astype(np.int32))
            mjw.step1(worlds.wmodel, d)
            arm = self.arm
            wp.launch(
                k.arm_goal,
                dim=worlds.nworld,
                inputs=[self._actions, arm.arm_first, self._scaling, d.site_xpos, d.site_xmat]
                + [arm.center_site, arm.ref_site],
                outputs=[self._goal_pos, self._goal_ori],
            )
            wp.launch(
                k.set_columns,
                dim=(worlds.nworld, len(arm.grip_act)),
                inputs=[d.ctrl, self._grip[0], self._grip_ctrl, self._grip[1], self._grip[2]],
            )
            for i in range(arm.substeps):
                if i:
                    mjw.step1(worlds.wmodel, d)
                self._torques()
                if i == arm.substeps - 1:
                    wp.copy(self._positions_qpos, d.qpos)
                mjw.step2(worlds.wmodel, d)
            wp.synchronize()
        worlds.check_capacity()
        if worlds._held is not None:
            worlds.step(0)  # put the finished worlds back

    def positions_qpos(self) -> np.ndarray:
        """[N, nq]: each world's qpos at its last control step's last mj_step1, which the
        bodies', sites' and geoms' positions and the contacts on the device were computed at,
        and which CPU MuJoCo's data holds them at after the CPU path's control step (mj_step1
        computes them, mj_step2 moves the state on; nothing recomputes them before the next
        step)."""
        return self._positions_qpos.numpy().astype(np.float64)

    def _torques(self) -> None:
        worlds, wp, mjw, k = self.worlds, self.worlds.warp, self.worlds.mjw, self._kernels
        d = worlds.wdata
        site = self.arm.ref_site
        wp.launch(k.gather_point, dim=worlds.nworld, inputs=[d.site_xpos, site, self._point])
        mjw.jac(worlds.wmodel, d, self._jacp, self._jacr, self._point, self._body)
        wp.launch(
            k.osc_torques,
            dim=worlds.nworld,
            inputs=[self._active, self._jacp, self._jacr, d.M, d.qvel, d.qpos, d.qfrc_bias]
            + [d.site_xpos, d.site_xmat, site, self._goal_pos, self._goal_ori]
            + [*self._const, *self._scratch],
            outputs=[d.ctrl],
        )
