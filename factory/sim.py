"""The simulation adapter: a robosuite env built from a spec, seen through poses and states.

`Scene` is the only place that touches robosuite internals. Generation runs it
with cameras off; rendering restores recorded states into the same model.
"""

from __future__ import annotations

import os

# Offscreen rendering must be chosen before robosuite (and so mujoco's GL) is imported.
os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])

import logging  # noqa: E402
from collections.abc import Mapping  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import mujoco  # noqa: E402
import numpy as np  # noqa: E402

from factory.errors import SpecError  # noqa: E402
from factory.predicates import Predicate, parse_predicate  # noqa: E402
from factory.spec import SceneSpec, TaskSpec  # noqa: E402
from generators.poses import make_pose, mat_to_quat  # noqa: E402

GRASP_MARGIN = 0.003  # metres between each finger pad and the object for `grasped`
PROPRIO_LAYOUT = (("eef_pos", 3), ("eef_quat_xyzw", 4), ("gripper_qpos", 2))
ACTION_LAYOUT = (("delta_pos", 3), ("delta_axis_angle", 3), ("gripper", 1))


# robosuite logs a page of warnings at import and per env (no private macro file, unused
# controller parts, optional robot packages); none is actionable for a factory user. A
# filter on its logger, set before the import, keeps its errors and drops the rest.
logging.getLogger("robosuite_logs").addFilter(lambda record: record.levelno >= logging.ERROR)


def make_env(task: TaskSpec, model_seed: int = 0):
    """A robosuite env for generation: no cameras, no renderer, deterministic resets.

    robosuite draws some object sizes (Lift's cube) from the env's RNG when it builds
    the model; a fixed seed gives every worker the same model, hence the same physics.
    """
    import robosuite
    from robosuite.controllers import load_composite_controller_config

    controller = load_composite_controller_config(controller="BASIC", robot=task.robot)
    return robosuite.make(
        task.env,
        robots=task.robot,
        controller_configs=controller,
        has_renderer=False,
        has_offscreen_renderer=False,
        use_camera_obs=False,
        use_object_obs=False,
        control_freq=task.control_freq,
        horizon=task.horizon,
        ignore_done=True,
        hard_reset=False,  # keep one MjModel for the env's lifetime: renderers stay valid
        initialization_noise=None,  # initial robot pose comes from the seed demo, not robosuite's RNG
        seed=model_seed,
    )


def _fast_stepper(env):
    from factory.fast_step import FastStepper, Unsupported

    try:
        return FastStepper(env)
    except Unsupported as why:
        logging.getLogger(__name__).info("robosuite env.step is used: %s", why)
        return None


@dataclass(frozen=True)
class Snapshot:
    """A restorable point of a rollout (see `Scene.snapshot`)."""

    state: np.ndarray  # [N] flattened MuJoCo state
    warmstart: np.ndarray  # [nv] constraint solver warm start
    ctrl: np.ndarray  # [nu] actuator controls
    gripper_action: np.ndarray  # robosuite's speed-limited gripper command


@dataclass(frozen=True)
class Placement:
    """Offsets applied to objects' start poses: name -> (dx, dy, dyaw), metres and radians."""

    offsets: Mapping[str, tuple[float, float, float]]

    def to_json(self) -> dict:
        return {k: [round(float(x), 6) for x in v] for k, v in self.offsets.items()}


class Scene:
    """A robosuite env plus the spec's object names, with pose and state access."""

    def __init__(self, spec: SceneSpec):
        self.spec = spec
        self.env = make_env(spec.task, model_seed=spec.seed)
        self.env.reset()
        self.model: mujoco.MjModel = self.env.sim.model._model
        self.data: mujoco.MjData = self.env.sim.data._data
        robot = self.env.robots[0]
        self._arm = robot.part_controllers[robot.arms[0]]
        self._gripper = robot.gripper[robot.arms[0]]
        self._eef_site = robot.eef_site_id[robot.arms[0]]
        self._gripper_qpos = np.asarray(robot._ref_gripper_joint_pos_indexes[robot.arms[0]])
        self.bodies = {name: self._body_id(name, body) for name, body in spec.objects.items()}
        self._geoms = {name: self._collision_geoms(bid) for name, bid in self.bodies.items()}
        self._pads = [
            {mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_GEOM, g) for g in self._gripper.important_geoms[group]}
            for group in ("left_fingerpad", "right_fingerpad")
        ]
        self._start_z: dict[str, float] = {}
        self._fast = _fast_stepper(self.env) if spec.task.fast_control else None

    # --- model lookups ---------------------------------------------------------------
    def _body_id(self, name: str, body: str) -> int:
        bid = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, body)
        if bid < 0:
            robot_parts = ("robot", "gripper", "mount", "fixed_mount", "world")
            others = [b for b in self.body_names() if b and not b.startswith(robot_parts)]
            raise SpecError(
                self.spec.path, f"objects.{name}",
                f"no body {body!r} in the {self.spec.task.env} model (expected one of: {', '.join(others)})",
            )
        return bid

    def _collision_geoms(self, body_id: int) -> frozenset[int]:
        ids = np.flatnonzero(self.model.geom_bodyid == body_id)
        return frozenset(int(g) for g in ids if self.model.geom_contype[g] or self.model.geom_conaffinity[g])

    @property
    def state_size(self) -> int:
        return 1 + self.model.nq + self.model.nv

    def camera_names(self) -> list[str]:
        return [mujoco.mj_id2name(self.model, mujoco.mjtObj.mjOBJ_CAMERA, i) for i in range(self.model.ncam)]

    def body_names(self) -> list[str]:
        return [mujoco.mj_id2name(self.model, mujoco.mjtObj.mjOBJ_BODY, i) for i in range(self.model.nbody)]

    # --- state -------------------------------------------------------------------------
    def get_state(self) -> np.ndarray:
        """[N] float64: time, qpos, qvel."""
        return np.concatenate([[self.data.time], self.data.qpos, self.data.qvel])

    def set_state(self, state: np.ndarray) -> None:
        """Restore a flattened state and recompute positions and contacts (no time step)."""
        self.data.time = state[0]
        self.data.qpos[:] = state[1 : 1 + self.model.nq]
        self.data.qvel[:] = state[1 + self.model.nq : self.state_size]
        mujoco.mj_forward(self.model, self.data)

    def reset_to(self, start_state: np.ndarray | None, placement: Placement) -> None:
        """Reset the env, restore a demo's first state (if given), then move objects by the placement."""
        self.env.reset()
        state = np.array(self.get_state() if start_state is None else start_state, dtype=np.float64)
        state[0] = 0.0
        state[1 + self.model.nq :] = 0.0  # start at rest
        self.set_state(state)
        for name, (dx, dy, dyaw) in placement.offsets.items():
            self._move_free_body(self.bodies[name], dx, dy, dyaw)
        mujoco.mj_forward(self.model, self.data)
        self._start_z = {name: float(self.data.xpos[bid][2]) for name, bid in self.bodies.items()}

    def _move_free_body(self, body_id: int, dx: float, dy: float, dyaw: float) -> None:
        joint = self.model.body_jntadr[body_id]
        if joint < 0 or self.model.jnt_type[joint] != mujoco.mjtJoint.mjJNT_FREE:
            name = mujoco.mj_id2name(self.model, mujoco.mjtObj.mjOBJ_BODY, body_id)
            raise ValueError(f"body {name!r} has no free joint: it cannot be placed")
        adr = self.model.jnt_qposadr[joint]
        self.data.qpos[adr : adr + 2] += (dx, dy)
        turn = np.array([np.cos(dyaw / 2), 0.0, 0.0, np.sin(dyaw / 2)])  # wxyz about world z
        quat = np.empty(4)
        mujoco.mju_mulQuat(quat, turn, self.data.qpos[adr + 3 : adr + 7].copy())
        self.data.qpos[adr + 3 : adr + 7] = quat

    def snapshot(self) -> Snapshot:
        """Everything a later step depends on: MuJoCo state, solver warm start, gripper command."""
        return Snapshot(
            state=self.get_state(),
            warmstart=self.data.qacc_warmstart.copy(),
            ctrl=self.data.ctrl.copy(),
            gripper_action=np.array(self._gripper.current_action, copy=True),
        )

    def restore(self, snap: Snapshot) -> None:
        """Return exactly to a snapshot, so that a retried subtask starts where the first try did."""
        self.set_state(snap.state)
        self.data.qacc_warmstart[:] = snap.warmstart
        self.data.ctrl[:] = snap.ctrl
        self._gripper.current_action = snap.gripper_action.copy()

    def mark_start(self) -> None:
        """Take the current object heights as the episode start (for `lifted`)."""
        self._start_z = {name: float(self.data.xpos[bid][2]) for name, bid in self.bodies.items()}

    # --- poses -------------------------------------------------------------------------
    def eef_pose(self) -> np.ndarray:
        """[4, 4] pose of the grip site, the frame the OSC controller moves."""
        return make_pose(self.data.site_xpos[self._eef_site].copy(), self.data.site_xmat[self._eef_site].reshape(3, 3).copy())

    def object_pose(self, name: str) -> np.ndarray:
        bid = self.bodies[name]
        return make_pose(self.data.xpos[bid].copy(), self.data.xmat[bid].reshape(3, 3).copy())

    def proprio(self) -> np.ndarray:
        """[9] float32: eef position, eef quaternion (xyzw), gripper joint positions."""
        rot = self.data.site_xmat[self._eef_site].reshape(3, 3)
        parts = (self.data.site_xpos[self._eef_site], mat_to_quat(rot), self.data.qpos[self._gripper_qpos])
        return np.concatenate(parts).astype(np.float32)

    def controller_limits(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(max position step [3] m, max rotation step [3] rad, controller frame rotation [3,3])."""
        out_max = np.asarray(self._arm.output_max, dtype=np.float64)
        in_max = np.asarray(self._arm.input_max, dtype=np.float64)
        scale = out_max / in_max
        frame = self._arm.origin_ori if self._arm.origin_ori is not None else np.eye(3)
        return scale[:3], scale[3:6], np.asarray(frame, dtype=np.float64)

    # --- stepping ---------------------------------------------------------------------
    def step(self, action: np.ndarray) -> None:
        """One control step of the arm and gripper (physics only: no observations)."""
        if self._fast is not None:
            self._fast.step(action)
        else:
            self.env.step(action)

    @property
    def fast_control(self) -> bool:
        """Whether steps take the lean control loop (see factory.fast_step)."""
        return self._fast is not None

    def success(self) -> bool:
        return bool(self.env._check_success())

    # --- predicates -------------------------------------------------------------------
    def holds(self, predicate: Predicate | str) -> bool:
        """Evaluate a predicate on the current state."""
        p = parse_predicate(predicate) if isinstance(predicate, str) else predicate
        if p.name == "success":
            return self.success()
        if p.name == "grasped":
            return self._grasped(p.objects[0])
        if p.name == "contact":
            return bool(self._touching(self._geoms[p.objects[0]]) & self._geoms[p.objects[1]])
        if p.name == "lifted":
            obj = p.objects[0]
            return self.data.xpos[self.bodies[obj]][2] - self._start_z.get(obj, np.inf) >= p.params[0]
        a, b = (self.data.xpos[self.bodies[o]] for o in p.objects)
        if p.name == "inside":
            lo, hi = self._aabb(p.objects[1])
            return bool(np.all(a >= lo) and np.all(a <= hi))
        if p.name == "near":
            return float(np.linalg.norm(a - b)) < p.params[0]
        if p.name == "on_top":
            resting = a[2] > b[2] + 0.005 and np.linalg.norm(a[:2] - b[:2]) < 0.05
            held = self._grasped(p.objects[0])
            touching = bool(self._touching(self._geoms[p.objects[0]]) & self._geoms[p.objects[1]])
            return bool(resting and touching and not held)
        raise ValueError(f"predicate {p.name!r} has no evaluation")

    def _aabb(self, obj: str) -> tuple[np.ndarray, np.ndarray]:
        """World-frame bounding box of an object's geoms (boxes exactly, others by bounding sphere)."""
        ids = np.flatnonzero(self.model.geom_bodyid == self.bodies[obj])
        lows, highs = [], []
        for g in ids:
            centre = self.data.geom_xpos[g]
            if self.model.geom_type[g] == mujoco.mjtGeom.mjGEOM_BOX:
                half = np.abs(self.data.geom_xmat[g].reshape(3, 3)) @ self.model.geom_size[g]
            else:
                half = np.full(3, self.model.geom_rbound[g])
            lows.append(centre - half)
            highs.append(centre + half)
        return np.min(lows, axis=0), np.max(highs, axis=0)

    def _grasped(self, obj: str, margin: float = GRASP_MARGIN) -> bool:
        """Both finger pads within `margin` of the object (contact, or nearly).

        A margin rather than strict contact: a demo recorded with a slightly larger
        object (robosuite draws Lift's cube size per model) leaves a sub-millimetre gap
        when its states are restored in our model.
        """
        return all(self._distance(pads, self._geoms[obj], margin) <= margin for pads in self._pads)

    def _distance(self, geoms_a, geoms_b, cap: float) -> float:
        """Smallest surface distance between two geom sets (negative when penetrating)."""
        best = cap + 1.0
        for a in geoms_a:
            for b in geoms_b:
                best = min(best, mujoco.mj_geomDistance(self.model, self.data, a, b, cap + 1.0, None))
        return best

    def _touching(self, geoms: frozenset[int]) -> set[int]:
        """Geoms in contact with any of `geoms`."""
        n = self.data.ncon
        g1, g2 = self.data.contact.geom1[:n], self.data.contact.geom2[:n]
        ids = np.fromiter(geoms, dtype=np.int64, count=len(geoms))
        return set(g2[np.isin(g1, ids)].tolist()) | set(g1[np.isin(g2, ids)].tolist())
