"""Scene specs: the YAML a user writes, parsed and validated as pure data.

`load_spec(path)` reads YAML and validates it with pydantic, reporting every
error with its YAML path at once (`SpecError`). It touches nothing but the
file: whether seed demos exist, the env builds and cameras exist is checked
afterwards by `demofactory.seeds.resolve.resolve_spec`, with equally clear messages.

    name: stack
    seed: 0
    task: {env: Stack, robot: Panda, horizon: 800}
    seed_demos: [demos/stack_panda_1demo_robosuite100.hdf5]
    objects: {cubeA: cubeA_main, cubeB: cubeB_main}
    subtasks:
      - {object: cubeA, ends_when: grasped(cubeA)}
      - {object: cubeB}
    ...

`load_stored_spec(info, where)` validates the copy a dataset keeps in its dataset_info.json
the same way (a full model_dump, defaults written out: it must load back).

A spec may start with `extends: other.yaml` and state only what differs (`load_raw_spec`
merges it over its parent first). The sections (`TaskSpec`, `GenerationSpec`, ...) live in
`demofactory.specs.sections`, with a description on every field (`factory spec-help`), and are
importable from here; `SceneSpec` and the loader are this module.

Why one module: `SceneSpec`'s cross-field checks (objects against subtasks, placement,
symmetry, script, scene) and the loader that reports them with YAML paths are one contract;
the sections themselves are already split out.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

import yaml
from demofactory.errors import SpecError
from demofactory.generators.predicates import HAND, PREDICATE_KINDS, parse_predicate
from demofactory.specs.arms import arm_names, arms_problem, two_arm_problem
from demofactory.specs.scene import (
    SceneSection,
    fill_from_scene,
    scene_problem,
    subtask_template_problem,
)
from demofactory.specs.sections import (  # noqa: F401 (re-exported: demofactory.specs.spec is the public name)
    AdrSpec,
    AppearanceSpec,
    CameraJitter,
    CameraSpec,
    GenerationSpec,
    LightRandomization,
    OutputSpec,
    PhysicsSpec,
    PlacementRange,
    PlacementSpec,
    RenderSpec,
    RobotShare,
    RobustnessSpec,
    ScriptSpec,
    StrictModel,
    SubtaskSpec,
    TaskSpec,
    TextureBankSpec,
    TextureRandomization,
    TwoArmSpec,
    WaypointSpec,
)
from pydantic import (
    BaseModel,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)


class SceneSpec(StrictModel):
    """A scene spec: one YAML file, one dataset (`factory spec-help` lists the sections)."""

    name: str = Field(
        pattern=r"^[A-Za-z0-9_.-]+$",
        max_length=100,
        description="Dataset name: the default output folder out/<name>, so a file name.",
    )
    seed: int = Field(
        0, ge=0, description="Every random draw derives from it and the unit of work."
    )
    task: TaskSpec = Field(description="The robosuite task: env, robot, controller, horizon.")
    seed_demos: list[str] = Field(
        [],
        description="Seed demo hdf5 files (robosuite's raw collection or robomimic), relative to "
        "this spec file; needed to generate, not to script.",
    )
    objects: dict[str, str] = Field(
        min_length=1,
        description="Spec object name -> MuJoCo body name, e.g. cube: cube_main. `hand` is "
        "reserved (the robot's gripper, as in touching(hand, handle)).",
    )
    symmetry: dict[str, int] = Field(
        {},
        description="Per object, N for N-fold symmetry about its vertical axis (a cube: 4; a "
        "bar: 2), 0 for any angle (a can): a segment re-targeted to it uses the equivalent frame "
        "that needs the least wrist rotation.",
    )
    subtasks: list[SubtaskSpec] = Field(
        min_length=1,
        description="The segments every demo is cut into, each relative to one object; in any "
        "order (annotation follows each demo's own).",
    )
    placement: PlacementSpec = Field(
        PlacementSpec(), description="Per-object x, y, yaw ranges and the minimum separation."
    )
    generation: GenerationSpec = Field(
        GenerationSpec(), description="Every MimicGen knob: attempts, source demos, noise."
    )
    cameras: list[CameraSpec] = Field(
        [], description="Rendered cameras; none: a low-dimensional dataset, nothing rendered."
    )
    render: RenderSpec = Field(
        RenderSpec(), description="Renderer settings (reflections, shadows, anti-aliasing, GPUs)."
    )
    appearance: AppearanceSpec = Field(
        AppearanceSpec(), description="Appearance variants: K looks per physical trajectory."
    )
    instructions: list[str] = Field(
        min_length=1,
        description="Language instructions, several phrasings: an episode gets one (by its "
        "seed) and the others, filled alike, as provenance.paraphrases.",
    )
    output: OutputSpec = Field(OutputSpec(), description="Where the dataset is written.")
    script: ScriptSpec | None = Field(
        None, description="Waypoints for `factory script` (seed demos without a person)."
    )
    # A scene described here (factory/specs/scene.py) instead of a robosuite env named by task.env;
    # it fills task.env, objects and placement when the spec leaves them out.
    scene: SceneSection | None = Field(None, description="A scene built from robosuite's classes.")
    physics: PhysicsSpec | None = Field(
        None,
        description="Physics drawn per attempt (friction, mass, size, joints, OSC gains, delay, "
        "gravity): scales of nominal values in [lo, hi], a number x meaning [x, x]; null: "
        "nominal physics.",
    )

    @model_validator(mode="before")
    @classmethod
    def _from_scene(cls, raw):
        return fill_from_scene(raw)

    @model_validator(mode="after")
    def _scene_checks(self) -> SceneSpec:
        textures = self.appearance.textures
        surfaces = textures.surfaces if textures is not None else []
        problem = scene_problem(
            self.task.env, self.task.success, self.instructions, self.scene, surfaces
        )
        if problem:
            raise _FieldError(*problem)
        problem = subtask_template_problem([sub.instruction for sub in self.subtasks], self.scene)
        if problem:
            raise _FieldError(*problem)
        return self

    _path: Path | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _cross_references(self) -> SceneSpec:
        names = ", ".join(self.objects)
        if HAND in self.objects:
            raise _FieldError(
                f"objects.{HAND}",
                f"{HAND!r} is reserved for the robot's gripper (touching({HAND}, handle)); "
                "give the object another name",
            )
        for i, sub in enumerate(self.subtasks):
            if sub.object not in self.objects:
                raise _FieldError(
                    f"subtasks[{i}].object",
                    f"unknown object {sub.object!r} (expected one of: {names})",
                )
            if sub.ends_when is not None:
                _check_predicate_objects(f"subtasks[{i}].ends_when", sub.ends_when, self.objects)
        problem = arms_problem(self.task, self.subtasks) or two_arm_problem(self)
        if problem:
            raise _FieldError(*problem)
        finishing = [i for i, sub in enumerate(self.subtasks) if sub.ends_when in (None, "success")]
        if len(finishing) > 1 and self.task.two_arm is None:  # two arms: one each (arms.py)
            raise _FieldError(
                f"subtasks[{finishing[1]}].ends_when",
                f"only one subtask may end at the task's success (subtasks {finishing} do: no "
                "ends_when, or 'success'); give the others the predicate that ends them, "
                "e.g. grasped(cubeA)",
            )
        if self.task.success is not None:
            _check_predicate_objects("task.success", self.task.success, self.objects)
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
                    expected = ", ".join(sorted(allowed))
                    raise _FieldError(
                        f"appearance.textures.surfaces[{i}]",
                        f"unknown surface {surface!r} (expected one of: {expected})",
                    )
        if self.script is not None:
            self._check_script(self.script, names)
        cams = [c.name for c in self.cameras]
        if len(set(cams)) != len(cams):
            raise _FieldError("cameras", f"camera names must be unique, got {cams}")
        return self

    def _check_script(self, script: ScriptSpec, names: str) -> None:
        arms = arm_names(self.task)
        if self.task.two_arm is not None and script.waypoints:
            raise _FieldError(
                "script.waypoints",
                "a two-arm task: expected per-arm waypoints, script.arms: {right: [...], "
                "left: [...]}",
            )
        lists = {"script.waypoints": script.waypoints}
        for arm, points in (script.arms or {}).items():
            if arm not in arms:
                raise _FieldError(
                    f"script.arms.{arm}",
                    f"unknown arm (expected one of: {', '.join(arms)})"
                    + ("; a second arm needs task.two_arm" if self.task.two_arm is None else ""),
                )
            lists[f"script.arms.{arm}"] = points
        for where, points in lists.items():
            for i, point in enumerate(points):
                if point.relative_to is not None and point.relative_to not in self.objects:
                    raise _FieldError(
                        f"{where}[{i}].relative_to",
                        f"unknown object {point.relative_to!r} (expected one of: {names})",
                    )
            steps = sum(point.steps for point in points)
            if steps > self.task.horizon:
                raise _FieldError(
                    where, f"{steps} steps in all, more than task.horizon ({self.task.horizon})"
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
    def _adr_needs_physics(self) -> SceneSpec:
        adr = self.generation.adr
        if adr is not None and adr.enabled and self.physics is None:
            raise _FieldError(
                "generation.adr",
                "widens the physics: section's ranges, and the spec has none; expected a "
                "physics: section (e.g. physics: {mass: {cube: [0.8, 2.0]}}) or adr: null",
            )
        if self.generation.robustness is not None and self.physics is None:
            raise _FieldError(
                "generation.robustness",
                "replays successes under draws from the physics: section's ranges, and the spec "
                "has none; expected a physics: section (e.g. physics: {mass: {cube: [0.8, 2.0]}}) "
                "or robustness: null",
            )
        if self.generation.rebalance is not None and not any(
            r.x[1] > r.x[0] or r.y[1] > r.y[0] or r.yaw[1] > r.yaw[0]
            for r in self.placement.objects.values()
        ):
            raise _FieldError(
                "generation.rebalance",
                "draws extra attempts in under-covered placement cells, and the spec places "
                "nothing; expected placement ranges (e.g. placement: {objects: {cube: {x: "
                "[-0.05, 0.05]}}}) or rebalance: null",
            )
        return self

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

    def output_dir(self) -> Path | str:
        """output.dir (a store's URL normalized, as --out is), else out/<name>."""
        from demofactory.shards.store import StoreError, is_remote, normalize_url

        if self.output.dir and is_remote(self.output.dir):
            try:
                return normalize_url(self.output.dir)
            except StoreError as err:
                raise SpecError(self.path, "output.dir", str(err)) from None
        return Path(self.output.dir) if self.output.dir else Path("out") / self.name

    def fingerprint(self) -> str:
        """sha256 of everything that shapes the data (not where it is written).

        `generation.attempts` and `target_successes` are left out: they say how far to extend
        the dataset, and re-running with more attempts must resume it, not refuse it.
        `render.gpus_per_worker`, `generation.gpus_per_batch` and `generation.batch_workers` are
        left out too: they say where to run, not what to make; and
        `script`: it made the seed demo files, which `seed_demos` names. An optional top-level
        section left out (null) is left out here too, so that adding one to the schema keeps
        the datasets made before resumable.
        """
        data = self.model_dump(
            mode="json",
            exclude={
                "output": True,
                "script": True,
                "generation": {
                    "attempts",
                    "target_successes",
                    "gpus_per_batch",
                    "batch_workers",
                },
                "render": {"gpus_per_worker"},
            },
        )
        data = {key: value for key, value in data.items() if value is not None}
        for path, default in ADDED_LATER.items():
            _drop_default(data, path.split("."), default)
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


# Fields added to the schema after datasets were made with it, and their defaults: a field at its
# default is left out of the fingerprint, so that a dataset made before it existed still resumes
# (tests/specs/test_spec_fingerprints.py holds the fingerprints of the shipped specs as released).
# A path segment ending in "[]" is a list: every element. Add each new field here.
ADDED_LATER: dict[str, object] = {
    "generation.adr": None,
    "generation.robustness": None,
    "generation.rebalance": None,
    "generation.plan_checks": 20000,
    "generation.grasp_approach": "auto",
    "generation.trim_pauses": True,
    "generation.release": "auto",
    "generation.backend": "cpu",
    "render.detail": "full",
    "subtasks[].skill": None,
    "subtasks[].instruction": None,
    "subtasks[].name": None,
    "subtasks[].arm": None,
    "subtasks[].coordination": "parallel",
    "subtasks[].after": None,
    "task.two_arm": None,
    "script.arms": None,
    "placement.joint_noise": 0.0,
}


def _drop_default(data, path: list[str], default) -> None:
    if not isinstance(data, dict) or not path:
        return
    head, rest = path[0], path[1:]
    if head.endswith("[]"):
        for item in data.get(head[:-2]) or ():
            _drop_default(item, rest, default)
    elif not rest:
        if head in data and data[head] == default:
            del data[head]
    else:
        _drop_default(data.get(head), rest, default)


class _FieldError(ValueError):
    """Raised inside a validator to point at a field other than the model's own location."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(message)


def _check_predicate_objects(field: str, text: str, objects: dict[str, str]) -> None:
    """Every name in predicate `text` is a spec object (or `hand`, where the predicate takes it).

    The first unknown name, alphabetically, is the error: it lists the valid names, `hand` among
    them when the predicate naming it could take the gripper (touching).
    """
    leaves = list(parse_predicate(text).leaves())
    unknown = sorted({obj for leaf in leaves for obj in leaf.objects} - {*objects, HAND})
    if not unknown:
        return
    takes_hand = any(
        PREDICATE_KINDS[leaf.name].hand and unknown[0] in leaf.objects for leaf in leaves
    )
    names = [*objects, f"{HAND} (the robot's gripper)"] if takes_hand else list(objects)
    raise _FieldError(field, f"unknown object {unknown[0]!r} (expected one of: {', '.join(names)})")


def load_spec(path: str | Path, overrides: dict | None = None) -> SceneSpec:
    """Read and validate a scene spec; raise SpecError naming file, field and expectation.

    `overrides` are dotted keys applied before validation (``{"generation.attempts": 20}``),
    so that CLI flags are checked exactly like the YAML. A spec with `extends:` is validated
    after merging it over its parent (`load_raw_spec`), so its fingerprint is the merged spec's.
    """
    path = Path(path)
    raw = load_raw_spec(path)
    if overrides:  # the file's own values first: a flag must not hide a bad one (attempts: -5)
        own = copy.deepcopy(raw)
        validate_raw_spec(own, path)
    try:
        for dotted, value in (overrides or {}).items():
            _set_dotted(raw, dotted, value, path)
        return validate_raw_spec(raw, path)
    except SpecError as err:
        raise _naming_option(err, overrides) from None


def _naming_option(err: SpecError, overrides: Mapping | None, prefix: str = "") -> SpecError:
    """`err` naming the command-line option behind the field it is about (`--set seed=-1`,
    `--attempts 0`), or, when it is about another field, the options given with the file."""
    if not overrides:
        return err
    given = getattr(overrides, "given", {})
    options = {path: given.get(path, f"--set {path}={value}") for path, value in overrides.items()}
    fields = [f.removeprefix(prefix) for f in err.field.split(", ")] if err.field else []
    for path, option in options.items():
        if any(f == path or f.startswith((f"{path}.", f"{path}[")) for f in fields):
            return SpecError(err.where, err.field, f"{err.message} (from {option})")
    return SpecError(err.where, err.field, f"{err.message} (with {', '.join(options.values())})")


def validate_raw_spec(raw: dict, path: str | Path) -> SceneSpec:
    """Raw YAML data validated as the spec at `path` (its relative files taken from its folder);
    a SpecError names the file and the first field."""
    path = Path(path)
    try:
        spec = SceneSpec.model_validate(raw)
    except ValidationError as err:
        raise SpecError(path, *_describe(err)) from None
    spec._path = path.resolve()
    return spec


def load_stored_spec(info: dict, where: str | Path, overrides: Mapping | None = None) -> SceneSpec:
    """The spec a dataset was made from, as its dataset_info.json (`where`) stores it: `spec`, a
    full `model_dump(mode="json")` (`demofactory.build.run.dataset_info`), validated again;
    SpecError
    naming `where` and the field (``spec.script.waypoints[1]``) otherwise.

    The spec file is not stored: relative paths in it (seed demos, meshes) resolve against the
    working directory (`SceneSpec.resolve_path`).

    `overrides` (dotted keys, as `load_spec` takes them) apply to the stored spec once it
    validates as stored."""
    stored = info.get("spec")
    if not isinstance(stored, dict):
        raise SpecError(where, "spec", f"expected the spec as a JSON object, got {stored!r}")
    try:
        spec = SceneSpec.model_validate(stored)
    except ValidationError as err:
        raise SpecError(where, *_describe(err, prefix="spec.")) from None
    if not overrides:
        return spec
    raw = copy.deepcopy(stored)
    try:
        for dotted, value in overrides.items():
            _set_dotted(raw, dotted, value, where)
        try:
            return SceneSpec.model_validate(raw)
        except ValidationError as err:
            raise SpecError(where, *_describe(err, prefix="spec.")) from None
    except SpecError as err:
        raise _naming_option(err, overrides, prefix="spec.") from None


def load_raw_spec(path: str | Path) -> dict:
    """The spec file's YAML mapping with `extends:` resolved, not yet validated.

    `extends: other.yaml` (relative to the file) merges this file over that one: mappings key by
    key, lists and scalars replaced whole. A parent's `seed_demos` (and its scene's mesh and MJCF
    files) in another folder are rewritten relative to this file. Cycles and missing parents are
    SpecErrors on the field `extends`.
    """
    return _merged(Path(path), ())


def _real(path: Path) -> Path:
    # os.path.realpath, not Path.resolve: a symlink loop is then a path that is not a file
    # (Path.resolve raises RuntimeError on one in Python 3.11).
    return Path(os.path.realpath(path))


def _merged(path: Path, children: tuple[Path, ...], child: Path | None = None) -> dict:
    try:
        raw = _read_mapping(path)
    except SpecError as err:
        if child is None or err.field or err.where != str(path):
            raise
        # The parent itself is no spec (a list, an .obj, binary): name the child's `extends`.
        raise SpecError(child, "extends", f"{path}: {err.message}") from None
    ref = raw.pop("extends", None)
    if ref is None:
        return raw
    if not isinstance(ref, str) or not ref.strip():
        raise SpecError(
            path,
            "extends",
            f"expected a spec file relative to this one, e.g. stack.yaml, got {ref!r}",
        )
    parent = path.parent / ref
    chain = (*children, _real(path))
    if _real(parent) in chain:
        names = " -> ".join(p.name for p in (*chain, _real(parent)))
        raise SpecError(
            path, "extends", f"a cycle: {names}; no spec may extend itself, even through others"
        )
    try:
        is_file, is_dir, exists = parent.is_file(), parent.is_dir(), parent.exists()
    except OSError as err:  # e.g. a name too long for the file system
        raise SpecError(path, "extends", f"cannot read {ref!r} ({err.strerror})") from None
    if not is_file:
        what = "is a directory" if is_dir else "is not a regular file" if exists else "not found"
        raise SpecError(path, "extends", f"{parent} {what}; expected a spec file, e.g. stack.yaml")
    base = _merged(parent, chain, path)
    if _real(parent.parent) != _real(path.parent):
        _rebase_files(base, parent.parent, path.parent)
    return _merge(base, raw)


def _rebase_files(base: dict, old: Path, new: Path) -> None:
    """The parent's spec-relative files (seed_demos, the scene's mesh and MJCF files) rewritten
    relative to the child's folder, in place."""

    def rebase(rel):
        return os.path.relpath(old / rel, new) if isinstance(rel, str) else rel

    if isinstance(base.get("seed_demos"), list):
        base["seed_demos"] = [rebase(d) for d in base["seed_demos"]]
    scene = base.get("scene")
    objects = scene.get("objects") if isinstance(scene, dict) else None
    for obj in objects.values() if isinstance(objects, dict) else ():
        if not isinstance(obj, dict):
            continue
        if "file" in obj:
            obj["file"] = rebase(obj["file"])
        if isinstance(obj.get("collision"), list):
            obj["collision"] = [rebase(c) for c in obj["collision"]]


def _merge(base: dict, over: dict) -> dict:
    """`over` deep-merged onto `base`: mappings key by key; lists and scalars replace."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _read_mapping(path: Path) -> dict:
    """One YAML file's top-level mapping (duplicate keys refused), or a SpecError naming it."""
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
    except RecursionError:  # PyYAML composes nodes recursively: [[[[...]]]] thousands deep
        raise SpecError(
            path, "", "malformed YAML: nested too deep to read; expected a spec a few levels deep"
        ) from None
    if not isinstance(raw, dict):
        raise SpecError(
            path, "", f"expected a mapping of fields at the top level, got {type(raw).__name__}"
        )
    return raw


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load, except that a key given twice in one mapping is an error (not: the last wins)."""

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


def _set_dotted(raw: dict, dotted: str, value, where: str | Path) -> None:
    """`raw[a][b][c] = value` for `a.b.c`, the sections made when the file leaves them out (or
    null); a number picks an item of a list (`subtasks.0.name`). A SpecError when the path goes
    below a value or past a list's end (the file was validated first)."""
    *parents, leaf = dotted.split(".")
    node, done = raw, []
    for key in [*parents, leaf]:
        if isinstance(node, list):
            if not key.isdigit() or int(key) >= len(node):
                raise SpecError(
                    where,
                    ".".join(done),
                    f"a list of {len(node)} items; expected an index 0..{len(node) - 1} after "
                    f"{'.'.join(done)}, not {key!r}",
                )
            index: int | str = int(key)
        elif isinstance(node, dict):
            index = key
        else:
            raise SpecError(
                where,
                ".".join(done),
                f"holds {node!r}, not fields; expected {'.'.join(done)}=VALUE, not {dotted}=VALUE",
            )
        if len(done) == len(parents):
            node[index] = value
            return
        done.append(key)
        if isinstance(node, dict) and node.get(key) is None:
            node[key] = {}
        node = node[index]


def _describe(err: ValidationError, prefix: str = "") -> tuple[str, str]:
    """All of pydantic's errors as (field paths, each after `prefix`, messages), each naming
    what was expected."""
    described = [_describe_one(item) for item in err.errors(include_url=False)]
    if prefix:  # the spec inside another document (dataset_info.json's `spec`)
        described = [
            (prefix.rstrip(".") if f == "(top level)" else prefix + f, m) for f, m in described
        ]
    # The scene: section fills task.env and objects: its own errors first (stable otherwise).
    scene = f"{prefix}scene"
    described.sort(key=lambda pair: not (pair[0] == scene or pair[0].startswith(f"{scene}.")))
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
    extends = ["extends"] if not loc else []  # the loader's key, resolved before validation
    return [*extends, *model.model_fields] if model else []


def _model_of(annotation) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_of(arg)
        if found:
            return found
    return None
