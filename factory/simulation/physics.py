"""Physics randomization: a spec's `physics:` ranges drawn per attempt, applied, undone exactly.

    PhysicsSpec (spec) ──► draw_physics(spec, rng)   rng from (attempt seed, PHYSICS_STREAM)
        ──► PhysicsDraw: per field, per target, one scale; kp, damping ratio; delay; gravity
              ├─► provenance["physics"] (to_json; from_json reads it back, float for float)
              └─► Scene.set_physics(draw): restore nominal, then apply; every reset restores and
                    re-applies, so an attempt never sees another attempt's draw

    model fields (ModelPhysics)                  controller (ScenePhysics)
      friction ─► geom_friction[:, 0]              kp, damping ratio ─► OSC kp, kd
      mass     ─► body_mass, body_inertia          delay ─► actions queued N control steps
      size     ─► geom size/pos/rbound/aabb, child body_pos, ipos, site_pos, inertia
      joint_damping, joint_armature ─► dof_damping, dof_armature
      gravity  ─► opt.gravity
      then mj_setConst (invweights, subtree masses, mean inertia the solver scales by)

Why not robosuite's DynamicsModder: it reaches elements by name one at a time (a body's subtree,
the gripper's geoms or a scale of the nominal value are ours to compute anyway), it has no size,
gravity, gains or delay, and its restore rewrites every body's pose, fixtures included. The
fields it sets are the ones set here; restoring the rows saved before the change is exact.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import mujoco
import numpy as np
from demofactory.errors import SpecError, UserError
from demofactory.specs.sections import PhysicsSpec

PHYSICS_STREAM = 0x70687973  # "phys": the physics draw's SeedSequence key, apart from placement
SCALED_FIELDS = ("friction", "mass", "size", "joint_damping", "joint_armature")
# Model fields mj_setConst recomputes from masses, inertias and armatures (MuJoCo 3.9): saved
# whole before it runs, so that a restore puts back the compiler's own values, bit for bit.
DERIVED_FIELDS = (
    "body_subtreemass",
    "body_invweight0",
    "dof_invweight0",
    "dof_M0",
    "dof_length",
    "tendon_invweight0",
    "tendon_length0",
    "actuator_acc0",
    "actuator_length0",
    "cam_pos0",
    "cam_poscom0",
    "cam_mat0",
    "light_pos0",
    "light_poscom0",
    "light_dir0",
)
STAT_FIELDS = ("meaninertia", "meanmass", "meansize", "extent", "center")
# The fields `ModelPhysics.apply` scales. With DERIVED_FIELDS, STAT_FIELDS and the gravity: every
# value of the model a draw changes (`model_rows`), what a batch of worlds, each under its own
# draw, keeps per world (demofactory.build.batched).
DRAWN_FIELDS = (
    "geom_friction",
    "body_mass",
    "body_inertia",
    "geom_size",
    "geom_pos",
    "geom_rbound",
    "geom_aabb",
    "body_pos",
    "body_ipos",
    "site_pos",
    "dof_damping",
    "dof_armature",
)
PRIMITIVE_GEOMS = {
    mujoco.mjtGeom.mjGEOM_SPHERE,
    mujoco.mjtGeom.mjGEOM_CAPSULE,
    mujoco.mjtGeom.mjGEOM_ELLIPSOID,
    mujoco.mjtGeom.mjGEOM_CYLINDER,
    mujoco.mjtGeom.mjGEOM_BOX,
}


@dataclass(frozen=True)
class PhysicsDraw:
    """One attempt's physics: scales of nominal values, and absolute delay and gravity.

    friction, mass, size, joint_damping, joint_armature: target -> scale (targets as in
    `PhysicsSpec`); kp, damping_ratio: OSC gain scales; delay: control steps an action waits;
    gravity: [3] m/s^2, world frame, or None for the model's own.
    """

    friction: Mapping[str, float] = field(default_factory=dict)
    mass: Mapping[str, float] = field(default_factory=dict)
    size: Mapping[str, float] = field(default_factory=dict)
    joint_damping: Mapping[str, float] = field(default_factory=dict)
    joint_armature: Mapping[str, float] = field(default_factory=dict)
    kp: float = 1.0
    damping_ratio: float = 1.0
    delay: int = 0
    gravity: tuple[float, float, float] | None = None

    def to_json(self) -> dict:
        """What provenance["physics"] holds: floats as they are (JSON keeps every bit)."""
        out: dict = {name: dict(getattr(self, name)) for name in SCALED_FIELDS}
        out.update(kp=self.kp, damping_ratio=self.damping_ratio, delay=self.delay)
        out["gravity"] = None if self.gravity is None else list(self.gravity)
        return out

    @classmethod
    def from_json(cls, data: Mapping) -> PhysicsDraw:
        """The draw `to_json` wrote (a recorded episode's provenance["physics"]); fields left
        out are nominal. Raises UserError on unknown fields or values of the wrong kind."""
        unknown = sorted(set(data) - {*SCALED_FIELDS, "kp", "damping_ratio", "delay", "gravity"})
        if unknown:
            raise UserError(f"physics draw: unknown fields {unknown}")
        try:
            scaled = {
                name: {str(k): float(v) for k, v in (data.get(name) or {}).items()}
                for name in SCALED_FIELDS
            }
            gravity = data.get("gravity")
            return cls(
                **scaled,
                kp=float(data.get("kp", 1.0)),
                damping_ratio=float(data.get("damping_ratio", 1.0)),
                delay=int(data.get("delay", 0)),
                gravity=None if gravity is None else _vector3(gravity),
            )
        except (TypeError, ValueError, AttributeError) as err:
            raise UserError(f"physics draw: {err}") from None

    @property
    def nominal(self) -> bool:
        """Whether applying it changes nothing."""
        return self == PhysicsDraw()


def _vector3(values) -> tuple[float, float, float]:
    x, y, z = (float(v) for v in values)
    return (x, y, z)


def physics_rng(attempt_seed: int) -> np.random.Generator:
    """The physics draw's generator for an attempt: its own stream, so that a spec gaining a
    `physics:` section keeps the placements, sources and noise its attempts drew before."""
    return np.random.default_rng(np.random.SeedSequence([attempt_seed, PHYSICS_STREAM]))


def draw_physics(
    spec: PhysicsSpec,
    rng: np.random.Generator,
    gravity: Iterable[float] = (0.0, 0.0, -9.81),
) -> PhysicsDraw:
    """One draw from `spec`'s ranges, uniform in each (fields in declaration order, targets in
    the spec's order). `gravity`: the model's nominal vector, which the tilt turns."""
    scaled = {
        name: {
            target: float(rng.uniform(lo, hi)) for target, (lo, hi) in getattr(spec, name).items()
        }
        for name in SCALED_FIELDS
    }
    kp = float(rng.uniform(*spec.kp)) if spec.kp is not None else 1.0
    ratio = float(rng.uniform(*spec.damping_ratio)) if spec.damping_ratio is not None else 1.0
    delay = int(rng.integers(spec.delay[0], spec.delay[1] + 1)) if spec.delay is not None else 0
    tilted = None
    if spec.gravity_tilt > 0:
        angle, azimuth = rng.uniform(0.0, spec.gravity_tilt), rng.uniform(0.0, 2 * math.pi)
        tilted = tilt_gravity(np.asarray(tuple(gravity), dtype=np.float64), angle, azimuth)
    return PhysicsDraw(**scaled, kp=kp, damping_ratio=ratio, delay=delay, gravity=tilted)


def tilt_gravity(gravity: np.ndarray, angle: float, azimuth: float) -> tuple[float, float, float]:
    """`gravity` turned by `angle` radians about the horizontal axis at `azimuth` (Rodrigues)."""
    axis = np.array([math.cos(azimuth), math.sin(azimuth), 0.0])
    turned = (
        gravity * math.cos(angle)
        + np.cross(axis, gravity) * math.sin(angle)
        + axis * (axis @ gravity) * (1.0 - math.cos(angle))
    )
    return _vector3(turned)


def recorded_physics(provenance: Mapping) -> PhysicsDraw | None:
    """The physics draw an episode was made under (None: nominal physics)."""
    data = provenance.get("physics")
    return None if data is None else PhysicsDraw.from_json(data)


def attempt_physics(scene, attempt_seed: int) -> PhysicsDraw | None:
    """The draw of the attempt seeded `attempt_seed` in `scene` (a
    `demofactory.simulation.scene.Scene`): from
    its spec's `physics:` section, None when it has none."""
    spec = scene.spec.physics
    if spec is None:
        return None
    return draw_physics(spec, physics_rng(attempt_seed), scene.physics.gravity)


# --- targets: spec names to model ids ------------------------------------------------------------
@dataclass(frozen=True)
class PhysicsTargets:
    """What a draw's target names mean in one model (lookups raise SpecError naming the field).

    objects: spec object -> body id; gripper_geoms: the fingers' geoms; arm_dofs: the arm's dofs.
    """

    model: mujoco.MjModel
    objects: Mapping[str, int]
    gripper_geoms: tuple[int, ...]
    arm_dofs: tuple[int, ...]
    where: str = "<memory>"  # the spec file, for errors

    def bodies(self, fld: str, target: str) -> list[int]:
        """The body `target` names (a spec object or a MuJoCo body) and its subtree."""
        root = self.objects.get(target)
        if root is None:
            root = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, target)
        if root is None or root < 0:
            robot = ("robot", "gripper", "mount", "fixed_mount", "world")  # listed last
            bodies = _names(self.model, mujoco.mjtObj.mjOBJ_BODY)
            names = [*self.objects, *(b for b in bodies if not b.startswith(robot))]
            names += [b for b in bodies if b.startswith(robot)]
            extra = ' or "gripper"' if fld == "friction" else ""
            raise SpecError(
                self.where,
                f"physics.{fld}.{target}",
                f"unknown target {target!r}: expected a spec object or a body of the model"
                f"{extra} ({_shortened(names)})",
            )
        return _subtree(self.model, root)

    def geoms(self, fld: str, target: str) -> list[int]:
        if fld == "friction" and target == "gripper":
            return list(self.gripper_geoms)
        bodies = set(self.bodies(fld, target))
        return [g for g in range(self.model.ngeom) if int(self.model.geom_bodyid[g]) in bodies]

    def dofs(self, fld: str, target: str) -> list[int]:
        """The dofs of "arm" (every arm joint) or of one MuJoCo joint."""
        if target == "arm":
            return list(self.arm_dofs)
        joint = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_JOINT, target)
        if joint < 0:
            names = ["arm", *_names(self.model, mujoco.mjtObj.mjOBJ_JOINT)]
            raise SpecError(
                self.where,
                f"physics.{fld}.{target}",
                f'unknown joint {target!r}: expected "arm" or a joint of the model '
                f"({_shortened(names)})",
            )
        return [d for d in range(self.model.nv) if int(self.model.dof_jntid[d]) == joint]

    def sized_geoms(self, target: str) -> list[int]:
        """The geoms `size` scales; a subtree with a mesh (or a plane, a height field) is
        refused: its shape is not in geom_size."""
        geoms = self.geoms("size", target)
        odd = [g for g in geoms if int(self.model.geom_type[g]) not in PRIMITIVE_GEOMS]
        if odd:
            names = [
                mujoco.mj_id2name(self.model, mujoco.mjtObj.mjOBJ_GEOM, g) or str(g) for g in odd
            ]
            raise SpecError(
                self.where,
                f"physics.size.{target}",
                f"{target!r} has geoms size cannot scale ({_shortened(names)}: meshes, planes or "
                "height fields); expected an object of boxes, spheres, capsules, cylinders or "
                "ellipsoids",
            )
        return geoms

    def check(self, spec: PhysicsSpec) -> None:
        """Resolve every target of `spec` once: a bad name fails before anything runs."""
        for fld in ("friction", "mass"):
            for target in getattr(spec, fld):
                self.geoms(fld, target) if fld == "friction" else self.bodies(fld, target)
        for target in spec.size:
            self.sized_geoms(target)
        for fld in ("joint_damping", "joint_armature"):
            for target in getattr(spec, fld):
                self.dofs(fld, target)


def _names(model: mujoco.MjModel, kind: mujoco.mjtObj) -> list[str]:
    count = {mujoco.mjtObj.mjOBJ_BODY: model.nbody, mujoco.mjtObj.mjOBJ_JOINT: model.njnt}[kind]
    return [n for n in (mujoco.mj_id2name(model, kind, i) for i in range(count)) if n]


def _shortened(names: list[str], keep: int = 12) -> str:
    shown = ", ".join(names[:keep])
    return shown + (f", ... ({len(names) - keep} more)" if len(names) > keep else "")


def _subtree(model: mujoco.MjModel, root: int) -> list[int]:
    """`root` and every body under it (parents precede children in MuJoCo's body order)."""
    inside = {root}
    for body in range(root + 1, model.nbody):
        if int(model.body_parentid[body]) in inside:
            inside.add(body)
    return sorted(inside)


# --- applying a draw to the model ----------------------------------------------------------------
class ModelPhysics:
    """Applies a draw's model fields and undoes them: each changed row is saved before it
    changes and written back in reverse order, so a restore is exact even where targets
    overlap."""

    def __init__(self, targets: PhysicsTargets):
        self.targets, self.model = targets, targets.model
        self._saved: list[tuple[np.ndarray, object, np.ndarray]] = []
        self._stat: dict[str, object] | None = None
        self._gravity: np.ndarray | None = None
        self._scratch: mujoco.MjData | None = None  # mj_setConst's workspace, not the scene's

    def apply(self, draw: PhysicsDraw) -> None:
        """Restore, then apply `draw`'s friction, mass, size, joints and gravity."""
        self.restore()
        m, t = self.model, self.targets
        for target, scale in draw.friction.items():
            self._scale(m.geom_friction, (t.geoms("friction", target), 0), scale)
        for target, scale in draw.mass.items():
            bodies = t.bodies("mass", target)
            self._scale(m.body_mass, bodies, scale)
            self._scale(m.body_inertia, bodies, scale)
        for target, scale in draw.size.items():
            self._resize(target, scale)
        for target, scale in draw.joint_damping.items():
            self._scale(m.dof_damping, t.dofs("joint_damping", target), scale)
        for target, scale in draw.joint_armature.items():
            self._scale(m.dof_armature, t.dofs("joint_armature", target), scale)
        if draw.mass or draw.size or draw.joint_armature:
            self._set_const()
        if draw.gravity is not None:
            self._gravity = m.opt.gravity.copy()
            m.opt.gravity[:] = draw.gravity

    def _resize(self, target: str, scale: float) -> None:
        """Geoms, sites, child bodies and centres of mass move apart with the size; the mass
        stays (`mass:` scales it), so the inertia grows with the square."""
        m, geoms = self.model, self.targets.sized_geoms(target)
        bodies = self.targets.bodies("size", target)
        for array in (m.geom_size, m.geom_pos, m.geom_rbound, m.geom_aabb):
            self._scale(array, geoms, scale)
        self._scale(m.body_pos, bodies[1:], scale)  # the root stays where its parent holds it
        self._scale(m.body_ipos, bodies, scale)
        self._scale(m.body_inertia, bodies, scale * scale)
        sites = [s for s in range(m.nsite) if int(m.site_bodyid[s]) in set(bodies)]
        self._scale(m.site_pos, sites, scale)

    def _scale(self, array: np.ndarray, index, scale: float) -> None:
        if isinstance(index, list) and not index:
            return
        self._saved.append((array, index, array[index].copy()))
        array[index] = array[index] * scale

    def _set_const(self) -> None:
        """Recompute what the compiler derived from masses and armatures (mj_setConst)."""
        m = self.model
        for name in DERIVED_FIELDS:
            array = getattr(m, name)
            self._saved.append((array, slice(None), array.copy()))
        self._stat = {name: _copy(getattr(m.stat, name)) for name in STAT_FIELDS}
        if self._scratch is None:
            self._scratch = mujoco.MjData(m)
        mujoco.mj_setConst(m, self._scratch)

    def restore(self) -> None:
        """Put back every value the last `apply` changed, exactly."""
        m = self.model
        if self._gravity is not None:
            m.opt.gravity[:] = self._gravity
            self._gravity = None
        if self._stat is not None:
            for name, value in self._stat.items():
                target = getattr(m.stat, name)
                if isinstance(target, np.ndarray):
                    target[:] = value
                else:
                    setattr(m.stat, name, value)
            self._stat = None
        for array, index, values in reversed(self._saved):
            array[index] = values
        self._saved.clear()


def _copy(value):
    return value.copy() if isinstance(value, np.ndarray) else value


def model_rows(model: mujoco.MjModel) -> dict[str, np.ndarray]:
    """A copy of every model value a draw may change, by name: the model's fields
    (DRAWN_FIELDS, DERIVED_FIELDS), "opt.gravity" and "stat.<name>" (STAT_FIELDS)."""
    rows = {name: getattr(model, name).copy() for name in DRAWN_FIELDS + DERIVED_FIELDS}
    rows["opt.gravity"] = model.opt.gravity.copy()
    for name in STAT_FIELDS:
        rows[f"stat.{name}"] = np.array(getattr(model.stat, name), dtype=np.float64)
    return rows


def set_model_rows(model: mujoco.MjModel, rows: Mapping[str, np.ndarray]) -> None:
    """Write back values `model_rows` took (all of them or some): the model as it was then."""
    for name, values in rows.items():
        if name.startswith("stat."):
            stat, field = model.stat, name[len("stat.") :]
            if isinstance(getattr(stat, field), np.ndarray):
                getattr(stat, field)[:] = values
            else:
                setattr(stat, field, float(values))
        elif name == "opt.gravity":
            model.opt.gravity[:] = values
        else:
            getattr(model, name)[:] = values


class ActionDelay:
    """A draw's action delay: each action acts `delay` control steps after it is given, a hold
    (zeros: no motion, the gripper as it is) acting meanwhile. The scene's own (ScenePhysics),
    and one per world of a batch (demofactory.build.batched)."""

    def __init__(self, delay: int = 0):
        self.delay = delay
        self.pending: deque[np.ndarray] = deque(np.zeros(0) for _ in range(delay))

    def __call__(self, action: np.ndarray) -> np.ndarray:
        """The action to execute now: `action` itself, or the one from `delay` steps ago."""
        if self.delay == 0:
            return action
        while len(self.pending) < self.delay:  # a queue restored from before the draw
            self.pending.appendleft(np.zeros(0))
        self.pending.append(np.array(action, copy=True))
        out = self.pending.popleft()
        return out if out.size else np.zeros_like(action)


# --- the controller's part: gains and delay ---------------------------------------------------
class ScenePhysics:
    """A scene's whole physics draw: the model's fields, the OSC gains and the action delay.

    `controllers()` gives the gain holders now in use (robosuite makes a new arm controller at
    every env reset; the fast stepper keeps its own copy): objects with `kp`, `kd` arrays.
    """

    def __init__(self, targets: PhysicsTargets, controllers: Callable[[], list]):
        self.model_physics = ModelPhysics(targets)
        self.gravity = targets.model.opt.gravity.copy()  # nominal: what a tilt turns
        self._controllers = controllers
        self.draw: PhysicsDraw | None = None
        self._gains: list[tuple[object, np.ndarray, np.ndarray]] = []
        self.delay = ActionDelay()
        self._applied = False

    def apply(self) -> None:
        """Apply `draw` (restoring first); the delay queue starts full of hold actions."""
        self.restore()
        draw = self.draw
        if draw is None or draw.nominal:
            return
        self.model_physics.apply(draw)
        if draw.kp != 1.0 or draw.damping_ratio != 1.0:
            for holder in self._controllers():
                kp, kd = (
                    np.array(holder.kp, dtype=np.float64),
                    np.array(holder.kd, dtype=np.float64),
                )
                self._gains.append((holder, holder.kp, holder.kd))
                # kd = 2 sqrt(kp) * damping ratio (robosuite): both scales act on it
                holder.kp = kp * draw.kp
                holder.kd = kd * (math.sqrt(draw.kp) * draw.damping_ratio)
        self.delay = ActionDelay(draw.delay)
        self._applied = True

    def restore(self) -> None:
        """Undo the last `apply`, exactly (the gains' own arrays go back)."""
        if not self._applied:
            return
        self.model_physics.restore()
        for holder, kp, kd in reversed(self._gains):
            holder.kp, holder.kd = kp, kd
        self._gains.clear()
        self.delay.pending.clear()
        self._applied = False

    def delayed(self, action: np.ndarray) -> np.ndarray:
        """The action to execute now: `action` itself, or the one from `delay` steps ago (a
        hold, zeros, for the first steps: no motion, the gripper as it is)."""
        self.delay.delay = 0 if self.draw is None else self.draw.delay
        return self.delay(action)

    @property
    def pending(self) -> deque[np.ndarray]:
        """The actions the delay holds back now (hold actions are empty arrays)."""
        return self.delay.pending

    def queue(self) -> tuple[np.ndarray, ...]:
        return tuple(a.copy() for a in self.delay.pending)

    def set_queue(self, actions: Iterable[np.ndarray]) -> None:
        self.delay.pending = deque(a.copy() for a in actions)
