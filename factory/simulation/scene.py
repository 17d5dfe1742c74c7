"""The simulation adapter: a robosuite env built from a spec, seen through poses and states.

`Scene` is the only place that touches robosuite internals. Generation runs it
with cameras off; rendering restores recorded states into the same model.

Why one module: `Scene` implements `demofactory.generators.scene_api.Scene` plus the predicates'
geometry (grasp, contact, touch, cavity, joints) over the same cached model indices; splitting the
class would split those caches across modules. The physics draw's mechanics are in
`demofactory.simulation.physics`; only its hooks (reset, step, snapshot) are here.
"""

from __future__ import annotations

# MUJOCO_GL's default was set when the `factory` package was imported (factory/_gl.py).
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import mujoco
import numpy as np
from demofactory.errors import SpecError
from demofactory.generators.poses import make_pose, mat_to_quat
from demofactory.generators.predicates import HAND, Predicate, parse_predicate

# The layouts and Placement belong to the generators' scene protocol, which this Scene implements.
from demofactory.generators.scene_api import ACTION_LAYOUT, PROPRIO_LAYOUT, Placement  # noqa: F401
from demofactory.robots import repairs as robot_repairs
from demofactory.robots.geom_distance import surface_distance
from demofactory.robots.gripper_sign import closing_sign
from demofactory.simulation.physics import PhysicsDraw, PhysicsTargets, ScenePhysics
from demofactory.specs.arms import robot_list
from demofactory.specs.spec import SceneSpec, TaskSpec

GRASP_MARGIN = 0.003  # metres between each finger pad and the object for `grasped`
GRASP_ROOM = 0.01  # metres the open hand must clear an object by to close on it (grasp_correction)
# Metres between the two for `touching`: contact, or nearly (a demo state restored in a model a
# hair off, a fixture pose inferred to the millimetre, leaves a gap where the person touched).
TOUCH_MARGIN = 0.003
# `grasped` on a multi-finger hand (GR-1's): the thumb and at least this many of the other
# fingers within GRASP_MARGIN of the object; one finger against the thumb is a pinch that lets a
# can turn out of the hand, two hold it.
HAND_GRASP_FINGERS = 2
RAY_LIFT = 0.01  # metres above an object's bottom its downward rays start (`support_heights`)
RAY_SPACING = 0.01  # metres between the rays of `support_heights`
FLAT = 0.01  # metres: surfaces this close in height are one flat support (`Scene.place_shift`)
# The predicates read off positions alone (bodies' positions, joint positions), no contacts or
# distances between surfaces.
KINEMATIC_PREDICATES = frozenset({"lifted", "near", "opened", "joint"})


class Reads(Protocol):
    """What a predicate's leaf reads of a state (`Scene.leaf_holds`): of the CPU scene's data
    (`DataReads`), or of a MuJoCo Warp world's arrays on the device (demofactory.build.batched).

    `position`/`rotation`: an object's body frame, by its spec name; `qpos`: the joint
    positions; `marks`: the start heights and joint positions (`Scene.mark_start`);
    `closed`: whether the hand is commanded closed (None: unknown); `touching`: the geoms in
    contact with any of `geoms`; `distance`: the smallest signed surface distance between two
    geom sets (over `cap`: some value over it)."""

    qpos: np.ndarray
    marks: tuple[dict, dict]
    closed: bool | None

    def position(self, obj: str) -> np.ndarray: ...

    def rotation(self, obj: str) -> np.ndarray: ...

    def touching(self, geoms: frozenset[int]) -> set[int]: ...

    def distance(self, a: frozenset[int], b: frozenset[int], cap: float) -> float: ...


class DataReads:
    """`Reads` of the CPU scene's MjData, as its last mj_forward (or step) left it."""

    def __init__(self, scene: Scene):
        self._scene = scene

    @property
    def qpos(self) -> np.ndarray:
        return self._scene.data.qpos

    @property
    def marks(self) -> tuple[dict, dict]:
        return self._scene._start_z, self._scene._start_q

    @property
    def closed(self) -> bool | None:
        return self._scene.gripper_closed

    def position(self, obj: str) -> np.ndarray:
        return self._scene.data.xpos[self._scene.bodies[obj]]

    def rotation(self, obj: str) -> np.ndarray:
        return self._scene.data.xmat[self._scene.bodies[obj]].reshape(3, 3)

    def touching(self, geoms: frozenset[int]) -> set[int]:
        return self._scene._touching(geoms)

    def distance(self, a: frozenset[int], b: frozenset[int], cap: float) -> float:
        return self._scene._distance(a, b, cap)


def touching_geoms(g1: np.ndarray, g2: np.ndarray, geoms: frozenset[int]) -> set[int]:
    """Geoms in contact with any of `geoms`, of contacts between geoms g1[i] and g2[i]."""
    ids = np.fromiter(geoms, dtype=np.int64, count=len(geoms))
    return set(g2[np.isin(g1, ids)].tolist()) | set(g1[np.isin(g2, ids)].tolist())


def proprio_of(site_pos: np.ndarray, site_mat: np.ndarray, gripper_q: np.ndarray) -> np.ndarray:
    """[9] float32 (PROPRIO_LAYOUT): the grip site's position and quaternion (xyzw) from its
    position [3] and rotation [9] or [3, 3], and the gripper's joint positions."""
    rot = np.reshape(site_mat, (3, 3))
    return np.concatenate([site_pos, mat_to_quat(rot), gripper_q]).astype(np.float32)


def make_env(task: TaskSpec, model_seed: int = 0, arm: dict | None = None, **scene):
    """A robosuite env for generation: no cameras, no renderer, deterministic resets.

    robosuite draws some object sizes (Lift's cube) from the env's RNG when it builds
    the model; a fixed seed gives every worker the same model, hence the same physics.
    `scene`: the arguments of a spec's `scene:` env
    (`demofactory.simulation.scene_build.env_kwargs`).
    The robots' repairs must be installed first (`demofactory.robots.repairs.install`).
    `arm`: another arm controller's part config (`demofactory.build.action_spaces`: the replay of an
    absolute action space): merged into the default one of the same type, else replacing it.
    """
    robot_repairs.require_installed()
    import robosuite  # here, not at the top: generation's importers need no robosuite until now
    from robosuite.controllers import load_composite_controller_config

    controller = load_composite_controller_config(controller="BASIC", robot=task.robot)
    parts = controller["body_parts"]  # robosuite 1.5: the arms by side, beside torso, head...
    for side in ("right", "left") if arm else ():
        if side in parts:
            same = parts[side].get("type") == arm.get("type")
            parts[side] = (
                {**parts[side], **arm} if same else {**arm, "gripper": parts[side].get("gripper")}
            )
    if task.two_arm is not None and not scene:  # robosuite's two-arm tasks take the layout
        scene = {**scene, "env_configuration": task.two_arm.configuration}
    robots = robot_list(task)
    return robosuite.make(
        task.env,
        robots=robots[0] if len(robots) == 1 else robots,
        controller_configs=controller,
        has_renderer=False,
        has_offscreen_renderer=False,
        use_camera_obs=False,
        use_object_obs=False,
        control_freq=task.control_freq,
        horizon=task.horizon,
        ignore_done=True,
        hard_reset=False,  # keep one MjModel for the env's lifetime: renderers stay valid
        initialization_noise=None,  # the robot's start pose comes from the seed demo, not an RNG
        seed=model_seed,
        **scene,
    )


def _fast_stepper(env) -> tuple[object | None, str]:
    """(a FastStepper, "") or (None, why robosuite's env.step is used instead); a PairStepper
    for an env of several robots (robosuite's two-arm tasks)."""
    from demofactory.simulation.fast_step import (
        FastStepper,
        PairStepper,
        Unsupported,
        check_against_env_step,
    )

    try:
        several = sum(len(robot.arms) for robot in env.robots) > 1  # two arms: one per arm
        stepper = PairStepper(env) if several else FastStepper(env)
        check_against_env_step(env, stepper)
        return stepper, ""
    except Unsupported as why:
        logging.getLogger(__name__).info("robosuite env.step is used: %s", why)
        return None, str(why)


def controller_limits(arm) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(max position step [3] m, max rotation step [3] rad, controller frame rotation [3,3]) of
    robosuite's arm controller `arm`."""
    out_max = np.asarray(arm.output_max, dtype=np.float64)
    in_max = np.asarray(arm.input_max, dtype=np.float64)
    scale = out_max / in_max
    frame = arm.origin_ori if arm.origin_ori is not None else np.eye(3)
    return scale[:3], scale[3:6], np.asarray(frame, dtype=np.float64)


@dataclass(frozen=True)
class Snapshot:
    """A restorable point of a rollout (see `Scene.snapshot`)."""

    state: np.ndarray  # [N] flattened MuJoCo state
    warmstart: np.ndarray  # [nv] constraint solver warm start
    ctrl: np.ndarray  # [nu] actuator controls
    gripper_action: np.ndarray  # robosuite's speed-limited gripper command
    pending: tuple[np.ndarray, ...] = ()  # actions a physics draw's delay still holds back


def _turn_quat(quat: np.ndarray, yaw: float) -> np.ndarray:
    """`quat` (wxyz) turned by `yaw` radians about the world z axis."""
    turn = np.array([np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)])
    out = np.empty(4)
    mujoco.mju_mulQuat(out, turn, np.array(quat, dtype=np.float64))
    return out


_RANGEFINDER = int(mujoco.mjtSensor.mjSENS_RANGEFINDER)


def forward_positions(model: mujoco.MjModel, data: mujoco.MjData) -> None:
    """What `mjv_updateScene` reads of `data`, from its qpos: `mj_forward`'s position stage
    (kinematics, centres of mass, cameras and lights, flexes, tendons) without the collision,
    the constraints, the velocities and the accelerations. A model with a rangefinder gets a
    whole `mj_forward`: MuJoCo draws its rays (on in a default MjvOption) from the sensor data."""
    if model.nsensor and bool(np.any(model.sensor_type == _RANGEFINDER)):
        mujoco.mj_forward(model, data)
        return
    mujoco.mj_kinematics(model, data)
    mujoco.mj_comPos(model, data)
    mujoco.mj_camlight(model, data)
    if model.nflex:
        mujoco.mj_flex(model, data)
    if model.ntendon:
        mujoco.mj_tendon(model, data)


class Scene:
    """A robosuite env plus the spec's object names, with pose and state access."""

    def __init__(self, spec: SceneSpec, env=None):
        """`env`: an env already built from `spec` (teleoperation's, with a viewer); default: one
        built by `make_env`."""
        self.spec = spec
        from demofactory.simulation.scene_build import (
            env_kwargs,  # a spec's scene: section, if it has one
        )

        self.env = env or make_env(spec.task, model_seed=spec.seed, **env_kwargs(spec))
        self.env.reset()
        self.model: mujoco.MjModel = self.env.sim.model._model
        self.data: mujoco.MjData = self.env.sim.data._data
        from demofactory.robots.support import (
            release_base_contacts,  # a robot resting a link on its base
        )

        self.released_contacts = release_base_contacts(self.model, self.data)
        robot = self.env.robots[0]
        self._arm = robot.part_controllers[robot.arms[0]]
        self._gripper = robot.gripper[robot.arms[0]]
        self._eef_site = robot.eef_site_id[robot.arms[0]]
        # A robot without a gripper (TwoArmPegInHole's: robosuite's NullGripper) has no joints.
        self._gripper_qpos = np.asarray(
            robot._ref_gripper_joint_pos_indexes[robot.arms[0]] or [], dtype=np.int64
        )
        self.bodies = {name: self._body_id(name, body) for name, body in spec.objects.items()}
        self._geoms = {name: self._collision_geoms(bid) for name, bid in self.bodies.items()}
        # `hand` in predicates: every collision geom of the gripper (palm, fingers, pads).
        self._hand = self._collision_geoms_under(
            mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, self._gripper.root_body)
        )
        self._pads = [
            {
                mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_GEOM, g)
                for g in self._gripper.important_geoms[group]
            }
            for group in ("left_fingerpad", "right_fingerpad")
        ]
        self._start_z: dict[str, float] = {}
        self._reads = DataReads(self)  # what `holds` reads: this scene's data
        self._closing: tuple[float | None, np.ndarray] | None = None  # see _closing_geometry
        self._fingers = [
            {
                mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_GEOM, g)
                for g in self._gripper.important_geoms.get(group, [])
            }
            for group in ("left_finger", "right_finger")
        ]
        # demofactory.simulation.planning.TransitPlanner, built at the first planned transit
        self._planner = None
        # joint position at the episode start, per articulated object
        self._start_q: dict[str, float] = {}
        self._cavities: dict[str, tuple[np.ndarray, np.ndarray, float]] = {}
        # Whether the hand is commanded closed: set by each step, or by annotation from a demo's
        # actions (a restored state does not say); None when unknown.
        self.gripper_closed: bool | None = None
        self._success = parse_predicate(spec.task.success) if spec.task.success else None
        if spec.scene is not None:  # the scene env's own success check (teleoperation) is ours
            self.env.success_check = self.success
        self._check_joint_predicates()
        self._fixture_roots = self._reposed_fixtures()
        named = set(self.bodies.values())
        self.free_bodies = [
            b for b in range(1, self.model.nbody) if self._is_free(b) and not self._robot_body(b)
        ]
        self._unnamed_free_qpos = [
            int(self.model.jnt_qposadr[self.model.body_jntadr[b]])
            for b in self.free_bodies
            if b not in named
        ]
        self.default_fixtures = self.fixture_poses()
        # Placing a static object moves its top-level body in the model, which robosuite's reset
        # keeps (one MjModel for the env's lifetime): without putting it back at every reset,
        # each attempt's offset would add to the last one's.
        self._static_roots = {
            r: (self.model.body_pos[r].copy(), self.model.body_quat[r].copy())
            for r in sorted({self._root(b) for b in named if not self._is_free(b)})
            if r not in self._fixture_roots
        }
        # fast_control_note: why steps take robosuite's env.step ("" when they take FastStepper).
        self._fast, self.fast_control_note = (
            _fast_stepper(self.env)
            if spec.task.fast_control
            else (None, "task.fast_control: false")
        )
        self.physics = self._make_physics()
        # +1 or -1: the gripper command that closes this hand, measured at its finger pads. The
        # last step of construction: the probe resets and steps this scene, so everything else
        # is built first; +1 meanwhile (the probe's own steps read it, and reset forgets them).
        self.gripper_sign = 1
        if robot.has_gripper[robot.arms[0]]:  # a hand without fingers closes neither way
            self.gripper_sign = closing_sign(self)

    def _make_physics(self) -> ScenePhysics:
        """The physics a draw changes; a spec's `physics:` targets are checked here (SpecError)."""
        fingers = self._gripper.important_geoms["left_finger"]
        fingers = [*fingers, *self._gripper.important_geoms["right_finger"]]
        targets = PhysicsTargets(
            model=self.model,
            objects=self.bodies,
            gripper_geoms=tuple(
                mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_GEOM, g) for g in fingers
            ),
            arm_dofs=tuple(int(d) for d in self._arm.qvel_index),
            where=str(self.spec.path),
        )
        if self.spec.physics is not None:
            targets.check(self.spec.physics)
        return ScenePhysics(targets, self._gain_holders)

    def _gain_holders(self) -> list:
        # robosuite builds a new arm controller at every env reset: the one in use now.
        robot = self.env.robots[0]
        holders = [robot.part_controllers[robot.arms[0]]]
        if self._fast is None:
            return holders
        # a PairStepper: robot 0's loop, the robot whose controller is listed (two-arm specs
        # take no physics: section)
        return [*holders, getattr(self._fast, "parts", [self._fast])[0]]

    def set_physics(self, draw: PhysicsDraw | None) -> None:
        """The physics of the episodes from now on (`demofactory.simulation.physics`), None for
        nominal: applied
        now, and again after every reset, which first restores the nominal model exactly."""
        if draw is None and self.physics.draw is None:
            return  # nominal already: nothing to undo
        self.physics.draw = draw
        self.physics.apply()
        self._cavities = {}
        mujoco.mj_forward(self.model, self.data)

    # --- model lookups ---------------------------------------------------------------
    def _body_id(self, name: str, body: str) -> int:
        bid = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, body)
        if bid < 0:
            robot_parts = ("robot", "gripper", "mount", "fixed_mount", "world")
            others = [b for b in self.body_names() if b and not b.startswith(robot_parts)]
            raise SpecError(
                self.spec.path,
                f"objects.{name}",
                f"no body {body!r} in the {self.spec.task.env} model "
                f"(expected one of: {', '.join(others)})",
            )
        return bid

    def _collision_geoms(self, body_id: int) -> frozenset[int]:
        ids = np.flatnonzero(self.model.geom_bodyid == body_id)
        return frozenset(
            int(g) for g in ids if self.model.geom_contype[g] or self.model.geom_conaffinity[g]
        )

    def _collision_geoms_under(self, root: int) -> frozenset[int]:
        """Collision geoms of `root` and of every body below it."""
        under = {root}
        for body in range(root + 1, self.model.nbody):  # MuJoCo numbers a parent before its child
            if int(self.model.body_parentid[body]) in under:
                under.add(body)
        return frozenset(g for b in sorted(under) for g in self._collision_geoms(b))

    @property
    def state_size(self) -> int:
        return 1 + self.model.nq + self.model.nv

    def camera_names(self) -> list[str]:
        return [
            mujoco.mj_id2name(self.model, mujoco.mjtObj.mjOBJ_CAMERA, i)
            for i in range(self.model.ncam)
        ]

    def body_names(self) -> list[str]:
        return [
            mujoco.mj_id2name(self.model, mujoco.mjtObj.mjOBJ_BODY, i)
            for i in range(self.model.nbody)
        ]

    # --- state -------------------------------------------------------------------------
    def get_state(self) -> np.ndarray:
        """[N] float64: time, qpos, qvel."""
        return np.concatenate([[self.data.time], self.data.qpos, self.data.qvel])

    def set_state(self, state: np.ndarray, positions: np.ndarray | None = None) -> None:
        """Restore a flattened state and recompute positions and contacts (no time step).

        `positions`: the joint positions [nq] to compute the bodies' positions and the contacts
        at, instead of the state's own: after a control step CPU MuJoCo's data holds them at the
        last substep's start (mj_step1 computes them, mj_step2 moves the state on), and a state
        copied from elsewhere (a batch of MuJoCo Warp worlds) is loaded as the step left it."""
        self.data.time = state[0]
        qpos = state[1 : 1 + self.model.nq]
        self.data.qpos[:] = qpos if positions is None else positions
        self.data.qvel[:] = state[1 + self.model.nq : self.state_size]
        mujoco.mj_forward(self.model, self.data)
        if positions is not None:
            self.data.qpos[:] = qpos

    def set_pose(self, state: np.ndarray) -> None:
        """Restore a flattened state for drawing it: the positions `mjv_updateScene` reads
        (bodies, geoms, sites, cameras, lights, flexes, tendons: the position stage of
        `mj_forward` up to its inertia), without the collision, the constraints and the
        accelerations, which no picture shows and which cost a rendered step of Stack ~0.3 ms.
        The data's contacts, forces and accelerations are stale until the next `set_state`."""
        self.data.time = state[0]
        self.data.qpos[:] = state[1 : 1 + self.model.nq]
        self.data.qvel[:] = state[1 + self.model.nq : self.state_size]
        forward_positions(self.model, self.data)

    def reset(self, fixtures: Mapping[str, Sequence[float]] | None = None) -> None:
        """robosuite's reset, then the fixture poses given (default: `default_fixtures`).

        robosuite re-draws some fixtures' poses at every reset (Door's door), and a fixture's pose
        is part of the model, not of the MuJoCo state: left alone, a restored demo state would put
        the robot's hand where the door was when the demo was recorded, not where it is now.
        """
        self.physics.restore()  # robosuite resets from the nominal model
        self.env.reset()
        for root, (pos, quat) in self._static_roots.items():
            self.model.body_pos[root], self.model.body_quat[root] = pos, quat
        self.physics.apply()
        self._cavities = {}
        self.set_fixture_poses(self.default_fixtures if fixtures is None else fixtures)
        self.gripper_closed = None

    def reset_to(
        self,
        start_state: np.ndarray | None,
        placement: Placement,
        fixtures: Mapping[str, Sequence[float]] | None = None,
    ) -> None:
        """Reset (fixtures as given), restore a demo's first state (if given), then apply placement.

        An object with a free joint moves in the state; one without (a door, a bin) moves its
        fixture: the top-level body that carries it.
        """
        self.reset(fixtures)
        state = np.array(self.get_state() if start_state is None else start_state, dtype=np.float64)
        # Free bodies the spec does not name stay where robosuite put them: a single-nut task parks
        # the other nut off the table, and a two-nut demo must not bring it back.
        for adr in self._unnamed_free_qpos:
            state[1 + adr : 1 + adr + 7] = self.data.qpos[adr : adr + 7]
        state[0] = 0.0
        state[1 + self.model.nq :] = 0.0  # start at rest
        self.set_state(state)
        offsets = placement.offsets
        if self.spec.scene is not None:  # an object placed relative to another moves with it
            from demofactory.specs.scene import composed_offsets

            offsets = composed_offsets(self.spec.scene, offsets)
        for name, (dx, dy, dyaw) in offsets.items():
            if self._is_free(self.bodies[name]):
                self._move_free_body(self.bodies[name], dx, dy, dyaw)
            else:
                self._move_fixture(self._root(self.bodies[name]), dx, dy, dyaw)
        mujoco.mj_forward(self.model, self.data)
        self._depenetrate()
        self._settle()
        self.mark_start()

    def _depenetrate(self, rounds: int = 30, depth: float = 1e-3) -> None:
        """Move the spec's free objects out of each other and out of fixtures, along the contact
        normals, before physics runs.

        A demo recorded with another robosuite has other object meshes: the 2020 PickPlace demo's
        first state sinks the cereal box 4.5 cm into the bin and 1.6 cm into the milk carton, and
        physics resolving that in one step throws the carton off the table. A placement offset
        can overlap two objects the same way. Contacts shallower than `depth` (resting) stay.
        """
        named = {b for b in self.free_bodies if b in set(self.bodies.values())}
        if not named:
            return
        adr = {b: int(self.model.jnt_qposadr[self.model.body_jntadr[b]]) for b in named}
        for _ in range(rounds):
            moved = False
            contact = self.data.contact
            # The deepest contact of each pair of bodies: a box on a box touches at up to 8
            # points with one normal, and summing them would push the pair 8 times too far (a
            # lid resting 4 mm into its bin's walls threw the bin off the table).
            deepest: dict[tuple[int, int], int] = {}
            for k in range(self.data.ncon):
                dist = float(contact.dist[k])
                if dist >= -depth:
                    continue
                b1 = int(self.model.geom_bodyid[contact.geom1[k]])
                b2 = int(self.model.geom_bodyid[contact.geom2[k]])
                if not (b1 in named or b2 in named) or self._robot_body(b1) or self._robot_body(b2):
                    continue
                if (b1, b2) not in deepest or dist < float(contact.dist[deepest[b1, b2]]):
                    deepest[b1, b2] = k
            shifts: dict[int, np.ndarray] = {}
            for (b1, b2), k in deepest.items():
                free1, free2 = b1 in named, b2 in named
                normal = np.array(contact.frame[k][:3])  # from geom1 towards geom2
                share = 0.5 if free1 and free2 else 1.0
                push = normal * (-float(contact.dist[k])) * share
                if free2:
                    shifts[b2] = shifts.get(b2, np.zeros(3)) + push
                if free1:
                    shifts[b1] = shifts.get(b1, np.zeros(3)) - push
            for body, shift in shifts.items():
                self.data.qpos[adr[body] : adr[body] + 3] += shift
                moved = True
            if not moved:
                return
            mujoco.mj_forward(self.model, self.data)

    def _settle(self, max_substeps: int = 250, speed: float = 1e-3) -> None:
        """Let free objects come to rest under physics while the robot is held where it is.

        Demos often start with objects a few centimetres in the air, as robosuite drops them;
        an object pose read while it falls would put every re-targeted pose that much too high.
        """
        # Only the spec's objects: a body robosuite parked off the table would fall for ever.
        named = [b for b in self.free_bodies if b in set(self.bodies.values())]
        if not named:
            return
        dofs = np.concatenate(
            [
                np.arange(d, d + 6)
                for d in (int(self.model.jnt_dofadr[self.model.body_jntadr[b]]) for b in named)
            ]
        )
        held = np.ones(self.model.nv, dtype=bool)
        held[dofs] = False
        qpos_free = np.concatenate(
            [
                np.arange(a, a + 7)
                for a in (int(self.model.jnt_qposadr[self.model.body_jntadr[b]]) for b in named)
            ]
        )
        robot_q = np.ones(self.model.nq, dtype=bool)
        robot_q[qpos_free] = False
        qpos, ctrl = self.data.qpos.copy(), self.data.ctrl.copy()
        for step in range(max_substeps):
            mujoco.mj_step(self.model, self.data)
            self.data.qpos[robot_q] = qpos[robot_q]
            self.data.qvel[held] = 0.0
            self.data.ctrl[:] = ctrl
            if step > 5 and np.abs(self.data.qvel[dofs]).max() < speed:
                break
        self.data.qvel[:] = 0.0
        self.data.time = 0.0
        mujoco.mj_forward(self.model, self.data)

    def _robot_body(self, body_id: int) -> bool:
        name = mujoco.mj_id2name(self.model, mujoco.mjtObj.mjOBJ_BODY, self._root(body_id)) or ""
        return name.startswith(("robot", "gripper", "mount", "fixed_mount"))

    def _is_free(self, body_id: int) -> bool:
        joint = self.model.body_jntadr[body_id]
        return joint >= 0 and self.model.jnt_type[joint] == mujoco.mjtJoint.mjJNT_FREE

    def _root(self, body_id: int) -> int:
        """The top-level body (a child of the world) that carries `body_id`."""
        while self.model.body_parentid[body_id] != 0:
            body_id = int(self.model.body_parentid[body_id])
        return body_id

    def _move_free_body(self, body_id: int, dx: float, dy: float, dyaw: float) -> None:
        adr = self.model.jnt_qposadr[self.model.body_jntadr[body_id]]
        self.data.qpos[adr : adr + 2] += (dx, dy)
        self.data.qpos[adr + 3 : adr + 7] = _turn_quat(self.data.qpos[adr + 3 : adr + 7], dyaw)

    def _move_fixture(self, root: int, dx: float, dy: float, dyaw: float) -> None:
        self.model.body_pos[root][:2] += (dx, dy)
        self.model.body_quat[root] = _turn_quat(self.model.body_quat[root], dyaw)

    # --- fixtures: bodies without a free joint whose pose robosuite re-draws at reset ----
    def _reposed_fixtures(self) -> list[int]:
        """Top-level bodies of spec objects, no free joint, whose pose changes across resets."""
        roots = sorted({self._root(b) for b in self.bodies.values() if not self._is_free(b)})
        if not roots:
            return []
        before = {r: (self.model.body_pos[r].copy(), self.model.body_quat[r].copy()) for r in roots}
        self.env.reset()
        return [
            r
            for r in roots
            if not (
                np.array_equal(before[r][0], self.model.body_pos[r])
                and np.array_equal(before[r][1], self.model.body_quat[r])
            )
        ]

    def fixture_poses(self) -> dict[str, list[float]]:
        """Re-drawn fixtures' poses now: top-level body -> [x, y, z, qw, qx, qy, qz], world."""
        return {
            mujoco.mj_id2name(self.model, mujoco.mjtObj.mjOBJ_BODY, r): [
                float(v) for v in (*self.model.body_pos[r], *self.model.body_quat[r])
            ]
            for r in self._fixture_roots
        }

    @property
    def has_redrawn_fixtures(self) -> bool:
        """Whether robosuite re-draws a fixture's pose at reset (demos must say where it was)."""
        return bool(self._fixture_roots)

    @property
    def grip_site(self) -> int:
        """Site id of the grip site (the frame the controller moves)."""
        return int(self._eef_site)

    def plan_transit(
        self, goal: np.ndarray, held: str | None, speed: float, checks: int, seed: int
    ) -> tuple[np.ndarray | None, str]:
        """Grip-site poses, one per control step, from now to `goal` [4, 4] on a collision-free
        path with the object `held` (a spec object name, or None) attached; (None, why) when no
        path is found (`demofactory.simulation.planning`)."""
        body = self.bodies[held] if held is not None else None
        return self._make_planner().plan(self.data, goal, body, speed, checks, seed)

    def _make_planner(self):
        if self._planner is None:
            from demofactory.simulation.planning import TransitPlanner

            robot = self.env.robots[0]
            robot_geoms = [
                g for g in range(self.model.ngeom) if self._robot_body(self.model.geom_bodyid[g])
            ]
            self._planner = TransitPlanner(
                self.model,
                robot._ref_joint_pos_indexes,
                robot._ref_joint_vel_indexes,
                self.grip_site,
                robot_geoms,
                self.hand_geoms(),
            )
            self._planner.home = np.asarray(robot.init_qpos, dtype=np.float64)
        return self._planner

    def grasp_correction(self, obj: str, rel: np.ndarray) -> np.ndarray:
        """[4, 4] a turn about the object's z axis that makes a recorded grasp fit the object as
        modelled now (identity when it already fits, or when this hand is not a parallel gripper).

        rel: [4, 4] the grip site in the object's frame at the demo's grasp. The grasp fits when
        the object's collision box nearest the grip site, measured along the fingers' closing
        axis, is narrower than the hand opens: a demo recorded with another robosuite's object
        (the 2020 PickPlace demo closes across a cereal box that is 10 cm wide today, the
        gripper opens 8 cm) would push the object away instead. A quarter turn that fits is
        taken; none fitting, the grasp is left as recorded.
        """
        opening, axis = self._closing_geometry()
        if opening is None:
            return np.eye(4)
        boxes = self._local_boxes(obj)
        if not boxes:
            return np.eye(4)
        point = rel[:3, 3]
        lo, hi = min(boxes, key=lambda b: float(np.linalg.norm(np.clip(point, b[0], b[1]) - point)))
        extent = hi - lo
        closing = rel[:3, :3] @ axis  # the closing axis in the object's frame
        correction = np.eye(4)
        for turn in (0.0, np.pi / 2, -np.pi / 2):
            c, s_ = np.cos(turn), np.sin(turn)
            rot = np.array([[c, -s_, 0.0], [s_, c, 0.0], [0.0, 0.0, 1.0]])
            # The grasp turned by `turn` closes along rot @ closing; the box is what it closes on.
            width = float(np.abs(rot @ closing) @ extent)
            if width < opening - GRASP_ROOM:
                correction[:3, :3] = rot
                break
        # From above, the fingers reach `depth` below the palm: a grip site deeper under the
        # box's top than that puts the palm into the object; the grasp rises to fit.
        approach = rel[:3, :3] @ np.array([0.0, 0.0, 1.0])
        if approach[2] < -0.7:
            lift = (hi[2] - point[2]) - self._finger_depth() + GRASP_ROOM
            if lift > 0:
                correction[2, 3] = lift
        return correction

    def _finger_depth(self) -> float:
        """Metres the fingers reach from the palm to the grip site (along the site's z axis)."""
        site_pos = self.data.site_xpos[self._eef_site]
        site_rot = self.data.site_xmat[self._eef_site].reshape(3, 3)
        lowest = 0.0
        for pads in self._fingers:
            for g in pads:
                rot = self.data.geom_xmat[g].reshape(3, 3)
                centre = self.data.geom_xpos[g] + rot @ self.model.geom_aabb[g][:3]
                half = np.abs(rot) @ self.model.geom_aabb[g][3:]
                for corner in np.array(np.meshgrid(*zip(-half, half, strict=True))).T.reshape(
                    -1, 3
                ):
                    lowest = min(lowest, float((site_rot.T @ (centre + corner - site_pos))[2]))
        return -lowest

    def _closing_geometry(self) -> tuple[float | None, np.ndarray]:
        """(how far the finger pads open at most, m; their closing axis in the grip site's
        frame), or (None, _) for a hand whose fingers do not slide (measured on the model)."""
        if self._closing is None:
            joints = [
                int(np.flatnonzero(self.model.jnt_qposadr == a)[0]) for a in self._gripper_qpos
            ]
            slides = all(self.model.jnt_type[j] == mujoco.mjtJoint.mjJNT_SLIDE for j in joints)
            if not slides or len(joints) != 2:
                self._closing = (None, np.zeros(3))
            else:
                opening = float(sum(np.abs(self.model.jnt_range[j]).max() for j in joints))
                left, right = (
                    np.mean([self.data.geom_xpos[g] for g in pads], axis=0) for pads in self._pads
                )
                site = self.data.site_xmat[self._eef_site].reshape(3, 3)
                axis = site.T @ (left - right)
                self._closing = (opening, axis / max(np.linalg.norm(axis), 1e-9))
        return self._closing

    def finger_pads(self) -> list[set[int]]:
        """Geom ids of the left and right finger pads."""
        return [set(p) for p in self._pads]

    def reachable(self, pose: np.ndarray) -> bool:
        """Whether the arm can put its grip site at `pose` [4, 4] (inverse kinematics)."""
        planner = self._make_planner()
        return planner.ik(pose, planner.load(self.data, None)) is not None

    def drop_height(self, obj: str) -> float | None:
        """Metres `obj` would fall if let go now: from the bottom of its collision box to the
        highest collision surface below it (`support_heights`); None when nothing is below.
        Negative: it sinks into what is below."""
        lo, _ = self._world_aabb(obj)
        below = [h for h in self.support_heights(obj) if h is not None]
        return float(lo[2] - max(below)) if below else None

    def support_heights(self, obj: str, shift=(0.0, 0.0)) -> list[float | None]:
        """Heights of the collision surfaces straight below a grid over the bottom of
        `obj`'s collision box, moved by `shift` (x, y metres), past the robot and `obj` itself
        (None where a ray meets nothing).

        MuJoCo's `mj_ray` skips geoms drawn fully transparent, as robosuite draws many collision
        geoms, so they are made opaque for the rays and restored after (nothing else reads them
        in the physics loop).
        """
        lo, hi = self._world_aabb(obj)
        m = self.model
        colliding = (m.geom_contype != 0) | (m.geom_conaffinity != 0)
        alpha = m.geom_rgba[:, 3].copy()
        m.geom_rgba[colliding, 3] = 1.0
        skip = self._geoms[obj] | self._hand
        # Rays at most RAY_SPACING apart: no thinner wall passes between them unseen.
        inset = np.minimum(0.05 * (hi[:2] - lo[:2]), 0.003)
        grid = [
            np.linspace(
                lo[i] + inset[i],
                hi[i] - inset[i],
                int(np.ceil((hi[i] - lo[i]) / RAY_SPACING)) + 1,
            )
            + shift[i]
            for i in (0, 1)
        ]
        heights: list[float | None] = []
        hit = np.zeros(1, dtype=np.int32)
        down = np.array([0.0, 0.0, -1.0])
        try:
            for x in grid[0]:
                for y in grid[1]:
                    # From a little above the bottom: a ray starting inside a geom (an object
                    # sunk a millimetre into its support) misses that geom's near face.
                    z, height = float(lo[2]) + RAY_LIFT, None
                    for _ in range(8):  # through robot, own and non-colliding geoms
                        dist = mujoco.mj_ray(
                            m, self.data, np.array([x, y, z]), down, None, 1, -1, hit
                        )
                        if dist < 0:
                            break
                        g = int(hit[0])
                        z -= dist
                        if (
                            colliding[g]
                            and g not in skip
                            and not self._robot_body(m.geom_bodyid[g])
                        ):
                            height = z
                            break
                        z -= 1e-4
                    heights.append(height)
        finally:
            m.geom_rgba[:, 3] = alpha
        return heights

    def place_shift(self, obj: str, reach: float, step: float) -> np.ndarray | None:
        """The smallest horizontal move (x, y metres, at most `reach`) after which everything
        below `obj` is one flat surface (within FLAT m), the one most of it is over now: an
        object released over a divider or another object's edge would land tilted. A zero move
        when it is flat already; None when no move within `reach` makes it so."""
        now = [h for h in self.support_heights(obj) if h is not None]
        if not now:
            return None
        # The surface most of the footprint is over now (ties: the higher).
        target = max(now, key=lambda h: (sum(abs(o - h) < FLAT for o in now), h))

        def flat(shift) -> bool:
            heights = self.support_heights(obj, shift)
            return all(h is not None and abs(h - target) < FLAT for h in heights)

        if flat((0.0, 0.0)):
            return np.zeros(2)
        for radius in np.arange(step, reach + 1e-9, step):
            for angle in np.arange(8) * (np.pi / 4):  # eight ways, nearest ring first
                shift = radius * np.array([np.cos(angle), np.sin(angle)])
                if flat(shift):
                    return shift
        return None

    def is_free(self, obj: str) -> bool:
        """`obj` moves freely (a free joint): it can be carried, unlike a fixture or a door."""
        return self._is_free(self.bodies[obj])

    def resting(self, obj: str) -> bool:
        """`obj` touches something other than the robot (it rests on, or leans against, it)."""
        return any(
            not self._robot_body(self.model.geom_bodyid[g])
            for g in self._touching(self._geoms[obj]) - self._geoms[obj]
        )

    def hand_geoms(self) -> set[int]:
        """Geom ids of the gripper's collision geoms (`hand` in `touching`)."""
        return set(self._hand)

    def set_fixture_poses(self, poses: Mapping[str, Sequence[float]]) -> None:
        """Put fixtures at `poses` (as `fixture_poses` gives them); unknown bodies are an error."""
        for name, pose in poses.items():
            bid = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, name)
            if bid < 0 or len(pose) != 7:
                raise ValueError(
                    f"fixture pose {name!r}: expected a body of the model and 7 numbers, "
                    f"got {pose!r}"
                )
            self.model.body_pos[bid] = pose[:3]
            self.model.body_quat[bid] = pose[3:]
        mujoco.mj_forward(self.model, self.data)

    def snapshot(self) -> Snapshot:
        """Everything a later step depends on: MuJoCo state, solver warm start, gripper command."""
        return Snapshot(
            state=self.get_state(),
            warmstart=self.data.qacc_warmstart.copy(),
            ctrl=self.data.ctrl.copy(),
            gripper_action=np.array(self._gripper.current_action, copy=True),
            pending=self.physics.queue(),
        )

    def restore(self, snap: Snapshot) -> None:
        """Return exactly to a snapshot, so a retried subtask starts where the first try did."""
        self.set_state(snap.state)
        self.data.qacc_warmstart[:] = snap.warmstart
        self.data.ctrl[:] = snap.ctrl
        self._gripper.current_action = snap.gripper_action.copy()
        self.physics.set_queue(snap.pending)

    def mark_start(self) -> None:
        """Take the current object heights and joint positions as the start (`lifted`, `opened`)."""
        self._start_z = {name: float(self.data.xpos[bid][2]) for name, bid in self.bodies.items()}
        self._start_q = {}
        for name in self.bodies:
            try:
                self._start_q[name] = float(self.data.qpos[self._joint_qpos(name)])
            except SpecError:
                continue  # not articulated

    # --- poses -------------------------------------------------------------------------
    def eef_pose(self) -> np.ndarray:
        """[4, 4] pose of the grip site, the frame the OSC controller moves."""
        return make_pose(
            self.data.site_xpos[self._eef_site].copy(),
            self.data.site_xmat[self._eef_site].reshape(3, 3).copy(),
        )

    def object_pose(self, name: str) -> np.ndarray:
        bid = self.bodies[name]
        return make_pose(self.data.xpos[bid].copy(), self.data.xmat[bid].reshape(3, 3).copy())

    def proprio(self) -> np.ndarray:
        """[9] float32: eef position, eef quaternion (xyzw), gripper joint positions."""
        return proprio_of(
            self.data.site_xpos[self._eef_site],
            self.data.site_xmat[self._eef_site],
            self.data.qpos[self._gripper_qpos],
        )

    def controller_limits(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(max position step [3] m, max rotation step [3] rad, controller frame rotation [3,3])."""
        return controller_limits(self._arm)

    # --- stepping ---------------------------------------------------------------------
    def step(self, action: np.ndarray) -> None:
        """One control step of the arm and gripper (physics only: no observations); under a
        physics draw with a delay, the action given `delay` steps ago acts."""
        acting = self.physics.delayed(action)
        if self._fast is not None:
            self._fast.step(acting)
        else:
            self.env.step(acting)
        self.gripper_closed = bool(action[-1] * self.gripper_sign > 0)

    @property
    def fast_control(self) -> bool:
        """Whether steps take the lean control loop (see demofactory.simulation.fast_step)."""
        return self._fast is not None

    def success(self) -> bool:
        """The task's success: the spec's `task.success` predicate if given, else robosuite's."""
        if self._success is not None:
            return self.holds(self._success)
        return bool(self.env._check_success())

    # --- predicates -------------------------------------------------------------------
    def holds(self, predicate: Predicate | str) -> bool:
        """Evaluate a predicate (or a composition of them) on the current state."""
        p = parse_predicate(predicate) if isinstance(predicate, str) else predicate
        return p.evaluate(self._leaf_holds)

    def leaf_holds(self, p: Predicate, reads: Reads) -> bool:
        """A simple predicate (no composition) on the state `reads` reads: this scene's own
        data (`_leaf_holds`), or a MuJoCo Warp world's arrays on the device. Only what a state
        holds is read there; the objects' geometry is this scene's model's (`_cavity`,
        `_local_boxes`)."""
        if p.name == "lifted":
            obj = p.objects[0]
            return reads.position(obj)[2] - reads.marks[0].get(obj, np.inf) >= p.params[0]
        if p.name in ("opened", "joint"):
            obj = p.objects[0]
            value = float(reads.qpos[self._joint_qpos(obj)])
            if p.name == "opened":
                return abs(value - reads.marks[1].get(obj, value)) >= p.params[0]
            return p.params[0] <= value <= p.params[1]
        if p.name == "near":
            a, b = (reads.position(o) for o in p.objects)
            return float(np.linalg.norm(a - b)) < p.params[0]
        if p.name == "grasped":
            # A closed hand is part of a grasp: open fingers straddling a handle touch it too.
            return reads.closed is not False and self._grasped(p.objects[0], reads=reads)
        if p.name == "contact":
            return bool(reads.touching(self._geoms[p.objects[0]]) & self._geoms[p.objects[1]])
        if p.name == "touching":
            # By distance, not MuJoCo's contacts alone: parts built into each other (a door and
            # its handle's shaft) always touch, which contact(), filtering parent and child, hides.
            a, b = self.leaf_geoms(p)
            if reads.touching(a) & b:
                return True
            return reads.distance(a, b, TOUCH_MARGIN) <= TOUCH_MARGIN
        a, b = (reads.position(o) for o in p.objects)
        if p.name == "inside":
            return self._inside(a, p.objects[1], reads)
        if p.name == "on_peg":
            top = self._world_aabb(p.objects[1], reads)[1][2]
            return bool(np.linalg.norm(a[:2] - b[:2]) < p.params[0] and a[2] < top)
        if p.name == "on_top":
            resting = a[2] > b[2] + 0.005 and np.linalg.norm(a[:2] - b[:2]) < 0.05
            held = self._grasped(p.objects[0], reads=reads)
            geoms = self._geoms[p.objects[0]]
            touching = bool(reads.touching(geoms) & self._geoms[p.objects[1]])
            return bool(resting and touching and not held)
        raise ValueError(f"predicate {p.name!r} has no evaluation")

    def leaf_geoms(self, p: Predicate) -> tuple[frozenset[int], ...]:
        """The geom sets a leaf's objects name (`hand`: the gripper's collision geoms)."""
        return tuple(self._hand if o == HAND else self._geoms[o] for o in p.objects)

    def distance_sets(self, p: Predicate) -> list[tuple[frozenset[int], frozenset[int]]]:
        """The geom set pairs whose surface distance a leaf reads (`Reads.distance`)."""
        if p.name in ("grasped", "on_top"):
            geoms = self._geoms[p.objects[0]]
            fingers = getattr(self, "_hand_fingers", None)
            hand = [self._pads[0], *fingers] if fingers else self._pads
            return [(frozenset(f), geoms) for f in hand]
        if p.name == "touching":
            return [self.leaf_geoms(p)]
        return []

    def _leaf_holds(self, p: Predicate) -> bool:
        if p.name == "success":
            return self.success()
        return self.leaf_holds(p, self._reads)

    def _check_joint_predicates(self) -> None:
        """opened/joint predicates must name an object that a hinge or slide joint moves."""
        texts = [
            (f"subtasks[{i}].ends_when", s.ends_when) for i, s in enumerate(self.spec.subtasks)
        ]
        texts.append(("task.success", self.spec.task.success))
        for field, text in texts:
            for leaf in parse_predicate(text).leaves() if text else ():
                if leaf.name in ("opened", "joint"):
                    self._joint_qpos(leaf.objects[0], field)

    def joint_position(self, obj: str) -> float:
        """Position now (rad or m) of the hinge or slide joint moving `obj` (SpecError if none)."""
        return float(self.data.qpos[self._joint_qpos(obj)])

    def cavity_depth(self, container: str) -> float:
        """How far the object's walls rise above its floor (its widest collision geom), metres:
        about 0 for something flat or solid (a table, a cube), a bin's wall height for a bin."""
        _, hi, floor_top = self._cavity(container)
        return float(hi[2] - floor_top)

    def _joint_qpos(self, obj: str, field: str = "subtasks") -> int:
        """qpos address of the hinge or slide joint moving `obj`: its body's, else an ancestor's."""
        body = self.bodies[obj]
        while body > 0:
            for j in range(
                self.model.body_jntadr[body],
                self.model.body_jntadr[body] + self.model.body_jntnum[body],
            ):
                if self.model.jnt_type[j] in (
                    mujoco.mjtJoint.mjJNT_HINGE,
                    mujoco.mjtJoint.mjJNT_SLIDE,
                ):
                    return int(self.model.jnt_qposadr[j])
            body = int(self.model.body_parentid[body])
        name = self.spec.objects[obj]
        raise SpecError(
            self.spec.path,
            field,
            f"object {obj!r} (body {name!r}) moves with no hinge or slide "
            "joint: opened/joint predicates need an articulated object "
            "(a door, a drawer, a handle)",
        )

    def _inside(self, point: np.ndarray, container: str, reads: Reads | None = None) -> bool:
        """`point` is in the container's cavity: over its floor, within its walls, below its rim
        (+5 cm).

        The floor is the container's widest collision geom; the walls are what rises above it.
        Computed in the container's own frame, so a turned bin still has its walls where they are.
        """
        lo, hi, floor_top = self._cavity(container)
        reads = reads or self._reads
        local = reads.rotation(container).T @ (point - reads.position(container))
        return bool(
            np.all(local[:2] > lo[:2])
            and np.all(local[:2] < hi[:2])
            and floor_top < local[2] < hi[2] + 0.05
        )

    def _cavity(self, container: str) -> tuple[np.ndarray, np.ndarray, float]:
        if container not in self._cavities:
            boxes = self._local_boxes(container)
            area = [(b[1][0] - b[0][0]) * (b[1][1] - b[0][1]) for b in boxes]
            floor = boxes[int(np.argmax(area))]
            top = max(b[1][2] for b in boxes)
            self._cavities[container] = (
                floor[0],
                np.array([floor[1][0], floor[1][1], top]),
                float(floor[1][2]),
            )
        return self._cavities[container]

    def _local_boxes(self, obj: str) -> list[tuple[np.ndarray, np.ndarray]]:
        """Boxes (lo, hi) bounding the object's collision geoms in its body frame (exact: boxes)."""
        bid = self.bodies[obj]
        boxes = []
        for g in sorted(self._geoms[obj]) or np.flatnonzero(self.model.geom_bodyid == bid):
            rot = np.empty(9)
            mujoco.mju_quat2Mat(rot, self.model.geom_quat[g])
            rot = rot.reshape(3, 3)
            centre = self.model.geom_pos[g] + rot @ self.model.geom_aabb[g][:3]
            half = np.abs(rot) @ self.model.geom_aabb[g][3:]
            boxes.append((centre - half, centre + half))
        return boxes

    def _world_aabb(self, obj: str, reads: Reads | None = None) -> tuple[np.ndarray, np.ndarray]:
        """World-frame bounding box of an object's collision geoms."""
        reads = reads or self._reads
        rot, pos = reads.rotation(obj), reads.position(obj)
        corners = []
        for lo, hi in self._local_boxes(obj):
            for corner in np.array(np.meshgrid(*zip(lo, hi, strict=True))).T.reshape(-1, 3):
                corners.append(pos + rot @ corner)
        return np.min(corners, axis=0), np.max(corners, axis=0)

    def _grasped(self, obj: str, margin: float = GRASP_MARGIN, reads: Reads | None = None) -> bool:
        """Both finger pads within `margin` of the object (contact, or nearly).

        A margin rather than strict contact: a demo recorded with a slightly larger
        object (robosuite draws Lift's cube size per model) leaves a sub-millimetre gap
        when its states are restored in our model.
        """
        distance = (reads or self._reads).distance
        geoms = self._geoms[obj]
        fingers = getattr(self, "_hand_fingers", None)
        if fingers:  # a multi-finger hand: its thumb and enough of its other fingers
            if distance(frozenset(self._pads[0]), geoms, margin) > margin:
                return False
            touching = sum(distance(frozenset(f), geoms, margin) <= margin for f in fingers)
            return touching >= HAND_GRASP_FINGERS
        return all(distance(frozenset(pads), geoms, margin) <= margin for pads in self._pads)

    def _distance(self, geoms_a, geoms_b, cap: float) -> float:
        """Smallest surface distance between two geom sets (negative when penetrating)."""
        best = cap + 1.0
        for a in geoms_a:
            for b in geoms_b:
                best = min(best, surface_distance(self.model, self.data, a, b, cap + 1.0))
        return best

    def _touching(self, geoms: frozenset[int]) -> set[int]:
        """Geoms in contact with any of `geoms`."""
        n = self.data.ncon
        return touching_geoms(self.data.contact.geom1[:n], self.data.contact.geom2[:n], geoms)
