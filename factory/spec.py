"""Scene specs: the YAML a user writes, parsed and validated as pure data.

`load_spec(path)` reads YAML and validates it with pydantic, reporting every
error with its YAML path at once (`SpecError`). It touches nothing but the
file: whether seed demos exist, the env builds and cameras exist is checked
afterwards by `factory.resolve.resolve_spec`, with equally clear messages.

    name: stack
    seed: 0
    task: {env: Stack, robot: Panda, horizon: 800}
    seed_demos: [demos/stack_panda_1demo_robosuite100.hdf5]
    objects: {cubeA: cubeA_main, cubeB: cubeB_main}
    subtasks:
      - {object: cubeA, ends_when: grasped(cubeA)}
      - {object: cubeB}
    ...
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from factory.errors import SpecError
from factory.predicates import parse_predicate


class _Strict(BaseModel):
    # Unknown keys are errors: a typo must never silently fall back to a default.
    # NaN and infinity are errors too: `.nan` in a placement range would crash every attempt.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class TaskSpec(_Strict):
    env: str  # robosuite environment name, e.g. "Lift", "Stack"
    robot: str = "Panda"  # robosuite robot name (single arm)
    controller: Literal["OSC_POSE"] = "OSC_POSE"  # arm controller; generation emits delta poses
    control_freq: int = Field(20, ge=1, le=500)  # Hz; seed demos were recorded at 20
    horizon: int = Field(1000, ge=1)  # most control steps one attempt may take
    # Step with factory.fast_step (robosuite's OSC math without its per-substep object
    # overhead, ~2x faster, equal to env.step to ~1e-13 per step) or with robosuite's env.step.
    fast_control: bool = True
    # The task's success as a predicate over spec objects, e.g.
    # "all(on_peg(square_nut, square_peg), on_peg(round_nut, round_peg))". None: robosuite's own check.
    success: str | None = None

    @field_validator("success")
    @classmethod
    def _success(cls, text: str | None) -> str | None:
        if text is not None and parse_predicate(text).mentions("success"):
            raise ValueError(f"task.success cannot refer to itself ('success'), got {text!r}")
        return text


class SubtaskSpec(_Strict):
    object: str  # reference object: the segment is re-targeted relative to its pose
    # Predicate ending the subtask (see factory/predicates.py), e.g. grasped(cubeA). None, or
    # `success`: this subtask finishes the task; it comes last in every demo and runs to its end.
    ends_when: str | None = None
    end_offset: tuple[int, int] = (
        0,
        0,
    )  # extra steps after the predicate first holds, drawn in [lo, hi]

    @field_validator("ends_when")
    @classmethod
    def _predicate(cls, text: str | None) -> str | None:
        if text is not None:
            parse_predicate(text)
        return text

    @field_validator("end_offset")
    @classmethod
    def _offset(cls, offset: tuple[int, int]) -> tuple[int, int]:
        if not 0 <= offset[0] <= offset[1]:
            raise ValueError(f"expected [lo, hi] with 0 <= lo <= hi, got {list(offset)}")
        return offset


class PlacementRange(_Strict):
    # Offsets from the object's pose at the start of the first seed demo, drawn uniformly.
    x: tuple[float, float] = (0.0, 0.0)  # metres
    y: tuple[float, float] = (0.0, 0.0)  # metres
    yaw: tuple[float, float] = (0.0, 0.0)  # radians, about the world z axis

    @model_validator(mode="after")
    def _ordered(self) -> PlacementRange:
        for axis in ("x", "y", "yaw"):
            lo, hi = getattr(self, axis)
            if lo > hi:
                raise ValueError(f"{axis} must be [lo, hi] with lo <= hi, got [{lo}, {hi}]")
        return self


class PlacementSpec(_Strict):
    objects: dict[
        str, PlacementRange
    ] = {}  # spec object name -> ranges; absent: start as in the demo
    min_separation: float = Field(0.0, ge=0.0)  # metres between object centres (xy), by rejection


class GenerationSpec(_Strict):
    attempts: int = Field(
        100, ge=1
    )  # most generation attempts; only successes are kept and rendered
    # Stop once this many attempts succeeded (each gives appearance.variants_per_trajectory episodes).
    target_successes: int | None = Field(None, ge=1)
    attempts_per_shard: int = Field(10, ge=1)  # the unit of distributed work and of resume
    # How a source demo is picked: at random; at random among the `nearest_k` demos whose
    # reference object (at the segment start) is nearest the current one; or nearest eef pose.
    source_selection: Literal["random", "nearest_object", "nearest_robot"] = "random"
    nearest_k: int = Field(3, ge=1)
    source_per: Literal["episode", "subtask"] = (
        "episode"  # one source demo per episode, or per subtask
    )
    action_noise: float = Field(0.05, ge=0.0, le=1.0)  # std of Gaussian noise on arm actions
    noise_during_interpolation: bool = True  # noise on the bridging steps too
    interpolation_steps: int = Field(5, ge=0)  # steps bridging to a segment's first target
    fixed_steps: int = Field(0, ge=0)  # steps holding the first target before a segment
    # The first segment's bridge starts from the robot's current pose, or from the last
    # target of the previous segment (MimicGen's default for later segments).
    start_from: Literal["current_pose", "last_target"] = "current_pose"
    subtask_retries: int = Field(0, ge=0)  # per subtask: restore its start state and try again
    # With retries on: steps a subtask's predicate may take to hold after its segment, holding
    # the last target (a closing gripper needs a moment to register a grasp).
    settle_steps: int = Field(5, ge=0)
    success_hold_steps: int = Field(1, ge=1)  # success must hold on this many final steps
    # The motion bridging two segments: `direct` interpolates straight to the next segment's first
    # target; `over` rises to `transit_clearance` above the higher of the two poses, crosses, and
    # descends, so a carried object does not sweep through the others.
    transit: Literal["direct", "over"] = "direct"
    transit_clearance: float = Field(0.08, ge=0.0, le=0.5)  # metres, for transit: over
    transit_speed: float = Field(
        0.02, gt=0.0, le=0.2
    )  # metres per control step on the way, for transit: over


class CameraSpec(_Strict):
    name: str  # a camera of the robosuite model, e.g. agentview, robot0_eye_in_hand
    width: int = Field(84, ge=8, le=2048)  # pixels
    height: int = Field(84, ge=8, le=2048)  # pixels
    depth: bool = False  # also store metric depth (metres) for this camera
    # Also store a segmentation image: per pixel the index of the MuJoCo geom or body seen,
    # or of the spec object (1..n in `objects` order; 0 = anything else).
    segmentation: Literal["none", "geom", "body", "object"] = "none"


class RenderSpec(_Strict):
    # Defaults chosen by measurement under software GL (benchmarks/bench_render.py):
    # reflections off ~1.9x faster; no multisampling ~1.8x faster (robosuite's look: 4).
    reflections: bool = False
    shadows: bool = True
    multisamples: int = Field(0, ge=0, le=16)  # anti-aliasing samples per pixel
    jpeg_quality: int = Field(90, ge=1, le=100)
    # GPUs each Ray worker asks for (fractions share one); > 0 renders with EGL on the GPU
    # Ray assigns (MUJOCO_EGL_DEVICE_ID). 0: CPU workers, software GL.
    gpus_per_worker: float = Field(0.0, ge=0.0)


class TextureBankSpec(_Strict):
    """Textures made once per dataset by a diffusers text-to-image pipeline (Stable Diffusion family)."""

    model: str  # a Hugging Face model id (must already be in the local cache: no download) or a local folder
    prompts: list[str] = Field(
        min_length=1
    )  # e.g. "a wooden table top, seamless texture, top view"
    per_prompt: int = Field(4, ge=1)  # images made per prompt
    steps: int = Field(25, ge=1)  # denoising steps
    guidance_scale: float = Field(7.5, ge=0.0)
    size: int = Field(256, ge=64, le=1024, multiple_of=8)  # square images, pixels
    seed: int = Field(0, ge=0)  # image j of prompt i uses a seed derived from (seed, i, j)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    share: float = Field(
        0.5, ge=0.0, le=1.0
    )  # chance a randomised surface takes a bank texture, not a procedural one


class TextureRandomization(_Strict):
    # Surfaces to re-texture per variant: "table", "floor", "walls" and spec object names. A textured
    # material gets a new image; an untextured one (or a geom without material) a new colour.
    # How each is found in the model: generators/appearance.py.
    surfaces: list[str] = ["table", "floor", "walls"]
    # Built-in procedural patterns drawn from (no model weights needed).
    patterns: list[Literal["solid", "checker", "stripes", "noise", "gradient", "wood"]] = [
        "solid",
        "checker",
        "stripes",
        "noise",
        "gradient",
        "wood",
    ]
    bank: TextureBankSpec | None = None


class LightRandomization(_Strict):
    position: float = Field(
        0.0, ge=0.0
    )  # metres: each light moves by U(-p, p) per axis (its body's frame)
    direction: float = Field(
        0.0, ge=0.0, le=3.1416
    )  # radians: each light direction tilts by up to this
    intensity: tuple[float, float] = (1.0, 1.0)  # diffuse light scaled by U(lo, hi)
    color: float = Field(
        0.0, ge=0.0, le=1.0
    )  # diffuse also scaled per channel by 1 + U(-c, c): a tint

    @field_validator("intensity")
    @classmethod
    def _range(cls, value: tuple[float, float]) -> tuple[float, float]:
        if not 0.0 <= value[0] <= value[1]:
            raise ValueError(f"expected [lo, hi] with 0 <= lo <= hi, got {list(value)}")
        return value


class CameraJitter(_Strict):
    # Relative to the camera's parent body (world cameras: the world; eye-in-hand: the hand).
    position: float = Field(0.0, ge=0.0)  # metres: camera moves by U(-p, p) per axis
    orientation: float = Field(
        0.0, ge=0.0, le=3.1416
    )  # radians: rotated by up to this about a random axis


class AppearanceSpec(_Strict):
    """Per-episode looks: each physical trajectory is rendered K times, each render its own episode."""

    # K: episode index = attempt id * K + variant; the looks of variant k are drawn from a seed
    # derived from (spec seed, attempt seed, k) and recorded in provenance["appearance"].
    variants_per_trajectory: int = Field(1, ge=1)
    keep_original: bool = True  # variant 0 of each trajectory renders the scene as modelled
    textures: TextureRandomization | None = None
    lights: LightRandomization | None = None
    camera: CameraJitter | None = None


class WaypointSpec(_Strict):
    """One leg of a scripted seed demo: reach a gripper pose relative to an object, in `steps` steps.

    The target's frame is taken when the waypoint starts; `factory/script.py` turns it into a pose.
    """

    # Spec object whose pose, when this waypoint starts, is the frame of `pos`, `rot` and `turn`.
    # Absent: the previous waypoint's target (the robot's start pose for the first); `pos` is then
    # an offset in world axes and the orientation is kept ({pos: [0, 0, 0]} holds the pose).
    relative_to: str | None = None
    pos: tuple[float, float, float] = (0.0, 0.0, 0.0)  # metres, in the frame below
    # top_down: world axes at the object's position; object_yaw: those axes turned by the object's
    # yaw (a box grasped across its sides); object: the object's full frame (a door handle).
    orientation: Literal["top_down", "object_yaw", "object"] = "top_down"
    # Roll, pitch, yaw (radians, about the frame's x, y, z in that order) of the gripper relative to
    # a top-down grasp (pointing down the frame's -z, fingers closing along its y). For top_down and
    # object_yaw, of the two half turns a parallel gripper cannot tell apart, the one nearer the
    # robot's top-down home orientation is used.
    rot: tuple[float, float, float] = (0.0, 0.0, 0.0)
    # Axis-angle (radians) in the object frame: the whole target turns about the object's origin
    # (a joint through it: turning a handle by its latch).
    turn: tuple[float, float, float] = (0.0, 0.0, 0.0)
    gripper: Literal["open", "close"]  # the gripper command held during this waypoint
    steps: int = Field(
        ge=1
    )  # control steps to reach the target (interpolated); 20 per second at 20 Hz

    @field_validator("pos", "rot", "turn", mode="before")
    @classmethod
    def _three(cls, value):
        if not isinstance(value, list | tuple) or len(value) != 3:
            raise ValueError(f"expected three numbers, e.g. [0, 0, 0.1], got {value!r}")
        return value

    @model_validator(mode="after")
    def _frame_needed(self) -> WaypointSpec:
        framed = {"rot", "turn", "orientation"} & self.model_fields_set
        if self.relative_to is None and framed:
            raise ValueError(
                f"{', '.join(sorted(framed))} need relative_to (without it the previous target's orientation "
                "is kept and pos is a world offset), e.g. {relative_to: can, pos: [0, 0, 0.1], rot: [0, 0, 1.57]}"
            )
        return self


class ScriptSpec(_Strict):
    """Seed demos without a person: `factory script SPEC --out demo.hdf5` executes these waypoints."""

    # Demos to record. Each starts from the scene's reset layout plus a placement drawn from
    # `placement:` with a seed derived from (seed, demo, try), none on demo 0's first try (generation
    # places around the first demo's start); a try counts only if the task's success holds at its end.
    demos: int = Field(3, ge=1)
    tries: int = Field(5, ge=1)  # per demo: tries before `factory script` gives up with an error
    waypoints: list[WaypointSpec] = Field(min_length=1)  # executed in order


class OutputSpec(_Strict):
    dir: str | None = None  # default: out/<name>, relative to the working directory


class SceneSpec(_Strict):
    name: str = Field(
        pattern=r"^[A-Za-z0-9_.-]+$", max_length=100
    )  # dataset name: out/<name>, a file name
    seed: int = Field(0, ge=0)  # every random draw derives from it and the unit of work
    task: TaskSpec
    seed_demos: list[str] = []  # hdf5 files, relative to this spec file; needed to generate
    objects: dict[str, str] = Field(min_length=1)  # spec name -> MuJoCo body name
    # Objects that look the same after a turn about their vertical axis: N for N-fold symmetry
    # (a cube: 4 quarter turns; a bar: 2), 0 for any angle (a can). A segment re-targeted to such
    # an object uses the equivalent object frame that needs the least wrist rotation.
    symmetry: dict[str, int] = {}
    subtasks: list[SubtaskSpec] = Field(min_length=1)
    placement: PlacementSpec = PlacementSpec()
    generation: GenerationSpec = GenerationSpec()
    cameras: list[CameraSpec] = []  # none: a low-dimensional dataset, nothing rendered
    render: RenderSpec = RenderSpec()
    appearance: AppearanceSpec = AppearanceSpec()
    instructions: list[str] = Field(min_length=1)  # phrasings; one is drawn per episode
    output: OutputSpec = OutputSpec()
    script: ScriptSpec | None = None  # waypoints for `factory script` (scripted seed demos)

    _path: Path | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _cross_references(self) -> SceneSpec:
        names = ", ".join(self.objects)
        for i, sub in enumerate(self.subtasks):
            if sub.object not in self.objects:
                raise _FieldError(
                    f"subtasks[{i}].object",
                    f"unknown object {sub.object!r} (expected one of: {names})",
                )
            if sub.ends_when is not None:
                for obj in sorted(parse_predicate(sub.ends_when).all_objects()):
                    if obj not in self.objects:
                        raise _FieldError(
                            f"subtasks[{i}].ends_when",
                            f"unknown object {obj!r} (expected one of: {names})",
                        )
        finishing = [i for i, sub in enumerate(self.subtasks) if sub.ends_when in (None, "success")]
        if len(finishing) > 1:
            raise _FieldError(
                f"subtasks[{finishing[1]}].ends_when",
                f"only one subtask may end at the task's success (subtasks {finishing} do: no ends_when, or "
                "'success'); give the others the predicate that ends them, e.g. grasped(cubeA)",
            )
        if self.task.success is not None:
            for obj in sorted(parse_predicate(self.task.success).all_objects()):
                if obj not in self.objects:
                    raise _FieldError(
                        "task.success", f"unknown object {obj!r} (expected one of: {names})"
                    )
        for obj, fold in self.symmetry.items():
            if obj not in self.objects:
                raise _FieldError(f"symmetry.{obj}", f"unknown object (expected one of: {names})")
            if fold < 0:
                raise _FieldError(
                    f"symmetry.{obj}",
                    f"expected N >= 0 (N-fold about the vertical axis, 0: any angle), got {fold}",
                )
        for obj in self.placement.objects:
            if obj not in self.objects:
                raise _FieldError(
                    f"placement.objects.{obj}", f"unknown object (expected one of: {names})"
                )
        textures = self.appearance.textures
        if textures is not None:
            allowed = {"table", "floor", "walls", *self.objects}
            for i, surface in enumerate(textures.surfaces):
                if surface not in allowed:
                    raise _FieldError(
                        f"appearance.textures.surfaces[{i}]",
                        f"unknown surface {surface!r} (expected one of: {', '.join(sorted(allowed))})",
                    )
        if self.script is not None:
            self._check_script(self.script, names)
        cams = [c.name for c in self.cameras]
        if len(set(cams)) != len(cams):
            raise _FieldError("cameras", f"camera names must be unique, got {cams}")
        return self

    def _check_script(self, script: ScriptSpec, names: str) -> None:
        for i, point in enumerate(script.waypoints):
            if point.relative_to is not None and point.relative_to not in self.objects:
                raise _FieldError(
                    f"script.waypoints[{i}].relative_to",
                    f"unknown object {point.relative_to!r} (expected one of: {names})",
                )
        steps = sum(point.steps for point in script.waypoints)
        if steps > self.task.horizon:
            raise _FieldError(
                "script.waypoints",
                f"{steps} steps in all, more than task.horizon ({self.task.horizon})",
            )

    @field_validator("name")
    @classmethod
    def _not_dots(cls, name: str) -> str:
        if set(name) == {"."}:  # out/.. would be the working directory
            raise ValueError(
                f"expected a file name of letters, digits, _ . -, not only dots, got {name!r}"
            )
        return name

    @field_validator("instructions")
    @classmethod
    def _instructions(cls, instructions: list[str]) -> list[str]:
        for i, text in enumerate(instructions):
            if not text.strip():
                raise _FieldError(
                    f"instructions[{i}]",
                    "expected a non-empty instruction, e.g. 'lift the red cube'",
                )
        return instructions

    @model_validator(mode="after")
    def _can_succeed(self) -> SceneSpec:
        # Specs whose every attempt must fail: refused here rather than run to an empty dataset.
        hold, horizon = self.generation.success_hold_steps, self.task.horizon
        if hold > horizon:
            raise _FieldError(
                "generation.success_hold_steps",
                f"success must hold on {hold} final steps, more than task.horizon ({horizon}): "
                "no attempt could succeed; expected at most the horizon",
            )
        return self

    @property
    def path(self) -> Path:
        """The YAML file this spec came from (cwd for specs built in code)."""
        return self._path if self._path is not None else Path("<memory>")

    def resolve_path(self, relative: str) -> Path:
        """A path written in the spec, relative to the spec file's folder."""
        base = self._path.parent if self._path is not None else Path.cwd()
        return (base / relative).resolve()

    def output_dir(self) -> Path:
        return Path(self.output.dir) if self.output.dir else Path("out") / self.name

    def fingerprint(self) -> str:
        """sha256 of everything that shapes the data (not where it is written).

        `generation.attempts` and `target_successes` are left out: they say how far to extend
        the dataset, and re-running with more attempts must resume it, not refuse it.
        `render.gpus_per_worker` is left out too: it says where to run, not what to make; and
        `script`: it made the seed demo files, which `seed_demos` names.
        """
        data = self.model_dump(
            mode="json",
            exclude={
                "output": True,
                "script": True,
                "generation": {"attempts", "target_successes"},
                "render": {"gpus_per_worker"},
            },
        )
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


class _FieldError(ValueError):
    """Raised inside a validator to point at a field other than the model's own location."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(message)


def load_spec(path: str | Path, overrides: dict | None = None) -> SceneSpec:
    """Read and validate a scene spec; raise SpecError naming file, field and expectation.

    `overrides` are dotted keys applied before validation (``{"generation.attempts": 20}``),
    so that CLI flags are checked exactly like the YAML.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise SpecError(path, "", "file not found") from None
    except OSError as err:
        raise SpecError(path, "", f"cannot read ({err.strerror})") from None
    except UnicodeDecodeError as err:
        raise SpecError(
            path, "", f"not a YAML text file (byte {err.start} is not UTF-8 text)"
        ) from None
    if "\0" in text:
        raise SpecError(path, "", "not a YAML text file (it holds NUL bytes)")
    try:
        raw = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise SpecError(path, "", f"malformed YAML: {where}{problem}") from None
    if not isinstance(raw, dict):
        raise SpecError(
            path, "", f"expected a mapping of fields at the top level, got {type(raw).__name__}"
        )
    for dotted, value in (overrides or {}).items():
        _set_dotted(raw, dotted, value)
    try:
        spec = SceneSpec.model_validate(raw)
    except ValidationError as err:
        raise SpecError(path, *_describe(err)) from None
    spec._path = path.resolve()
    return spec


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load, except that a key given twice in one mapping is an error (not: the last one wins)."""

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: the base class reports it
                continue
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first on line {seen[key] + 1})",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


def _set_dotted(raw: dict, dotted: str, value) -> None:
    *parents, leaf = dotted.split(".")
    node = raw
    for key in parents:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            return  # e.g. `generation: 5`: validation reports that section, not a stray key
    node[leaf] = value


def _describe(err: ValidationError) -> tuple[str, str]:
    """All of pydantic's errors as (field paths, messages), each naming what was expected."""
    described = [_describe_one(item) for item in err.errors(include_url=False)]
    (field, message), rest = described[0], described[1:]
    if not rest:
        return field, message
    # SpecError prints the first field itself; only the others need theirs here.
    others = "; ".join(f"{f}: {m}" for f, m in rest)
    return field, f"{message} (and {len(rest)} more: {others})"


def _describe_one(item: dict) -> tuple[str, str]:
    loc = [p for p in item["loc"] if not (isinstance(p, str) and p.startswith("function-"))]
    ctx_err = (item.get("ctx") or {}).get("error")
    if isinstance(ctx_err, _FieldError):
        return ctx_err.field, str(ctx_err)
    field = _format_loc(loc)
    kind = item["type"]
    if kind == "extra_forbidden":
        allowed = _allowed_keys(loc[:-1])
        hint = f" (expected one of: {', '.join(allowed)})" if allowed else ""
        return field, f"unknown key{hint}"
    if kind == "missing":
        return field, "required field is missing"
    message = item["msg"].removeprefix("Value error, ")
    if "input" in item and kind not in ("model_type", "dict_type", "list_type", "value_error"):
        message += f", got {item['input']!r}"
    return field, message


def _format_loc(loc: list) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _allowed_keys(loc: list) -> list[str]:
    model: type[BaseModel] | None = SceneSpec
    for part in loc:
        if model is None or isinstance(part, int):
            continue
        field = model.model_fields.get(part)
        if field is None:
            return []  # inside a free-form mapping (objects, placement.objects)
        model = _model_of(field.annotation)
    return list(model.model_fields) if model else []


def _model_of(annotation) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_of(arg)
        if found:
            return found
    return None
