"""The parameters the generators take: plain frozen records, defined here, not the spec.

The generators import nothing of `factory`; `demofactory.specs.adapters` maps the validated scene
spec
(`demofactory.specs.spec.SceneSpec`, pydantic) onto these records, field by field. Units and
meanings are
the spec's: see the matching `*Spec` model for each field's documentation and default.

    SceneSpec ──► demofactory.specs.adapters ──► MimicGenParams
    (demofactory.generators.mimicgen)
                                   ──► AppearanceParams    (demofactory.generators.appearance)
                                   ──► TextureBankParams   (demofactory.generators.texture_bank)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# --- trajectory generation (demofactory.generators.mimicgen)
# -------------------------------------------------


@dataclass(frozen=True)
class PlacementRangeParams:
    """Offsets from an object's start pose, drawn uniformly: x, y in metres, yaw in radians."""

    x: tuple[float, float] = (0.0, 0.0)
    y: tuple[float, float] = (0.0, 0.0)
    yaw: tuple[float, float] = (0.0, 0.0)


@dataclass(frozen=True)
class PlacementParams:
    """Where objects start: per object name its ranges; centres kept `min_separation` apart (m)."""

    objects: Mapping[str, PlacementRangeParams] = field(default_factory=dict)
    min_separation: float = 0.0
    joint_noise: float = 0.0  # radians, uniform per arm joint (two arms: the bimanual generator)


@dataclass(frozen=True)
class GenerationParams:
    """The MimicGen knobs of one attempt (`demofactory.specs.spec.GenerationSpec` documents
    each)."""

    source_selection: str  # "random", "nearest_object" or "nearest_robot"
    nearest_k: int
    source_per: str  # "episode" or "subtask"
    action_noise: float
    noise_during_interpolation: bool
    interpolation_steps: int
    fixed_steps: int
    start_from: str  # "current_pose" or "last_target"
    subtask_retries: int
    settle_steps: int
    success_hold_steps: int
    transit: str  # "direct", "over" or "plan"
    transit_clearance: float
    transit_speed: float
    held_object_correction: bool = True
    plan_checks: int = 20000  # collision checks per planned transit at most
    trim_pauses: bool = True  # transit: plan drops the person's pauses inside skill windows
    grasp_approach: str = "auto"  # transit: plan: "auto", "straight" (the hand's axis) or "replay"
    release: str = "auto"  # "lower" (down onto what is below, then open), "replay" or "auto"


@dataclass(frozen=True)
class SubtaskParams:
    """One subtask: its reference object, the predicate text that ends it, extra end steps."""

    object: str
    ends_when: str | None = None  # None: the task's success ends it (the last subtask)
    end_offset: tuple[int, int] = (0, 0)  # [lo, hi] steps after the predicate first holds
    skill_margin: float = 0.08  # metres: see demofactory.specs.sections.SkillSpec


@dataclass(frozen=True)
class MimicGenParams:
    """Everything `demofactory.generators.mimicgen.generate_attempt` needs besides the scene and
    demos."""

    objects: tuple[str, ...]  # the scene's object names (predicates and poses use them)
    subtasks: tuple[SubtaskParams, ...]  # in spec order: demos' `order` indexes into it
    horizon: int  # most control steps of one attempt
    generation: GenerationParams
    placement: PlacementParams = PlacementParams()
    symmetry: Mapping[str, int] = field(default_factory=dict)  # object -> N-fold yaw symmetry


# --- appearance (demofactory.generators.appearance)
# ----------------------------------------------------------


@dataclass(frozen=True)
class TextureParams:
    """Surfaces to re-texture, the procedural patterns to draw from, the bank's share."""

    surfaces: tuple[str, ...]  # "table", "floor", "walls" or object names
    patterns: tuple[str, ...]
    bank_share: float = 0.0  # chance a surface takes a bank image (0: no bank)


@dataclass(frozen=True)
class LightParams:
    position: float = 0.0  # metres, per axis
    direction: float = 0.0  # radians of tilt at most
    intensity: tuple[float, float] = (1.0, 1.0)  # diffuse scale [lo, hi]
    color: float = 0.0  # per-channel tint 1 + U(-c, c)


@dataclass(frozen=True)
class CameraJitterParams:
    position: float = 0.0  # metres, per axis
    orientation: float = 0.0  # radians about a random axis at most


@dataclass(frozen=True)
class AppearanceParams:
    """What an appearance variant may change, and how the model's parts are found.

    where: the spec file, named by errors. env: the simulator model's name, for messages.
    objects: object name -> body name in the model. cameras: the rendered cameras' names.
    """

    where: str
    env: str
    objects: Mapping[str, str]
    cameras: tuple[str, ...] = ()
    textures: TextureParams | None = None
    lights: LightParams | None = None
    camera: CameraJitterParams | None = None


# --- texture bank (demofactory.generators.texture_bank)
# ------------------------------------------------------


@dataclass(frozen=True)
class TextureBankParams:
    """A diffusers text-to-image model and what to make with it (see `TextureBankSpec`)."""

    model: str  # a Hugging Face model id (already cached) or a local folder
    prompts: tuple[str, ...]
    per_prompt: int = 4
    steps: int = 25
    guidance_scale: float = 7.5
    size: int = 256  # square images, pixels
    seed: int = 0
    device: str = "auto"  # "auto", "cpu" or "cuda"


@dataclass(frozen=True)
class ArmSubtaskParams:
    """One subtask of a two-arm task: the arm that does it and how it waits (spec's subtasks)."""

    arm: str  # "right" or "left"
    object: str
    ends_when: str | None = None  # None: the task's success ends it (the arm's last subtask)
    end_offset: tuple[int, int] = (0, 0)
    coordination: str = "parallel"  # "parallel", "coordinated" or "sequential"
    after: int | None = None  # sequential: the spec index of the subtask it waits for


@dataclass(frozen=True)
class BimanualParams:
    """What `demofactory.generators.bimanual.generate_bimanual_attempt` needs of a spec."""

    arms: tuple[str, ...]  # in action order (right first)
    objects: tuple[str, ...]
    subtasks: tuple[ArmSubtaskParams, ...]  # in spec order
    horizon: int
    generation: GenerationParams
    placement: PlacementParams = PlacementParams()
