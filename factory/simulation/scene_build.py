"""A robosuite env built from a spec's `scene:` section, with robosuite's own model classes.

    scene: section (factory/specs/scene.py, pure data)
      ──► check_scene_files: mesh and MJCF files exist and MuJoCo loads them (SpecError)
      ──► SpecScene._load_model: TableArena (size, height, friction, look) + cameras
            + the robot, its base moved by scene.robot
            + objects: BoxObject / CylinderObject / BallObject / CapsuleObject, BowlObject (a
              HollowCylinderObject with a floor), robosuite's mesh objects, MujocoXMLObject for the
              user's mesh (a generated MJCF: visual mesh + convex collision hulls) and MJCF files
            + placement: one UniformRandomSampler per object inside a SequentialCompositeSampler
              (regions, relative_to another object, yaw, no overlap)
          ──► ManipulationTask(arena, robots, objects)
      ──► reset: free objects from the sampler, fixtures back at their built pose
      ──► _check_success: the spec's task.success predicate (set by
      demofactory.simulation.scene.Scene)

Layouts: `layout="nominal"` (what demofactory.simulation.scene.Scene builds) puts every object at
the middle of
its ranges, and generation draws the offsets (`placement:`, derived from the section); `"random"`
(teleoperation, stills) draws every reset from the ranges with robosuite's sampler.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from xml.sax.saxutils import quoteattr

import mujoco
import numpy as np
from demofactory.errors import SpecError
from demofactory.specs.scene import (
    COLORS,
    ROBOSUITE_OBJECTS,
    ObjectSpec,
    PaletteColor,
    SceneCamera,
    SceneSection,
)
from robosuite.environments.manipulation.manipulation_env import ManipulationEnv
from robosuite.models.arenas import TableArena
from robosuite.models.objects import (
    BallObject,
    Bin,
    BoxObject,
    CapsuleObject,
    CylinderObject,
    HollowCylinderObject,
    MujocoXMLObject,
)
from robosuite.models.tasks import ManipulationTask
from robosuite.utils.mjcf_utils import array_to_string, xml_path_completion
from robosuite.utils.placement_samplers import SequentialCompositeSampler, UniformRandomSampler

Z_CLEARANCE = 0.002  # metres between an object's bottom and the surface it is put on


class BowlObject(HollowCylinderObject):
    """A bowl: robosuite's hollow cylinder (a ring of box walls) with a floor disc inside it."""

    def __init__(self, name, radius, half_height, fixed=False, wall=0.008, **kwargs):
        self._floor = (radius - wall * 0.5, 0.004)  # floor disc: radius, half thickness
        self._fixed = fixed
        super().__init__(
            name,
            outer_radius=radius,
            inner_radius=radius - wall,
            height=half_height,
            ngeoms=16,
            **kwargs,
        )

    def _get_geom_attrs(self):
        args = super()._get_geom_attrs()
        radius, half = self._floor
        floor = {
            "geom_types": "cylinder",
            "geom_locations": (0.0, 0.0, -self.height + half),
            "geom_quats": (1.0, 0.0, 0.0, 0.0),
            "geom_sizes": (radius, half),
            "geom_names": "floor",
            "geom_rgbas": self.rgba,
            "geom_frictions": self.friction,
            "geom_condims": 4,
        }
        for key, value in args.items():
            if key.startswith("geom_") and isinstance(value, list):
                value.append(floor.get(key))
        if self._fixed:
            args["joints"] = None
        return args


class FixtureBin(Bin):
    """robosuite's bin (a floor and four walls), opaque, and static when `fixed`."""

    def __init__(self, name, fixed=False, **kwargs):
        self._fixed = fixed
        super().__init__(name, transparent_walls=False, **kwargs)

    def _get_geom_attrs(self):
        args = super()._get_geom_attrs()
        if self._fixed:
            args["joints"] = None
        return args


def rgba_of(color) -> tuple[float, float, float, float] | None:
    """The rgba an object is built with (a palette colour: the palette's first, until drawn)."""
    if color is None:
        return None
    if isinstance(color, str):
        return COLORS[color]
    if isinstance(color, PaletteColor):
        return None  # set by the caller from the palette
    return tuple(color)


def camera_quat(cam: SceneCamera) -> np.ndarray:
    """(w, x, y, z) of a camera: its quat, or looking from pos at look_at with the world's z up."""
    if cam.quat is not None:
        quat = np.asarray(cam.quat, dtype=np.float64)
        return quat / np.linalg.norm(quat)
    back = np.asarray(cam.pos, dtype=np.float64) - np.asarray(cam.look_at, dtype=np.float64)
    back /= np.linalg.norm(back)  # MuJoCo cameras look down their -z
    right = np.cross([0.0, 0.0, 1.0], back)
    if np.linalg.norm(right) < 1e-6:  # looking straight down or up: image up is world +x
        right = np.cross([1.0, 0.0, 0.0], back)
    right /= np.linalg.norm(right)
    up = np.cross(back, right)
    quat = np.empty(4)
    mujoco.mju_mat2Quat(quat, np.column_stack([right, up, back]).ravel())
    return quat


# --- user files: meshes and MJCF ----------------------------------------------------------------


def _mesh_bounds(path: Path, scale: float) -> np.ndarray:
    """[2, 3] bounds of a mesh file as MuJoCo loads it; ValueError with MuJoCo's reason."""
    xml = (
        f'<mujoco><asset><mesh name="m" file={quoteattr(str(path))} '
        f'scale="{scale} {scale} {scale}"/></asset>'
        '<worldbody><body><geom type="mesh" mesh="m"/></body></worldbody></mujoco>'
    )
    model = mujoco.MjModel.from_xml_string(xml)
    start, count = model.mesh_vertadr[0], model.mesh_vertnum[0]
    verts = model.mesh_vert[start : start + count].astype(np.float64)
    # MuJoCo re-centres a mesh on its centre of mass; undo that to keep the file's own frame.
    rot = np.empty(9)
    mujoco.mju_quat2Mat(rot, model.mesh_quat[0].astype(np.float64))
    verts = verts @ rot.reshape(3, 3).T + model.mesh_pos[0]
    return np.stack([verts.min(axis=0), verts.max(axis=0)])


def check_scene_files(scene: SceneSection, spec_path: Path) -> None:
    """Every mesh and MJCF file exists and MuJoCo loads it; SpecError naming the field otherwise."""
    base = Path(spec_path).parent
    for name, obj in scene.objects.items():
        files = [("file", obj.file)] if obj.file else []
        files += [(f"collision[{i}]", f) for i, f in enumerate(obj.collision)]
        for field, rel in files:
            where = f"scene.objects.{name}.{field}"
            path = (base / rel).resolve()
            if path.is_dir():
                raise SpecError(spec_path, where, f"{path} is a directory, expected a file")
            if not path.is_file():
                raise SpecError(spec_path, where, f"file not found: {path}")
            try:
                if obj.kind == "mjcf":
                    mujoco.MjModel.from_xml_path(str(path))
                    _check_object_layout(path, spec_path, where)
                else:
                    _mesh_bounds(path, obj.scale)
            except (ValueError, mujoco.FatalError) as err:
                reason = " ".join(str(err).split())[:200]
                what = "an MJCF model" if obj.kind == "mjcf" else "a mesh"
                raise SpecError(
                    spec_path, where, f"MuJoCo cannot load {path.name} as {what}: {reason}"
                ) from None


OBJECT_SITES = ("bottom_site", "top_site", "horizontal_radius_site")


def _check_object_layout(path: Path, spec_path: Path, where: str) -> None:
    """robosuite's object layout: worldbody/body/body[name=object] and the sites it places by."""
    import xml.etree.ElementTree as ElementTree

    body = ElementTree.parse(path).getroot().find("./worldbody/body")
    sites = {site.get("name") for site in body.findall("./site")} if body is not None else set()
    missing = [name for name in OBJECT_SITES if name not in sites]
    if body is None or body.find("./body[@name='object']") is None or missing:
        raise SpecError(
            spec_path,
            where,
            f"{path.name} is not in robosuite's object layout: expected <worldbody><body> holding "
            f'<body name="object"> and the sites {", ".join(OBJECT_SITES)} (missing: '
            f"{', '.join(missing) or 'the object body'}); see robosuite's models/assets/objects",
        )


def mesh_object_xml(name: str, obj: ObjectSpec, base: Path, rgba) -> str:
    """A robosuite object MJCF for a user mesh: the visual mesh (group 1), its collision hulls
    (group 0; the visual mesh's own hull when none are given) and the sites robosuite places by."""
    visual = (base / obj.file).resolve()
    hulls = [(base / f).resolve() for f in obj.collision] or [visual]
    lo, hi = _mesh_bounds(visual, obj.scale)
    scale = " ".join([str(obj.scale)] * 3)
    color = array_to_string(rgba or (0.8, 0.8, 0.8, 1.0))
    # quoteattr: a path may hold " & < (a user's folder names), which XML must escape
    assets = [f'<mesh name="{name}_visual" file={quoteattr(str(visual))} scale="{scale}"/>']
    assets += [
        f'<mesh name="{name}_hull{i}" file={quoteattr(str(h))} scale="{scale}"/>'
        for i, h in enumerate(hulls)
    ]
    physics = f'friction="{array_to_string(obj.friction)}"' if obj.friction else ""
    if obj.mass is not None:
        physics += f' mass="{obj.mass / len(hulls)}"'
    elif obj.density is not None:
        physics += f' density="{obj.density}"'
    geoms = [
        f'<geom type="mesh" mesh="{name}_visual" group="1" contype="0" conaffinity="0" '
        f'mass="0.0001" rgba="{color}"/>'  # the look: no weight (the hulls carry the mass)
    ]
    geoms += [
        f'<geom type="mesh" mesh="{name}_hull{i}" group="0" rgba="{color}" {physics}/>'
        for i in range(len(hulls))
    ]
    radius = float(np.max(np.abs(np.stack([lo[:2], hi[:2]]))))
    return f"""<mujoco model="{name}">
  <asset>{"".join(assets)}</asset>
  <worldbody>
    <body>
      <body name="object">{"".join(geoms)}</body>
      <site rgba="0 0 0 0" size="0.005" pos="0 0 {lo[2]}" name="bottom_site"/>
      <site rgba="0 0 0 0" size="0.005" pos="0 0 {hi[2]}" name="top_site"/>
      <site rgba="0 0 0 0" size="0.005" pos="{radius} {radius} 0" name="horizontal_radius_site"/>
    </body>
  </worldbody>
</mujoco>"""


def _xml_object(
    path: str, name: str, fixed: bool, scale: float | None = None, duplicate: bool = True
) -> MujocoXMLObject:
    """`duplicate`: robosuite draws a visual copy of each collision geom (not for a user mesh,
    whose visual mesh is its look and whose hulls must not cover it)."""
    joints = None if fixed else [dict(type="free", damping="0.0005")]
    return MujocoXMLObject(
        path,
        name=name,
        joints=joints,
        obj_type="all",
        duplicate_collision_geoms=duplicate,
        scale=scale,
    )


def make_object(name: str, obj: ObjectSpec, base: Path, rgba):
    """The robosuite model object of one spec object."""
    joints = None if obj.fixed else "default"
    common = dict(name=name, joints=joints, rgba=rgba or (0.8, 0.8, 0.8, 1.0))
    if obj.density is not None:
        common["density"] = obj.density
    if obj.friction is not None:
        common["friction"] = obj.friction
    primitives = {
        "box": BoxObject,
        "cylinder": CylinderObject,
        "ball": BallObject,
        "capsule": CapsuleObject,
    }
    if obj.kind in primitives:
        return primitives[obj.kind](size=list(obj.size), **common)
    if obj.kind == "bowl":
        del common["joints"]
        return BowlObject(half_height=obj.size[1], radius=obj.size[0], fixed=obj.fixed, **common)
    if obj.kind == "bin":
        del common["joints"]
        color = common.pop("rgba")
        return FixtureBin(
            bin_size=[2 * v for v in obj.size],
            fixed=obj.fixed,
            use_texture=rgba is None,
            rgba=color,
            **common,
        )
    if obj.kind == "robosuite":
        cls_name, xml = ROBOSUITE_OBJECTS[obj.model]
        if obj.fixed:
            return _xml_object(xml_path_completion(f"objects/{xml}"), name, fixed=True)
        import robosuite.models.objects as objects

        return getattr(objects, cls_name)(name=name)
    if obj.kind == "mjcf":
        return _xml_object(str((base / obj.file).resolve()), name, obj.fixed, obj.scale)
    with tempfile.TemporaryDirectory() as folder:  # parsed now; only the meshes are read later
        path = os.path.join(folder, f"{name}.xml")
        Path(path).write_text(mesh_object_xml(name, obj, base, rgba))
        return _xml_object(path, name, obj.fixed, duplicate=False)


# --- the env ------------------------------------------------------------------------------------


class SpecScene(ManipulationEnv):
    """A single-arm table-top env whose model comes from a `scene:` section.

    robosuite registers it by class name, so `robosuite.make("SpecScene", scene=...)` builds it.
    """

    def __init__(
        self,
        robots,
        scene: SceneSection,
        spec_path: str | Path = ".",
        layout: str = "nominal",
        palette_colors: dict[str, tuple] | None = None,
        use_object_obs: bool = False,  # accepted like robosuite's tasks; objects are not observed
        **kwargs,
    ):
        self.scene = scene
        self.spec_path = Path(spec_path)
        self.layout = layout
        self.palette_colors = dict(palette_colors or {})
        self.table_full_size = tuple(scene.table.size)
        self.table_friction = tuple(scene.table.friction)
        self.table_offset = np.array((0.0, 0.0, scene.table.height))
        self.use_object_obs = use_object_obs
        # Set by demofactory.simulation.scene.Scene: the spec's task.success on the current state.
        self.success_check: Callable[[], bool] | None = None
        self.objects: dict = {}
        self._fixture_poses: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        super().__init__(robots=robots, **kwargs)

    # robosuite's hooks -------------------------------------------------------------------------
    def _load_model(self):
        super()._load_model()
        robot = self.robots[0].robot_model
        xpos = np.asarray(robot.base_xpos_offset["table"](self.table_full_size[0]), dtype=float)
        robot.set_base_xpos(xpos + np.asarray(self.scene.robot.offset))
        if self.scene.robot.yaw:
            robot.set_base_ori(np.array([0.0, 0.0, self.scene.robot.yaw]))
        arena = TableArena(
            table_full_size=self.table_full_size,
            table_friction=self.table_friction,
            table_offset=self.table_offset,
            has_legs=self.scene.table.legs,
        )
        arena.set_origin([0, 0, 0])
        if self.scene.table.color is not None:
            arena.table_visual.set("rgba", array_to_string(rgba_of(self.scene.table.color)))
            arena.table_visual.attrib.pop("material", None)
        for cam in self.scene.cameras:
            arena.set_camera(cam.name, cam.pos, camera_quat(cam), {"fovy": str(cam.fovy)})
        base = self.spec_path.parent
        self.objects = {
            name: make_object(name, obj, base, self._rgba(name, obj))
            for name, obj in self.scene.objects.items()
        }
        self.placement_initializer = self._sampler()
        self._place_fixtures()
        self.model = ManipulationTask(
            mujoco_arena=arena,
            mujoco_robots=[robot],
            mujoco_objects=list(self.objects.values()),
        )

    def _rgba(self, name: str, obj: ObjectSpec):
        if name in self.palette_colors:
            return self.palette_colors[name]
        if isinstance(obj.color, PaletteColor):
            return COLORS[self.scene.palette(obj.color.palette)[0]]
        return rgba_of(obj.color)

    def _sampler(self) -> SequentialCompositeSampler:
        """One robosuite sampler per object, in an order where references come first."""
        composite = SequentialCompositeSampler(name="SceneSampler")
        for name in self._placement_order():
            obj, model = self.scene.objects[name], self.objects[name]
            p = obj.placement
            ranges = (p.x, p.y, p.yaw)
            if self.layout == "nominal":
                ranges = tuple((sum(r) / 2, sum(r) / 2) for r in ranges)
            z_offset, args = Z_CLEARANCE, {"reference": p.relative_to, "on_top": True}
            if p.relative_to is not None and not p.on_top:
                parent = self.objects[p.relative_to]
                # robosuite puts a relative placement at the parent's origin height: bring it
                # down to the table the parent stands on.
                z_offset += parent.bottom_offset[2] - model.bottom_offset[2]
                args["on_top"] = False
            composite.append_sampler(
                UniformRandomSampler(
                    name=f"{name}_sampler",
                    mujoco_objects=model,
                    x_range=ranges[0],
                    y_range=ranges[1],
                    rotation=ranges[2],
                    ensure_object_boundary_in_range=False,
                    ensure_valid_placement=not p.overlap and not p.on_top,
                    reference_pos=self.table_offset,
                    z_offset=z_offset,
                    rng=self.rng,
                ),
                sample_args=args if p.relative_to is not None else None,
            )
        return composite

    def _placement_order(self) -> list[str]:
        order: list[str] = []
        pending = list(self.scene.objects)
        while pending:
            for name in list(pending):
                ref = self.scene.objects[name].placement.relative_to
                if ref is None or ref in order:
                    order.append(name)
                    pending.remove(name)
        return order

    def _place_fixtures(self) -> None:
        """Fixtures get their pose once, when the model is built (nominal: their ranges' middle)."""
        for name, (pos, quat, model) in self.sample_layout().items():
            if self.scene.objects[name].fixed:
                model.get_obj().set("pos", array_to_string(pos))
                model.get_obj().set("quat", array_to_string(quat))

    def sample_layout(self) -> dict:
        """robosuite's placement draw (name -> (pos, quat, object)), sampler by sampler, so that
        a placement robosuite cannot make is a SpecError naming the object."""
        from robosuite.utils.errors import RandomizationError

        composite, placed = self.placement_initializer, {}
        for (sampler_name, sampler), args in zip(
            composite.samplers.items(), composite.sample_args.values(), strict=True
        ):
            try:
                placed.update(sampler.sample(fixtures=placed, **(args or {})))
            except RandomizationError:
                name = sampler_name.removesuffix("_sampler")
                where = (
                    "at the middle of its ranges (the layout generation starts from)"
                    if self.layout == "nominal"
                    else "in 5000 draws from its ranges"
                )
                raise SpecError(
                    self.spec_path,
                    f"scene.objects.{name}.placement",
                    f"robosuite cannot place {name} {where} without overlapping one of: "
                    f"{', '.join(placed) or 'nothing'}; expected ranges whose middles leave "
                    "room for both footprints (or placement.overlap: true)",
                ) from None
        return placed

    def _setup_references(self):
        super()._setup_references()
        self.object_body_ids = {
            name: self.sim.model.body_name2id(model.root_body)
            for name, model in self.objects.items()
        }
        self._fixture_poses = {
            bid: (self.sim.model.body_pos[bid].copy(), self.sim.model.body_quat[bid].copy())
            for name, bid in self.object_body_ids.items()
            if self.scene.objects[name].fixed
        }

    def _reset_internal(self):
        super()._reset_internal()
        # Generation moves fixtures in the model (demofactory.simulation.scene.Scene._move_fixture):
        # put them back.
        for bid, (pos, quat) in self._fixture_poses.items():
            self.sim.model.body_pos[bid] = pos
            self.sim.model.body_quat[bid] = quat
        if self.deterministic_reset:
            return
        for name, (pos, quat, model) in self.sample_layout().items():
            if not self.scene.objects[name].fixed:
                self.sim.data.set_joint_qpos(model.joints[0], np.concatenate([pos, quat]))

    def reward(self, action=None) -> float:
        return float(self._check_success())

    def _check_success(self) -> bool:
        return bool(self.success_check()) if self.success_check is not None else False


def env_kwargs(spec, layout: str = "nominal", palette_colors: dict | None = None) -> dict:
    """What `robosuite.make` needs beyond a TaskSpec to build a spec's scene (nothing for a spec
    naming a robosuite env); the scene's files are checked first (SpecError)."""
    if spec.scene is None:
        return {}
    check_scene_files(spec.scene, spec.path)
    return {
        "scene": spec.scene,
        "spec_path": spec.path,
        "layout": layout,
        "palette_colors": palette_colors,
    }
