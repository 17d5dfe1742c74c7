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

Not landed yet: the batched attempt loop (OSC, goals and predicates for all worlds on the
device); `factory run` refuses backend mjwarp until it is (docs/mjwarp.md).
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
