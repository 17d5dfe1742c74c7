"""The `scene:` section of a spec: a table-top scene as data, built with robosuite's classes.

A spec either names a robosuite environment (`task.env: Stack`) or describes its scene here;
`factory/simulation/scene_build.py` turns this section into a robosuite `ManipulationEnv`. Pure
data: nothing
here reads a file or imports robosuite (mesh files are checked by `scene_build.check_scene`).

    scene:
      table: {size: [0.8, 0.8, 0.05], height: 0.8, color: [0.55, 0.45, 0.35, 1]}
      objects:
        cube: {kind: box, size: [0.02, 0.02, 0.02], color: {palette: primary},
               placement: {x: [-0.08, 0.0], y: [-0.15, -0.05], yaw: [-0.5, 0.5]}}
        bowl: {kind: bowl, size: [0.07, 0.04], fixed: true, color: white,
               placement: {x: [0.0, 0.0], y: [0.12, 0.12]}}
      cameras:
        - {name: frontcam, pos: [1.0, 0.0, 1.4], look_at: [0.0, 0.0, 0.82], fovy: 45}
    instructions: ["put the {cube.color} {cube.name} in the {bowl.name}"]

Positions are metres in the world frame, whose origin is under the table's centre on the floor;
`placement` x and y are offsets from the table top's centre (or from `relative_to`'s object).

Why one module: pure data and pure checks, no I/O: the models (one field per line with
its description and bounds) and the whole-scene checks that need no simulator (fits on the
table, fixed overlaps, camera aim, template slots) and the derived `objects:`/`placement:`.
Splitting models from their checks would separate a bound from the message that reports it.
"""

from __future__ import annotations

import math
import re
import string
from typing import Literal

from demofactory.specs.sections import StrictModel
from pydantic import Field, StrictBool, field_validator, model_validator

# robosuite's own name for the env class scene_build registers; `task.env` takes it when a spec
# has a `scene:` section (so messages, hdf5 attributes and dataset_info name the env the same way).
SCENE_ENV = "SpecScene"

# Colours by name: what an instruction says and the rgba the renderer draws. Saturated and far
# apart in hue, so a colour name is unambiguous in an 84x84 frame.
COLORS: dict[str, tuple[float, float, float, float]] = {
    "red": (0.85, 0.1, 0.1, 1.0),
    "green": (0.1, 0.7, 0.2, 1.0),
    "blue": (0.15, 0.3, 0.9, 1.0),
    "yellow": (0.95, 0.85, 0.1, 1.0),
    "orange": (1.0, 0.5, 0.05, 1.0),
    "purple": (0.55, 0.2, 0.75, 1.0),
    "pink": (1.0, 0.45, 0.7, 1.0),
    "cyan": (0.1, 0.8, 0.85, 1.0),
    "white": (0.92, 0.92, 0.92, 1.0),
    "black": (0.08, 0.08, 0.08, 1.0),
    "grey": (0.5, 0.5, 0.5, 1.0),
    "brown": (0.45, 0.28, 0.12, 1.0),
}
PALETTES: dict[str, tuple[str, ...]] = {
    "primary": ("red", "green", "blue", "yellow"),
    "rainbow": ("red", "orange", "yellow", "green", "blue", "purple"),
    "bright": ("red", "green", "blue", "yellow", "orange", "purple", "pink", "cyan"),
}
# robosuite's mesh objects by spec name -> (class in robosuite.models.objects, MJCF file).
ROBOSUITE_OBJECTS: dict[str, tuple[str, str]] = {
    "milk": ("MilkObject", "milk.xml"),
    "bread": ("BreadObject", "bread.xml"),
    "can": ("CanObject", "can.xml"),
    "cereal": ("CerealObject", "cereal.xml"),
    "bottle": ("BottleObject", "bottle.xml"),
    "lemon": ("LemonObject", "lemon.xml"),
    "plate": ("PlateWithHoleObject", "plate-with-hole.xml"),
    "square_nut": ("SquareNutObject", "square-nut.xml"),
    "round_nut": ("RoundNutObject", "round-nut.xml"),
}
# Size entries per primitive kind (MuJoCo half sizes), and what they mean.
SIZES: dict[str, tuple[int, str]] = {
    "box": (3, "[half x, half y, half z], e.g. [0.02, 0.02, 0.02]"),
    "cylinder": (2, "[radius, half height], e.g. [0.03, 0.04]"),
    "ball": (1, "[radius], e.g. [0.03]"),
    "capsule": (2, "[radius, half length], e.g. [0.02, 0.04]"),
    "bowl": (2, "[outer radius, half height], e.g. [0.07, 0.03]"),
    "bin": (3, "[half x, half y, half height], e.g. [0.1, 0.1, 0.04]"),
}
# Bounds on sizes (metres): a table-top object, and what robosuite's composites need (a bowl's
# wall is 8 mm and its floor 8 mm thick; a bin's walls are 1 cm).
MAX_TABLE = 10.0
MAX_SIZE = 1.0
MIN_SIZES: dict[str, tuple[float, ...]] = {"bowl": (0.015, 0.008), "bin": (0.01, 0.01, 0.01)}
MIN_SIZE = 0.001
COMPOSITES = ("bowl", "bin")  # robosuite composite objects: their body is <name>_root
ATTRIBUTES = ("name", "color")  # what an instruction slot {object.attribute} may name


def _check_color(color):
    """A colour name of COLORS or [r, g, b, a] within 0..1 (palettes are checked elsewhere)."""
    if isinstance(color, str) and color not in COLORS:
        raise ValueError(f"unknown colour {color!r} (expected one of: {', '.join(COLORS)})")
    if isinstance(color, tuple) and not all(0.0 <= c <= 1.0 for c in color):
        raise ValueError(f"expected [r, g, b, a] each within 0 and 1, got {list(color)}")
    return color


def _color_shape(value, palette: bool):
    """Before the union is tried: one message for a colour of the wrong shape (not one per
    union member, `color.str: ...; color.tuple[...]: ...`)."""
    if value is None or isinstance(value, str) or (palette and isinstance(value, dict)):
        return value
    if isinstance(value, list | tuple) and len(value) == 4:
        return value
    expected = "a colour name, [r, g, b, a]" + (" or {palette: NAME}" if palette else "")
    raise ValueError(f"expected {expected}, e.g. red or [0.9, 0.1, 0.1, 1], got {value!r}")


def _check_friction(friction):
    if friction is not None and min(friction) < 0:
        raise ValueError(
            f"expected [sliding, torsional, rolling] friction each >= 0, got {list(friction)}"
        )
    return friction


def _ordered(name: str, value: tuple[float, float]) -> tuple[float, float]:
    if value[0] > value[1]:
        raise ValueError(f"{name} must be [lo, hi] with lo <= hi, got {list(value)}")
    from demofactory.specs.sections import check_drawable

    try:
        check_drawable(*value)
    except ValueError as err:
        raise ValueError(f"{name}: {err}") from None
    return value


class TableSpec(StrictModel):
    """robosuite's `TableArena`: a table whose top is at `height`, centred over the origin."""

    size: tuple[float, float, float] = Field(
        (0.8, 0.8, 0.05), description="Full length (x), width (y) and thickness of the top, metres."
    )
    height: float = Field(0.8, gt=0.1, le=2.0, description="Height of the table top, metres.")
    friction: tuple[float, float, float] = Field(
        (1.0, 0.005, 0.0001), description="MuJoCo sliding, torsional and rolling friction."
    )
    color: str | tuple[float, float, float, float] | None = Field(
        None, description="Table top colour: a colour name or [r, g, b, a]; none: robosuite's."
    )
    legs: StrictBool = Field(True, description="Draw the table's legs.")

    @field_validator("size")
    @classmethod
    def _positive(cls, size: tuple[float, float, float]) -> tuple[float, float, float]:
        if min(size) <= 0 or max(size) > MAX_TABLE:
            raise ValueError(
                f"expected three sizes > 0 and <= {MAX_TABLE} m, e.g. [0.8, 0.8, 0.05], "
                f"got {list(size)}"
            )
        return size

    @model_validator(mode="after")
    def _consistent(self) -> TableSpec:
        if self.size[2] >= self.height:
            raise ValueError(
                f"the top's thickness (size[2] = {self.size[2]}) must be less than its height "
                f"({self.height}): the legs stand under it"
            )
        return self

    _color = field_validator("color")(_check_color)
    _friction = field_validator("friction")(_check_friction)

    @field_validator("color", mode="before")
    @classmethod
    def _color_kind(cls, value):
        return _color_shape(value, palette=False)  # the table's colour is fixed


class PaletteColor(StrictModel):
    """A colour drawn per episode from a palette (seeded from the attempt's seed)."""

    palette: str = Field(description="A palette name (primary, rainbow, bright or scene.palettes).")


class ObjectPlacement(StrictModel):
    """Where an object starts: x, y and yaw drawn uniformly, relative to the table or an object."""

    x: tuple[float, float] = Field((0.0, 0.0), description="Offset range along x, metres.")
    y: tuple[float, float] = Field((0.0, 0.0), description="Offset range along y, metres.")
    yaw: tuple[float, float] = Field((0.0, 0.0), description="Yaw range about z, radians.")
    relative_to: str | None = Field(
        None, description="Object whose position x and y are offsets from; none: the table centre."
    )
    on_top: StrictBool = Field(False, description="With relative_to: rest on that object's top.")
    overlap: StrictBool = Field(
        False, description="May touch other objects' footprints (otherwise placements keep apart)."
    )

    @model_validator(mode="after")
    def _ranges(self) -> ObjectPlacement:
        for axis in ("x", "y", "yaw"):
            _ordered(axis, getattr(self, axis))
        if self.on_top and self.relative_to is None:
            raise ValueError("on_top needs relative_to, e.g. {relative_to: coaster, on_top: true}")
        return self


class ObjectSpec(StrictModel):
    """One object of the scene: a primitive, a robosuite object, a mesh file or an MJCF file."""

    kind: Literal[
        "box", "cylinder", "ball", "capsule", "bowl", "bin", "robosuite", "mesh", "mjcf"
    ] = Field(
        description="box, cylinder, ball, capsule (primitives, `size`); bowl or bin (robosuite "
        "composites, `size`); robosuite (its object named by `model`); mesh (an .obj or .stl "
        "`file`); mjcf (an MJCF `file` in robosuite's object layout)."
    )
    size: tuple[float, ...] | None = Field(
        None, description="Primitive sizes, MuJoCo half sizes (box: 3, cylinder: 2, ball: 1)."
    )
    color: str | tuple[float, float, float, float] | PaletteColor | None = Field(
        None, description="A colour name, [r, g, b, a], or {palette: NAME} drawn per episode."
    )
    density: float | None = Field(
        None, gt=0, le=1e5, description="kg/m^3; none: robosuite's default."
    )
    friction: tuple[float, float, float] | None = Field(
        None, description="MuJoCo sliding, torsional and rolling friction."
    )
    model: str | None = Field(None, description="kind robosuite: milk, bread, can, cereal, ...")
    file: str | None = Field(
        None, description="kind mesh: a .obj or .stl file; kind mjcf: an MJCF file (spec-relative)."
    )
    collision: list[str] = Field(
        [], description="kind mesh: convex hull files for collision; none: the visual mesh's hull."
    )
    scale: float = Field(1.0, gt=0, description="kind mesh or mjcf: uniform scale of the file.")
    mass: float | None = Field(None, gt=0, le=1000, description="kind mesh: total mass, kg.")
    fixed: StrictBool = Field(False, description="A fixture: a static body (no free joint).")
    noun: str | None = Field(
        None, description="What instructions call it ({obj.name}); default: the object's key."
    )
    placement: ObjectPlacement = Field(
        ObjectPlacement(), description="Where it starts on the table."
    )

    @model_validator(mode="after")
    def _consistent(self) -> ObjectSpec:
        if self.kind in SIZES:
            count, what = SIZES[self.kind]
            if self.size is None or len(self.size) != count or min(self.size) <= 0:
                raise ValueError(f"kind {self.kind} needs size {what}, got {self.size!r}")
            least = MIN_SIZES.get(self.kind, (MIN_SIZE,) * count)
            if any(v < lo or v > MAX_SIZE for v, lo in zip(self.size, least, strict=True)):
                raise ValueError(
                    f"kind {self.kind} needs size {what} with each at least "
                    f"{list(least)} and at most {MAX_SIZE} m, got {list(self.size)}"
                )
        elif self.size is not None:
            raise ValueError(f"size is for primitives ({', '.join(SIZES)}), not kind {self.kind}")
        if self.kind == "robosuite":
            if self.model not in ROBOSUITE_OBJECTS:
                names = ", ".join(ROBOSUITE_OBJECTS)
                raise ValueError(f"kind robosuite needs model: one of {names}, got {self.model!r}")
        elif self.model is not None:
            raise ValueError(f"model is for kind robosuite, not {self.kind}")
        if self.kind in ("robosuite", "mjcf") and self.color is not None:
            raise ValueError(f"kind {self.kind} keeps its model's own look: color is not allowed")
        if self.kind in ("mesh", "mjcf"):
            suffixes = (".obj", ".stl") if self.kind == "mesh" else (".xml",)
            if not self.file or not self.file.lower().endswith(suffixes):
                raise ValueError(f"kind {self.kind} needs file: a {' or '.join(suffixes)} file")
        elif self.file is not None:
            raise ValueError(f"file is for kind mesh or mjcf, not {self.kind}")
        if self.kind != "mesh" and (self.collision or self.mass is not None):
            raise ValueError("collision and mass are for kind mesh")
        return self

    _color = field_validator("color")(_check_color)
    _friction = field_validator("friction")(_check_friction)

    @field_validator("color", mode="before")
    @classmethod
    def _color_kind(cls, value):
        return _color_shape(value, palette=True)

    @field_validator("noun")
    @classmethod
    def _noun(cls, noun: str | None) -> str | None:
        if noun is not None and (not noun.strip() or set(noun) & set("{}\n")):
            raise ValueError(
                "what instructions call the object, e.g. 'mug': expected words without braces "
                f"or line breaks, got {noun!r}"
            )
        return noun

    def footprint(self) -> float | None:
        """Radius of the object's footprint on the table (m) where the spec alone says it."""
        if self.size is None:
            return None
        if self.kind in ("box", "bin"):
            return math.hypot(self.size[0], self.size[1])
        return self.size[0]


MAX_CAMERA = 20.0  # metres from the origin: further, the scene is a few pixels (or clipped)


# The cameras robosuite's TableArena defines (robosuite/models/assets/arenas/table_arena.xml);
# listed here because the spec is validated without robosuite (test_scene_yaml_hostile checks
# the list against the arena).
ARENA_CAMERAS = ("frontview", "birdview", "agentview", "sideview")


class SceneCamera(StrictModel):
    """A camera of the scene, aimed by a look-at point or a quaternion."""

    name: str = Field(pattern=r"^[A-Za-z0-9_]+$", description="Camera name (cameras: refer to it).")
    pos: tuple[float, float, float] = Field(description="Position in the world frame, metres.")
    look_at: tuple[float, float, float] | None = Field(
        None, description="World point the camera looks at (its image centre)."
    )
    quat: tuple[float, float, float, float] | None = Field(
        None, description="Orientation (w, x, y, z), MuJoCo's camera frame (looks down its -z)."
    )
    fovy: float = Field(45.0, gt=1.0, lt=170.0, description="Vertical field of view, degrees.")

    @model_validator(mode="after")
    def _aim(self) -> SceneCamera:
        if (self.look_at is None) == (self.quat is None):
            raise ValueError(
                "give exactly one of look_at and quat, "
                "e.g. {pos: [1, 0, 1.4], look_at: [0, 0, 0.8]}"
            )
        if self.look_at is not None and math.dist(self.pos, self.look_at) < 1e-6:
            raise ValueError("look_at is the camera's own position: it looks at nothing")
        if self.quat is not None and math.hypot(*self.quat) < 1e-6:
            raise ValueError(
                f"quat must be a rotation (w, x, y, z), not zero, e.g. [0.5, 0.5, 0.5, 0.5], "
                f"got {list(self.quat)}"
            )
        far = [*self.pos, *(self.look_at or ())]
        if max(abs(v) for v in far) > MAX_CAMERA:
            raise ValueError(f"expected pos and look_at within {MAX_CAMERA} m of the origin")
        if re.match(r"robot\d+_", self.name):
            raise ValueError(
                f"camera names robot<N>_... are the robots' own cameras, got {self.name!r}; "
                "expected another name, e.g. frontcam"
            )
        if self.name in ARENA_CAMERAS:  # two cameras of one name: which renders is MuJoCo's pick
            raise ValueError(
                f"{self.name!r} is a camera robosuite's table arena already has "
                f"({', '.join(ARENA_CAMERAS)}); expected another name, e.g. frontcam"
            )
        return self


class RobotPlacement(StrictModel):
    """The robot's base relative to where robosuite puts it for the table (behind its near edge)."""

    offset: tuple[float, float, float] = Field(
        (0.0, 0.0, 0.0), description="Base position offset, metres."
    )
    yaw: float = Field(0.0, description="Base yaw about z, radians.")

    @field_validator("offset")
    @classmethod
    def _near(cls, offset: tuple[float, float, float]) -> tuple[float, float, float]:
        if max(abs(v) for v in offset) > 2.0:
            raise ValueError(
                f"expected each offset within 2 m (an arm's reach), got {list(offset)}"
            )
        return offset


class SceneSection(StrictModel):
    """A table-top scene built from robosuite's model classes
    (factory/simulation/scene_build.py)."""

    table: TableSpec = Field(TableSpec(), description="The table (robosuite's TableArena).")
    objects: dict[str, ObjectSpec] = Field(
        min_length=1, description="Objects by name; bodies are named <name>_main in the model."
    )
    cameras: list[SceneCamera] = Field([], description="Cameras added to robosuite's own.")
    robot: RobotPlacement = Field(RobotPlacement(), description="The robot's base pose.")
    palettes: dict[str, list[str]] = Field(
        {}, description="Extra palettes: name -> colour names (see COLORS)."
    )

    @field_validator("objects")
    @classmethod
    def _names(cls, objects: dict[str, ObjectSpec]) -> dict[str, ObjectSpec]:
        for name in objects:
            if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name):
                raise ValueError(f"object names are letters, digits and _, got {name!r}")
            if re.match(r"(robot|gripper|mount)\d+(_|$)", name):
                raise ValueError(
                    f"object names robot<N>, gripper<N> and mount<N> are robosuite's own "
                    f"(its bodies and geoms start with them), got {name!r}; expected another name"
                )
        return objects

    def palette(self, name: str) -> tuple[str, ...] | None:
        return tuple(self.palettes[name]) if name in self.palettes else PALETTES.get(name)


def check_scene(scene: SceneSection) -> tuple[str, str] | None:
    """Cross references inside the section: (field, message) of the first problem, or None."""
    names = ", ".join(scene.objects)
    for name, obj in scene.objects.items():
        where = f"scene.objects.{name}"
        ref = obj.placement.relative_to
        if ref is not None and ref not in scene.objects:
            return f"{where}.placement.relative_to", f"unknown object {ref!r} (expected: {names})"
        if ref == name:
            return f"{where}.placement.relative_to", "an object cannot be placed relative to itself"
        if isinstance(obj.color, PaletteColor) and scene.palette(obj.color.palette) is None:
            known = ", ".join([*PALETTES, *scene.palettes])
            return f"{where}.color.palette", f"unknown palette (expected one of: {known})"
    for pname, colours in scene.palettes.items():
        if len(set(colours)) != len(colours) or not colours:
            return (
                f"scene.palettes.{pname}",
                f"expected a list of different colour names, e.g. [red, blue], got {colours}",
            )
        for i, colour in enumerate(colours):
            if colour not in COLORS:
                return (
                    f"scene.palettes.{pname}[{i}]",
                    f"unknown colour (expected: {', '.join(COLORS)})",
                )
    sharing: dict[str, list[str]] = {}
    for name, obj in scene.objects.items():
        if isinstance(obj.color, PaletteColor):
            sharing.setdefault(obj.color.palette, []).append(name)
    for pname, users in sharing.items():
        colours = scene.palette(pname)
        if len(users) > len(colours):
            return (
                f"scene.objects.{users[-1]}.color.palette",
                f"{len(users)} objects ({', '.join(users)}) draw different colours from palette "
                f"{pname!r}, which has {len(colours)} ({', '.join(colours)}); expected a palette "
                "with at least as many colours as the objects sharing it",
            )
    if _cycle(scene):
        return "scene.objects", "placement.relative_to forms a cycle"
    for name, obj in scene.objects.items():
        problem = _fits_on_table(scene, name, obj)
        if problem:
            return problem
    cams = [c.name for c in scene.cameras]
    if len(set(cams)) != len(cams):
        return "scene.cameras", f"camera names must be unique, got {cams}"
    for i, cam in enumerate(scene.cameras):
        problem = _camera_aim(scene, cam)
        if problem:
            return f"scene.cameras[{i}]", problem
    return _fixed_overlaps(scene)


CAMERA_MARGIN = 0.3  # metres around the table where a camera's view axis may meet the floor plane


def _camera_aim(scene: SceneSection, cam: SceneCamera) -> str | None:
    """Why the camera's view axis (its image centre) misses the table, or None."""
    pos = cam.pos
    if cam.look_at is not None:
        forward = [b - a for a, b in zip(pos, cam.look_at, strict=True)]
    else:  # MuJoCo cameras look down their -z axis: minus the third column of the rotation
        w, x, y, z = cam.quat
        norm = math.sqrt(w * w + x * x + y * y + z * z)
        w, x, y, z = w / norm, x / norm, y / norm, z / norm
        forward = [-(2 * (x * z + w * y)), -(2 * (y * z - w * x)), -(1 - 2 * (x * x + y * y))]
    height = scene.table.height
    half = (scene.table.size[0] / 2 + CAMERA_MARGIN, scene.table.size[1] / 2 + CAMERA_MARGIN)
    hit = None
    if forward[2] < -1e-9 and pos[2] > height:
        t = (height - pos[2]) / forward[2]
        hit = (pos[0] + t * forward[0], pos[1] + t * forward[1])
    if hit is None or abs(hit[0]) > half[0] or abs(hit[1]) > half[1]:
        where = "never" if hit is None else f"at ({hit[0]:.2f}, {hit[1]:.2f}) m, off the table"
        return (
            f"camera {cam.name!r} looks at nothing: its view axis meets the table-top plane "
            f"{where}; expected a look_at (or quat) aiming at the table, e.g. look_at: "
            f"[0, 0, {height}]"
        )
    return None


def _cycle(scene: SceneSection) -> bool:
    for name in scene.objects:
        seen, current = set(), name
        while current is not None:
            if current in seen:
                return True
            seen.add(current)
            current = scene.objects[current].placement.relative_to
    return False


def nominal_xy(scene: SceneSection, name: str) -> tuple[float, float]:
    """The middle of an object's placement ranges, relative to the table centre (through its
    `relative_to` chain)."""
    obj = scene.objects[name]
    x, y = sum(obj.placement.x) / 2, sum(obj.placement.y) / 2
    if obj.placement.relative_to is not None:
        rx, ry = nominal_xy(scene, obj.placement.relative_to)
        x, y = x + rx, y + ry
    return x, y


def _reach(scene: SceneSection, name: str) -> tuple[float, float, float, float]:
    """Extremes of an object's centre over its placement ranges (x lo, x hi, y lo, y hi)."""
    obj = scene.objects[name]
    lo_x, hi_x, lo_y, hi_y = *obj.placement.x, *obj.placement.y
    if obj.placement.relative_to is not None:
        px0, px1, py0, py1 = _reach(scene, obj.placement.relative_to)
        lo_x, hi_x, lo_y, hi_y = lo_x + px0, hi_x + px1, lo_y + py0, hi_y + py1
    return lo_x, hi_x, lo_y, hi_y


def _fits_on_table(scene: SceneSection, name: str, obj: ObjectSpec) -> tuple[str, str] | None:
    radius = obj.footprint() or 0.0
    half_x, half_y = scene.table.size[0] / 2, scene.table.size[1] / 2
    lo_x, hi_x, lo_y, hi_y = _reach(scene, name)
    for axis, lo, hi, half in (("x", lo_x, hi_x, half_x), ("y", lo_y, hi_y, half_y)):
        if radius > half:
            return (
                f"scene.objects.{name}.size",
                f"the object (footprint radius {radius:.3f} m) is wider than the table along "
                f"{axis} ({2 * half:.3f} m); expected an object that fits on scene.table.size",
            )
        if lo - radius < -half or hi + radius > half:
            return (
                f"scene.objects.{name}.placement.{axis}",
                f"the object (footprint radius {radius:.3f} m) reaches {axis} from "
                f"{lo - radius:.3f} to {hi + radius:.3f} m, off the table "
                f"(it spans {-half:.3f} to {half:.3f} m from its centre); expected centres within "
                f"[{-half + radius:.3f}, {half - radius:.3f}]",
            )
    return None


def _fixed_overlaps(scene: SceneSection) -> tuple[str, str] | None:
    """Two objects whose placement cannot vary (a single point each) and whose footprints
    overlap: no draw can ever separate them."""
    fixed = []
    for name, obj in scene.objects.items():
        lo_x, hi_x, lo_y, hi_y = _reach(scene, name)
        if lo_x == hi_x and lo_y == hi_y and obj.footprint() and not obj.placement.overlap:
            if not obj.placement.on_top:
                fixed.append((name, lo_x, lo_y, obj.footprint()))
    for i, (a, ax, ay, ar) in enumerate(fixed):
        for b, bx, by, br in fixed[i + 1 :]:
            gap = math.hypot(ax - bx, ay - by)
            if gap < ar + br:
                return (
                    f"scene.objects.{b}.placement",
                    f"{b} and {a} are placed at fixed points {gap:.3f} m apart, closer than their "
                    f"footprints ({ar:.3f} + {br:.3f} m): they always overlap; expected ranges or "
                    "points further apart (or placement.overlap: true)",
                )
    return None


# --- what the rest of the spec derives from the section ---------------------------------------


def derived_objects(scene: SceneSection) -> dict[str, str]:
    """The spec's `objects:` (name -> MuJoCo body): robosuite names an object's body <name>_main,
    a composite's (bowl, bin) <name>_root."""
    return {
        name: f"{name}_root" if obj.kind in COMPOSITES else f"{name}_main"
        for name, obj in scene.objects.items()
    }


def derived_placement(scene: SceneSection) -> dict:
    """The spec's `placement:` for generation, as raw YAML data: per object that can move, offset
    ranges around its nominal pose (the middle of its ranges, where the env's reset puts it), and a
    `min_separation` from the footprints of objects that must not overlap."""
    objects = {}
    for name, obj in scene.objects.items():
        p = obj.placement
        ranges = {
            axis: [lo - (lo + hi) / 2, hi - (lo + hi) / 2]
            for axis, (lo, hi) in (("x", p.x), ("y", p.y), ("yaw", p.yaw))
        }
        if any(hi > lo for lo, hi in ranges.values()):
            objects[name] = ranges
    radii = [
        o.footprint()
        for o in scene.objects.values()
        if o.footprint() and not o.placement.overlap and not o.placement.on_top
    ]
    radii.sort(reverse=True)
    separation = round(radii[0] + radii[1] + 0.01, 4) if len(radii) >= 2 else 0.0
    return {"objects": objects, "min_separation": separation}


def composed_offsets(scene: SceneSection, offsets) -> dict[str, tuple[float, float, float]]:
    """Generation's per-object offsets (name -> dx, dy, dyaw) with each `relative_to` object
    also moved by its references' dx and dy, so that it keeps its place relative to them."""
    composed = {name: tuple(value) for name, value in offsets.items()}
    for name, obj in scene.objects.items():
        dx = dy = 0.0
        ref = obj.placement.relative_to
        while ref is not None:
            rx, ry, _ = offsets.get(ref, (0.0, 0.0, 0.0))
            dx, dy, ref = dx + rx, dy + ry, scene.objects[ref].placement.relative_to
        if dx or dy:
            own = composed.get(name, (0.0, 0.0, 0.0))
            composed[name] = (own[0] + dx, own[1] + dy, own[2])
    return composed


def template_slots(text: str) -> list[tuple[str, str]]:
    """The {object.attribute} slots of an instruction template, in order. ValueError for a
    slot with a conversion or format spec ({cube.name!r}, {cube.name:>10}): str.format would
    apply them (or fail) when the episode's instruction is filled in."""
    slots = []
    for _, field, spec, conversion in string.Formatter().parse(text):
        if field is None:
            continue
        if spec or conversion:
            extra = f"!{conversion}" if conversion else f":{spec}"
            raise ValueError(f"slot {{{field}{extra}}} has a conversion or format spec")
        obj, _, attribute = field.partition(".")
        slots.append((obj, attribute))
    return slots


def check_templates(
    instructions: list[str], scene: SceneSection, where: str = "instructions[{i}]"
) -> tuple[str, str] | None:
    """Every slot must name an object of the scene and an attribute it has. `where`: the field
    of instruction i, e.g. ``subtasks[{i}].instruction``."""
    for i, text in enumerate(instructions):
        if text is None:
            continue
        try:
            slots = template_slots(text)
        except ValueError as err:
            return (
                where.format(i=i),
                f"malformed template ({err}); slots look like {{cube.color}} (write {{{{ and }}}} "
                "for a literal brace)",
            )
        for obj, attribute in slots:
            slot = f"{{{obj}.{attribute}}}" if attribute else f"{{{obj}}}"
            if obj not in scene.objects:
                return (
                    where.format(i=i),
                    f"slot {slot} names no object (expected one of: {', '.join(scene.objects)})",
                )
            has = ["name", *(["color"] if scene.objects[obj].color is not None else [])]
            if attribute not in has:
                return (
                    where.format(i=i),
                    f"slot {slot} names no attribute of {obj} "
                    f"(expected one of: {', '.join(f'{obj}.{a}' for a in has)})",
                )
    return None


def subtask_template_problem(
    instructions: list[str | None], scene: SceneSection | None
) -> tuple[str, str] | None:
    """subtasks[i].instruction: slots as in instructions, checked against the scene; without a
    scene: section there is nothing a slot could name."""
    where = "subtasks[{i}].instruction"
    if scene is not None:
        return check_templates(instructions, scene, where)
    for i, text in enumerate(instructions):
        if text is None:
            continue
        try:
            slots = template_slots(text)
        except ValueError as err:
            return where.format(i=i), f"malformed template ({err})"
        if slots:
            obj, attribute = slots[0]
            slot = f"{{{obj}.{attribute}}}" if attribute else f"{{{obj}}}"
            return (
                where.format(i=i),
                f"slot {slot} names an object's attribute, and the spec has no scene: section "
                "to take it from; expected plain text",
            )
    return None


def fill_from_scene(raw):
    """Before validation: a spec with a `scene:` section gets task.env, objects and placement
    from it where it leaves them out. A section that does not validate still gives task.env and
    objects, so that validation reports the section's own error first."""
    if not isinstance(raw, dict) or not isinstance(raw.get("scene"), dict):
        return raw
    raw = dict(raw)
    task = raw.get("task")
    if isinstance(task, dict) and "env" not in task:
        raw["task"] = {**task, "env": SCENE_ENV}
    try:
        scene = SceneSection.model_validate(raw["scene"])
    except ValueError:
        objects = raw["scene"].get("objects")
        if isinstance(objects, dict) and objects and "objects" not in raw:
            kinds = {k: v.get("kind") if isinstance(v, dict) else None for k, v in objects.items()}
            raw["objects"] = {
                str(k): f"{k}_root" if kind in COMPOSITES else f"{k}_main"
                for k, kind in kinds.items()
            }
        return raw
    raw.setdefault("objects", derived_objects(scene))
    raw.setdefault("placement", derived_placement(scene))
    return raw


def scene_problem(
    env: str,
    success: str | None,
    instructions: list[str],
    scene: SceneSection | None,
    surfaces: list[str] = (),
) -> tuple[str, str] | None:
    """After validation: (field, message) of what is wrong between the section and the spec.
    `surfaces`: appearance.textures.surfaces (re-coloured per variant)."""
    if scene is None:
        if env == SCENE_ENV:
            return "task.env", f"{SCENE_ENV} is built from a scene: section, and the spec has none"
        return None
    if env != SCENE_ENV:
        return "task.env", "give task.env (a robosuite env) or scene: (a scene), not both"
    if success is None:
        return (
            "task.success",
            "a scene: needs its success as a predicate, e.g. inside(cube, bowl)",
        )
    for i, surface in enumerate(surfaces):
        obj = scene.objects.get(surface)
        if obj is not None and isinstance(obj.color, PaletteColor):
            return (
                f"appearance.textures.surfaces[{i}]",
                f"{surface} takes its colour from a palette, named by the instructions: an "
                "appearance variant must not re-colour it; expected it left out of surfaces",
            )
    return check_scene(scene) or check_templates(instructions, scene)
