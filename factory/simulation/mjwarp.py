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
(demofactory.build.output_dir). tests/test_mjwarp_reference.py bounds the per-step difference
on Stack against CPU MuJoCo, the same state and controls both ways.

    BatchedOSC(worlds, stepper)
      ──► per control step: step1 ─► goals from each world's pose (host, fast_step.arm_goal)
          ─► per substep: mujoco_warp.jac ─► OSC torques, every world in one warp kernel
             (mjwarp_kernels.osc_torques) ─► step2; the masked worlds skipped and held

Not landed yet: the rest of the batched attempt loop (retargeted targets, the gripper's
speed-limited command and the predicates per world, each success's states recorded);
`factory run` refuses backend mjwarp until it is (docs/mjwarp.md).
"""

from __future__ import annotations

import functools

import mujoco
import numpy as np
from demofactory.errors import SpecError

INSTALL = "pip install 'demofactory[gpu]'"
FALLBACK = "set generation.backend: cpu"
# Contacts and constraint rows per world MuJoCo Warp preallocates (it cannot grow them while
# stepping): the CPU data's own count times this, at least the floors below. Stack holds ~20
# contacts and ~100 rows while a cube is grasped (measured).
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
        if self._held is not None:
            # Held on the host: a finished world's few arrays written back after each step
            # (mujoco_warp steps every world; a per-world skip needs its kernels changed).
            now = {n: self._read(n) for n in self._held}
            keep = self.done
            self._write(**{n: np.where(_rows(keep, v), self._held[n], v) for n, v in now.items()})


def _rows(mask: np.ndarray, values: np.ndarray) -> np.ndarray:
    return mask.reshape((-1,) + (1,) * (values.ndim - 1))


class BatchedOSC:
    """robosuite's OSC_POSE arm torques for every world at once, on the device.

    The formulas of `demofactory.simulation.fast_step.osc_torques` (uncoupled position and
    orientation, gravity compensation, nullspace posture; Cholesky solves instead of
    inverses) in one warp kernel, a thread a world, fed by mujoco_warp's own step1, jac
    and mass matrix; the torques are clipped to the ctrlrange and written into the worlds'
    ctrl, as `osc_control` does. The arm's parameters come from the CPU path's
    `FastStepper` on the same model, so both compute with the same gains and indices.

    `step(goal_pos [N, 3], goal_ori [N, 3, 3], grip [N, ng], substeps)`: one control step,
    the torques recomputed at every substep (step1 ─► jac ─► torques ─► step2), the gripper's
    ctrl held, as the CPU loop does. The world-frame goals are computed by the caller from
    the actions (`goal_from_action`: on the host for now)."""

    def __init__(self, worlds: BatchedWorlds, stepper):
        self.worlds, self.stepper = worlds, stepper
        wp = worlds.warp
        if worlds.wmodel.is_sparse:
            raise NotImplementedError("BatchedOSC reads a dense mass matrix (nv <= 60 here)")
        from demofactory.simulation import mjwarp_kernels

        self._kernels = mjwarp_kernels
        n, nworld, device = len(stepper.qvel_index), worlds.nworld, worlds.device
        with wp.ScopedDevice(device):

            def ints(values):
                return wp.array(np.asarray(values, dtype=np.int32), dtype=int)

            def floats(values):
                return wp.array(np.asarray(values, dtype=np.float32), dtype=float)

            self._const = (
                ints(stepper.qvel_index),
                ints(stepper.qpos_index),
                floats(stepper.kp),
                floats(stepper.kd),
                floats(stepper._initial_joint),
                ints(stepper.arm_act),
                floats(stepper.arm_low),
                floats(stepper.arm_high),
            )
            self._site = int(stepper.ref_site)
            body = int(worlds.model.site_bodyid[self._site])
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
                wp.zeros((nworld, 4, n), dtype=float),  # vectors of n: column, goal, posture, moved
                wp.zeros((nworld, 3, 6), dtype=float),  # vectors of 6: wrench, part, through
            )
            self._goal_pos = wp.zeros(nworld, dtype=wp.vec3)
            self._goal_ori = wp.zeros(nworld, dtype=wp.mat33)
            self._active = wp.ones(nworld, dtype=int)

    def goals_from_actions(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """World-frame goals [N, 3], [N, 3, 3] of OSC delta actions [N, 6+] from each world's
        pose now (after step1): `fast_step.arm_goal` per world, on the host."""
        from demofactory.simulation.fast_step import arm_goal

        stepper = self.stepper
        if stepper._arm_scale is None:
            stepper._world_goal(np.zeros(7))  # robosuite computes its scale on first use
        xpos = self.worlds.wdata.site_xpos.numpy().astype(np.float64)
        xmat = self.worlds.wdata.site_xmat.numpy().astype(np.float64)
        center, ref = stepper.center_site, stepper.ref_site
        pos, ori = [], []
        for w, action in enumerate(np.asarray(actions, dtype=np.float64)):
            p, o = arm_goal(
                np.ascontiguousarray(action[stepper.arm_slice]),
                *stepper._arm_scale,
                xpos[w, center],
                np.ascontiguousarray(xmat[w, center]),
                xpos[w, ref],
                np.ascontiguousarray(xmat[w, ref]),
            )
            pos.append(p)
            ori.append(o)
        return np.array(pos), np.array(ori)

    def control_step(self, actions: np.ndarray, grip: np.ndarray) -> None:
        """One control step of every world: actions [N, 7] (the goals from each world's pose
        at the first substep), grip [N, ng] the gripper's ctrl (robosuite's speed-limited
        command, formatted per attempt on the host)."""
        worlds, wp, mjw = self.worlds, self.worlds.warp, self.worlds.mjw
        substeps = self.stepper.substeps
        with wp.ScopedDevice(worlds.device):
            mjw.step1(worlds.wmodel, worlds.wdata)
            pos, ori = self.goals_from_actions(actions)
            self._goal_pos.assign(wp.array(pos.astype(np.float32), dtype=wp.vec3))
            self._goal_ori.assign(wp.array(ori.astype(np.float32), dtype=wp.mat33))
            self._active.assign(wp.array((~worlds.done).astype(np.int32), dtype=int))
            ctrl = worlds.wdata.ctrl.numpy()
            low, high = self.stepper.grip_low, self.stepper.grip_high
            ctrl[:, self.stepper.grip_act] = np.clip(grip, low, high)
            worlds.wdata.ctrl.assign(wp.array(ctrl, dtype=float))
            for i in range(substeps):
                if i:
                    mjw.step1(worlds.wmodel, worlds.wdata)
                self._torques()
                mjw.step2(worlds.wmodel, worlds.wdata)
            wp.synchronize()
        if worlds._held is not None:
            worlds.step(0)  # put the finished worlds back

    def _torques(self) -> None:
        worlds, wp, mjw = self.worlds, self.worlds.warp, self.worlds.mjw
        d = worlds.wdata
        wp.launch(
            self._kernels.gather_point,
            dim=worlds.nworld,
            inputs=[d.site_xpos, self._site],
            outputs=[self._point],
        )
        mjw.jac(worlds.wmodel, d, self._jacp, self._jacr, self._point, self._body)
        wp.launch(
            self._kernels.osc_torques,
            dim=worlds.nworld,
            inputs=[
                self._active,
                self._jacp,
                self._jacr,
                d.M,
                d.qvel,
                d.qpos,
                d.qfrc_bias,
                d.site_xpos,
                d.site_xmat,
                self._site,
                self._goal_pos,
                self._goal_ori,
                *self._const,
                *self._scratch,
            ],
            outputs=[d.ctrl],
        )
