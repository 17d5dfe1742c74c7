"""The sections of a scene spec (`task:`, `generation:`, `cameras:`, ...) as pydantic models.

Every field carries its meaning, units and the reason for its default as a `description`:
`factory spec-help [FIELD]` prints them, `scene_specs/schema.json` (editor completion) and the
README's spec tables are generated from them (`factory spec-help --write`). The top-level
`SceneSpec` and loading live in `demofactory.specs.spec`, which re-exports every name here.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from demofactory.generators.predicates import parse_predicate
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    field_validator,
    model_validator,
)


class StrictModel(BaseModel):
    # The base of every spec model (here and in `demofactory.specs.scene`). Unknown keys are errors:
    # a typo must never silently fall back to a default. NaN and infinity are errors too:
    # `.nan` in a placement range would crash every attempt.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class RobotShare(StrictModel):
    """One robot of a mixed-robot dataset and its share of the attempts."""

    robot: str = Field(description="robosuite robot, as task.robot takes it (e.g. Sawyer).")
    share: StrictFloat = Field(  # a number: YAML's true is no share
        gt=0,
        le=1_000_000,  # their sum must stay finite (1e308 twice overflows to inf: every share 0)
        description="Its weight among task.robots: shares are divided by their sum, so "
        "[1, 1, 2] and [0.25, 0.25, 0.5] are the same mix. Attempts are assigned by attempt "
        "id (demofactory.robots.embodiments), so every range of attempts holds the mix to within "
        "~2.",
    )


# The arms of a two-arm task: robosuite's robots[0] is `right`, robots[1] `left` (in "parallel"
# robot 0 stands at -y, the right of a robot facing the table along +x).
TWO_ARMS = ("right", "left")
ONE_ARM = ("right",)  # robosuite 1.5 names a single arm "right" (robot.arms)


class TwoArmSpec(StrictModel):
    """Two arms: a pair of task.robot in one of robosuite's two-arm layouts (TwoArmLift, ...)."""

    configuration: Literal["parallel", "opposed", "single-robot"] = Field(
        "parallel",
        description="robosuite's env_configuration: parallel (a pair of task.robot side by side "
        "on one edge of the table, 0.5 m apart), opposed (the pair facing each other across it), "
        "both with the arms named right (robot 0) and left (robot 1); or single-robot: one "
        "task.robot with two arms of its own (GR1ArmsOnly, with its dexterous hands), right and "
        "left as the robot names them.",
    )


class TaskSpec(StrictModel):
    """The robosuite task: environment, robot, controller, episode length and success."""

    env: str = Field(description='robosuite environment name, e.g. "Lift", "Stack", "Door".')
    robot: str = Field(
        "Panda",
        description="robosuite robot: one fixed-base arm whose gripper has finger pads (Panda, "
        "Sawyer, IIWA, UR5e, Kinova3, Jaco). Seed demos of any of them are carried over through "
        "each gripper's grasp frame, whichever robot recorded them.",
    )
    robots: list[RobotShare] | None = Field(
        None,
        description="A mixed-robot dataset: robots with a share each, e.g. [{robot: Panda, "
        "share: 0.5}, {robot: Sawyer, share: 0.5}]. Each attempt runs on one of them; every "
        "episode and sample names its robot (its embodiment). task.robot, if also given, must be "
        "one of them (default, or task.robot: null: the first; `factory validate` and ADR use "
        "it). null: task.robot alone.",
    )
    controller: Literal["OSC_POSE"] = Field(
        "OSC_POSE", description="Arm controller; generation emits delta end-effector poses."
    )
    control_freq: int = Field(
        20, ge=1, le=500, description="Control steps per second (Hz); seed demos are at 20."
    )
    horizon: int = Field(
        1000, ge=1, description="Most control steps one attempt may take; longer ones fail."
    )
    fast_control: StrictBool = Field(
        True,
        description="Step with demofactory.simulation.fast_step: robosuite's OSC math without its "
        "per-substep "
        "object overhead, ~2x faster, equal to env.step to ~1e-13 per step. false: env.step.",
    )
    two_arm: TwoArmSpec | None = Field(
        None,
        description="A two-arm task (TwoArmLift, TwoArmHandover): a pair of task.robot, arms "
        "right and left, each subtask naming its arm; actions and states are per arm, right "
        "first. null: one arm.",
    )
    success: str | None = Field(
        None,
        description="The task's success as a predicate over spec objects, e.g. "
        "all(on_peg(square_nut, square_peg), on_peg(round_nut, round_peg)). "
        "null: robosuite's own success check.",
    )

    @field_validator("success")
    @classmethod
    def _success(cls, text: str | None) -> str | None:
        if text is not None and parse_predicate(text).mentions("success"):
            raise ValueError(f"task.success cannot refer to itself ('success'), got {text!r}")
        return text

    @model_validator(mode="before")
    @classmethod
    def _robot_or_robots(cls, data):
        robots = data.get("robots") if isinstance(data, dict) else None
        if not isinstance(robots, list) or not robots or not isinstance(robots[0], dict):
            return data  # a bad or empty list is the field validators' to report
        # task.robot stays what `factory validate`, ADR and the first env are built with: one
        # of the list (a spec extending a single-robot one inherits its task.robot)
        names = [r.get("robot") for r in robots if isinstance(r, dict)]
        if not all(isinstance(n, str) for n in names):
            return data  # a missing or non-string name is the field validators' to report
        if data.get("robot") is None:  # not given, or null to drop an inherited one
            return {**data, "robot": names[0]}
        if data["robot"] not in names:
            raise ValueError(
                f"task.robot ({data['robot']!r}, perhaps inherited through extends) is not "
                f"among task.robots ({', '.join(names)}): expected one of them; correct a "
                "misspelt name, or set task.robot: null to take the first"
            )
        return data

    @field_validator("robots")
    @classmethod
    def _robots(cls, robots: list[RobotShare] | None) -> list[RobotShare] | None:
        if robots is None:
            return None
        if not robots:
            raise ValueError(
                "task.robots needs at least one robot, e.g. [{robot: Panda, share: 1}]"
            )
        names = [r.robot for r in robots]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"task.robots names {', '.join(twice)} more than once")
        return robots


class SkillSpec(StrictModel):
    """The skill window of a subtask's segment: the contact-rich part replayed from the demo."""

    margin: float = Field(
        0.08,
        ge=0.0,
        le=1.0,
        description="Metres: the window opens where the hand last was this far (in the "
        "reference object's frame) from where it makes contact or works the gripper "
        "(NutAssembly from its human demo, 30 attempts: 0.05 gives 23, 0.08 26, 0.15 21).",
    )
    window: tuple[int, int] | None = Field(
        None,
        description="[start, end) demo steps of the window, given by hand (every seed demo); "
        "it must lie inside the subtask's segment (factory annotate shows the segments), and "
        "the replay stops at its end, where the subtask's check follows. null: found from the "
        "margin.",
    )

    @field_validator("window")
    @classmethod
    def _window(cls, window: tuple[int, int] | None) -> tuple[int, int] | None:
        if window is not None and not 0 <= window[0] < window[1]:
            raise ValueError(f"expected [start, end) with 0 <= start < end, got {list(window)}")
        return window


class SubtaskSpec(StrictModel):
    """One segment of every demo, re-targeted relative to the pose of its reference object."""

    object: str = Field(
        description="Reference object (a spec object name; any body, a door's moving handle "
        "too): the segment is re-targeted relative to its pose."
    )
    ends_when: str | None = Field(
        None,
        description="Predicate ending the subtask, e.g. grasped(cubeA) (see the predicate "
        "table). null or success: this subtask finishes the task; it comes last in every demo "
        "and runs to its end. In a demo where grasped(X) never holds but the hand touches X "
        "(pressed with an open hand), the subtask ends at touching(hand, X) instead.",
    )
    end_offset: tuple[int, int] = Field(
        (0, 0),
        description="[lo, hi] extra steps after the predicate first holds, drawn uniformly "
        "per attempt; [0, 3] lets a grasp firm up.",
    )

    instruction: str | None = Field(
        None,
        description="What the robot is told during this subtask, e.g. 'pick up the "
        "{milk.name}' (slots as in instructions). Each frame of the subtask carries it beside "
        "the episode's instruction (exports: a second task column). null: the episode's "
        "instruction.",
    )

    name: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="A name for this subtask, for a sequential subtask's `after` (e.g. "
        "right_lift). null: unnamed.",
    )
    arm: str | None = Field(
        None,
        description="The arm that does this subtask: right or left on a two-arm task "
        "(task.two_arm); null: the only arm (a one-arm task) -- a two-arm task needs it.",
    )
    coordination: Literal["parallel", "coordinated", "sequential"] = Field(
        "parallel",
        description="Two arms: parallel (this arm goes on as soon as its previous subtask "
        "ends), coordinated (it starts together with the other arm's coordinated subtask of the "
        "same rank, both re-targeted under one shared transform of this subtask's object, "
        "e.g. carrying a pot) or sequential (the arm holds still until the subtask named by "
        "`after` has ended, e.g. a handover). One arm: parallel.",
    )
    after: str | None = Field(
        None,
        description="For coordination: sequential, the name of the earlier subtask (of the "
        "other arm) this one waits for.",
    )

    skill: SkillSpec | None = Field(
        None,
        description="Where the contact-rich skill window of this subtask's segment starts, for "
        "generation.transit: plan (the free-space approach before it is planned, not replayed). "
        "null: found from each demo (the hand's distance to the reference object, the first "
        "contact and the gripper command) with the default margin.",
    )

    @field_validator("ends_when")
    @classmethod
    def _predicate(cls, text: str | None) -> str | None:
        if text is not None:
            parse_predicate(text)
        return text

    @field_validator("instruction")
    @classmethod
    def _instruction(cls, text: str | None) -> str | None:
        if text is not None and not text.strip():
            raise ValueError("expected a non-empty instruction, e.g. 'pick up the {cube.name}'")
        return text

    @field_validator("end_offset")
    @classmethod
    def _offset(cls, offset: tuple[int, int]) -> tuple[int, int]:
        if not 0 <= offset[0] <= offset[1]:
            raise ValueError(f"expected [lo, hi] with 0 <= lo <= hi, got {list(offset)}")
        return offset


def check_drawable(lo: float, hi: float) -> None:
    """ValueError unless numpy can draw uniformly from [lo, hi]: its width hi - lo must be a
    finite float (`uniform(-1e308, 1.7e308)` raises OverflowError)."""
    if not math.isfinite(hi - lo):
        raise ValueError(
            f"[{lo:g}, {hi:g}] is wider than a float can hold (hi - lo overflows); expected a "
            "range a uniform draw can take, e.g. [-3.14, 3.14]"
        )


MAX_DELAY_STEPS = 10_000  # control steps; far past any real latency, and within a C long


class PlacementRange(StrictModel):
    """Offsets from the object's pose at the start of the first seed demo, drawn uniformly."""

    x: tuple[float, float] = Field((0.0, 0.0), description="[lo, hi] metres along world x.")
    y: tuple[float, float] = Field((0.0, 0.0), description="[lo, hi] metres along world y.")
    yaw: tuple[float, float] = Field(
        (0.0, 0.0), description="[lo, hi] radians about the world z axis."
    )

    @model_validator(mode="after")
    def _ordered(self) -> PlacementRange:
        for axis in ("x", "y", "yaw"):
            lo, hi = getattr(self, axis)
            if lo > hi:
                raise ValueError(f"{axis} must be [lo, hi] with lo <= hi, got [{lo}, {hi}]")
            try:
                check_drawable(lo, hi)
            except ValueError as err:
                raise ValueError(f"{axis}: {err}") from None
        return self


class PlacementSpec(StrictModel):
    """Where objects start in each attempt, relative to the first seed demo's start."""

    objects: dict[str, PlacementRange] = Field(
        {},
        description="Spec object name -> x, y, yaw ranges (offsets from the first seed demo's "
        "start; a fixture such as the door moves with its body). Absent: starts as in the demo.",
    )
    min_separation: float = Field(
        0.0, ge=0.0, description="Metres between object centres (xy), enforced by rejection."
    )
    joint_noise: float = Field(
        0.0,
        ge=0.0,
        le=0.3,
        description="Two arms (task.two_arm): radians; each attempt offsets every arm joint of "
        "both robots from the first seed demo's start by a uniform draw in [-joint_noise, "
        "joint_noise] (robosuite's initialization_noise, type uniform; its default magnitude is "
        "0.02). What varies a task whose objects ride on the hands (TwoArmPegInHole). 0: none.",
    )


class AdrSpec(StrictModel):
    """Automatic domain randomization: before generating, probe batches of attempts find how
    far the `physics:` ranges can widen from nominal while generation still succeeds."""

    enabled: StrictBool = Field(
        True, description="Whether to run it (false: the ranges as written)."
    )
    probe_attempts: int = Field(
        10, ge=1, le=1000, description="Attempts per probe batch (one success rate per round)."
    )
    threshold: float = Field(
        0.8,
        ge=0.0,
        le=1.0,
        description="Success rate a probe must reach for the ranges to widen; below, they narrow.",
    )
    step: float = Field(
        0.1,
        gt=0.0,
        le=1.0,
        description="Width change per round, as a fraction of each range's way from nominal "
        "(scale 1, no delay, no tilt) to the range as written.",
    )
    start: float = Field(
        0.1, ge=0.0, le=1.0, description="Fraction of the written ranges the first probe uses."
    )
    rounds: int = Field(
        10, ge=1, le=1000, description="Probe rounds at most (fewer once the full ranges pass)."
    )


class RobustnessSpec(StrictModel):
    """Robust episodes: a successful attempt's actions are replayed open loop under `draws`
    other draws from the `physics:` ranges (factory/robustness/divergence.py); it is kept only when
    the
    task still succeeds in at least `min_success_share` of them, else it fails as "fragile"."""

    draws: int = Field(4, ge=1, le=100, description="Physics draws each success is replayed under.")
    min_success_share: float = Field(
        0.75,
        ge=0.0,
        le=1.0,
        description="Share of the draws in which the task must still succeed (0: keep every "
        "success, but record its score in provenance.divergence).",
    )


class RebalanceSpec(StrictModel):
    """Coverage of the placement space: after the planned attempts, extra attempts are drawn in
    the placement cells that kept episodes under-cover (factory/build/rebalance.py,
    factory/build/coverage.py)
    until every cell holds at least (1 - tolerance) of its even share of the kept episodes."""

    bins: int = Field(
        4, ge=1, le=16, description="Cells per placed axis (x, y, yaw) of each placed object."
    )
    tolerance: float = Field(
        0.5,
        ge=0.0,
        lt=1.0,
        description="A cell is covered once it holds (1 - tolerance) x kept / cells kept "
        "episodes, at least one (0: every cell its whole even share).",
    )
    rounds: int = Field(
        3, ge=1, le=20, description="Rounds of extra attempts at most (each re-counts first)."
    )
    max_extra_attempts: int | None = Field(
        None,
        ge=1,
        description="Extra attempts over all rounds at most; null: generation.attempts.",
    )


class GenerationSpec(StrictModel):
    """MimicGen's knobs: how attempts are made from the seed demos, and when they count."""

    attempts: int = Field(
        100, ge=1, description="Most generation attempts; only successes are kept and rendered."
    )
    target_successes: int | None = Field(
        None,
        ge=1,
        description="Stop once this many attempts succeeded (each gives "
        "appearance.variants_per_trajectory episodes). null: run every attempt.",
    )
    attempts_per_shard: int = Field(
        10, ge=1, description="Attempts per shard: the unit of distributed work and of resume."
    )
    source_selection: Literal["random", "nearest_object", "nearest_robot"] = Field(
        "random",
        description="How a source demo is picked: random; nearest_object: at random among the "
        "nearest_k demos whose reference object (at the segment start) is nearest the current "
        "one; nearest_robot: likewise by end-effector pose.",
    )
    nearest_k: int = Field(
        3, ge=1, description="Candidates for nearest_object and nearest_robot selection."
    )
    source_per: Literal["episode", "subtask"] = Field(
        "episode", description="One source demo per episode, or a new pick per subtask."
    )
    action_noise: float = Field(
        0.05,
        ge=0.0,
        le=1.0,
        description="Std of Gaussian noise on the arm actions, in action units (MimicGen's "
        "default).",
    )
    noise_during_interpolation: StrictBool = Field(
        True, description="Whether the bridging steps get action noise too."
    )
    interpolation_steps: int = Field(
        5, ge=0, description="Control steps bridging to a segment's first target."
    )
    fixed_steps: int = Field(
        0, ge=0, description="Control steps holding the first target before a segment."
    )
    start_from: Literal["current_pose", "last_target"] = Field(
        "current_pose",
        description="Where a bridge starts: the robot's current pose, or the last target of the "
        "previous segment (MimicGen's default for later segments).",
    )
    subtask_retries: int = Field(
        0,
        ge=0,
        description="Per subtask: restore the MuJoCo state saved at its start and try again "
        "(another source, offset and noise); the stored episode is the continuous successful "
        "branch.",
    )
    settle_steps: int = Field(
        5,
        ge=0,
        description="With retries on: steps a subtask's predicate may take to hold after its "
        "segment, holding the last target (a closing gripper needs a moment to register a "
        "grasp), before the subtask counts as failed.",
    )
    success_hold_steps: int = Field(
        1,
        ge=1,
        description="Success must hold on this many final steps, not merely at some step.",
    )
    transit: Literal["direct", "over", "plan"] = Field(
        "direct",
        description="The motion bridging two segments: direct interpolates straight to the next "
        "segment's first target; over rises to transit_clearance above the higher of the two "
        "poses, crosses and descends, so a carried object does not sweep through the others; "
        "plan replays only each segment's skill window (subtasks[].skill) and plans a "
        "collision-free joint-space path to it in the live scene (OMPL), a held object "
        "attached, falling back to direct where no path is found (counted in inspect).",
    )
    plan_checks: int = Field(
        20000,
        ge=100,
        le=2_000_000,
        description="Collision checks one planned transit may spend at most, for transit: plan "
        "(then the direct bridge); a count, not seconds, so a retried shard plans alike.",
    )
    grasp_approach: Literal["auto", "straight", "replay"] = Field(
        "auto",
        description="For transit: plan, a subtask that ends grasping its reference object: "
        "straight approaches the pose where the person closed the hand along the hand's own "
        "axis (from subtasks[].skill.margin away), then replays the closing; replay replays "
        "the person's whole skill window (their slide into the grasp included); auto is "
        "straight for a grasp re-fitted to the object as modelled now (the demo was recorded "
        "with another object model), replay otherwise.",
    )
    trim_pauses: StrictBool = Field(
        True,
        description="For transit: plan: steps of a skill window where the person paused (hand, "
        "fingers and objects still) are dropped, but the first two of each pause.",
    )
    release: Literal["auto", "lower", "replay"] = Field(
        "auto",
        description="Where a held object is let go: lower first lowers the hand straight down "
        "until what it holds rests on what is below it (or is within 5 mm of it), then opens, "
        "so an object taller than the person's does not fall and topple; replay opens where "
        "the demo did; auto is lower for transit: plan, replay otherwise.",
    )
    backend: Literal["cpu", "mjwarp"] = Field(
        "cpu",
        description="The physics: cpu, MuJoCo on a CPU core per worker; mjwarp, MuJoCo Warp "
        "(the gpu extra, pip install 'demofactory[gpu]'): a shard's attempts as one batch of "
        "worlds, each under its own physics: draw; one-arm specs without rebalance or "
        "transit: plan (factory run refuses the rest, naming backend cpu; docs/mjwarp.md). "
        "A dataset keeps the backend that made it.",
    )
    gpus_per_batch: float = Field(
        1.0,
        gt=0.0,
        le=1.0,
        description="backend mjwarp on Ray: the GPU share each batch actor asks for (it "
        "generates whole shards as batches of worlds; the other workers render and write them; "
        "fractions share a GPU with other batch actors or with render.gpus_per_worker, Ray "
        "never giving out more than a whole GPU). A cluster without a GPU runs the batches on "
        "warp's CPU device.",
    )
    batch_workers: int = Field(
        1,
        ge=1,
        description="backend mjwarp on Ray: how many batch actors generate shards (e.g. one a "
        "GPU); the rest of the cluster's CPUs render.",
    )
    transit_clearance: float = Field(
        0.08, ge=0.0, le=0.5, description="Metres above both poses, for transit: over."
    )
    transit_speed: float = Field(
        0.02,
        gt=0.0,
        le=0.2,
        description="Metres per control step on the way, for transit: over.",
    )
    held_object_correction: StrictBool = Field(
        True,
        description="A segment relative to another object than the one in the hand (carry the "
        "cube to the base) is shifted by where the held object sits in the hand now against "
        "where it sat in the source's, so it lands where the source's did. false: MimicGen's "
        "plain transform.",
    )
    adr: AdrSpec | None = Field(
        None,
        description="Automatic domain randomization of the physics: ranges start narrow and "
        "widen while probes succeed (factory/robustness/adr.py); null: the physics ranges as "
        "written.",
    )
    robustness: RobustnessSpec | None = Field(
        None,
        description="Keep only successes whose actions still succeed, replayed open loop, under "
        "most of N other physics draws (score in provenance.divergence; the rest fail as "
        '"fragile"); needs a physics: section. null: no replays.',
    )
    rebalance: RebalanceSpec | StrictBool | None = Field(
        None,
        description="Extra attempts in the placement cells kept episodes under-cover, recorded "
        "in generation.json (docs/coverage.md); true: the defaults. Needs placement ranges. "
        "null or false: keep what the planned attempts give.",
    )

    @field_validator("rebalance", mode="before")
    @classmethod
    def _rebalance_shorthand(cls, value):
        # `rebalance: true` is the defaults, `false` is off: both stored as the other forms, so
        # that the two spellings have one fingerprint
        if value is True:
            return RebalanceSpec()
        return None if value is False else value


class CameraSpec(StrictModel):
    """One rendered camera: RGB always (upright JPEG), depth and segmentation on request."""

    name: str = Field(
        description="A camera of the robosuite model, e.g. agentview, robot0_eye_in_hand."
    )
    width: int = Field(84, ge=8, le=2048, description="Pixels; 84 as in robomimic's datasets.")
    height: int = Field(84, ge=8, le=2048, description="Pixels.")
    depth: StrictBool = Field(
        False, description="Also store metric depth (16-bit PNG, millimetres; read as metres)."
    )
    segmentation: Literal["none", "geom", "body", "object"] = Field(
        "none",
        description="Also store a segmentation image: per pixel the MuJoCo geom or body id + 1, "
        "or the spec object (1..n in `objects` order); 0 = anything else.",
    )


class RenderSpec(StrictModel):
    """Renderer settings; defaults measured under software GL (benchmarks/bench_render.py)."""

    reflections: StrictBool = Field(
        False, description="Mirror reflections; off renders ~1.9x faster under software GL."
    )
    shadows: StrictBool = Field(True, description="Shadow mapping.")
    multisamples: int = Field(
        0,
        ge=0,
        le=16,
        description="Anti-aliasing samples per pixel; 0 renders ~1.8x faster under software GL, "
        "4 matches robosuite's look.",
    )
    jpeg_quality: int = Field(90, ge=1, le=100, description="JPEG quality of the RGB frames.")
    detail: Literal["full", "auto"] | Annotated[int, Field(ge=1)] = Field(
        "full",
        description="Visual mesh detail: full; auto (a face budget per mesh from the cameras' "
        "resolution and field of view); or a positive number of faces per mesh. Other than full "
        "also skips the geoms wholly outside each camera's view, and a camera that never moves "
        "draws the static geoms once and only the moving ones per frame (both exact). Collision "
        "geoms and physics are never changed (docs/render_detail.md).",
    )
    gpus_per_worker: float = Field(
        0.0,
        ge=0.0,
        description="GPUs each Ray worker asks for (fractions share one); > 0 renders with EGL "
        "on the GPU Ray assigns (MUJOCO_EGL_DEVICE_ID). 0: CPU workers, software GL.",
    )

    @field_validator("detail", mode="before")
    @classmethod
    def _detail(cls, value):
        if value in ("full", "auto"):
            return value
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
        raise ValueError(
            f"expected full, auto or a positive number of faces per mesh (e.g. 500), got {value!r}"
        )


class TextureBankSpec(StrictModel):
    """Textures made once per dataset by a diffusers text-to-image pipeline (Stable Diffusion)."""

    model: str = Field(
        description="A Hugging Face model id (already in the local cache: nothing is "
        "downloaded) or a local folder from save_pretrained."
    )
    prompts: list[str] = Field(
        min_length=1, description='e.g. "a wooden table top, seamless texture, top view".'
    )
    per_prompt: int = Field(4, ge=1, description="Images made per prompt.")
    steps: int = Field(25, ge=1, description="Denoising steps.")
    guidance_scale: float = Field(7.5, ge=0.0, description="Classifier-free guidance scale.")
    size: int = Field(
        256, ge=64, le=1024, multiple_of=8, description="Side of the square images, pixels."
    )
    seed: int = Field(
        0, ge=0, description="Image j of prompt i uses a seed derived from (seed, i, j)."
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="Where the pipeline runs; auto: cuda when available."
    )
    share: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="Chance a randomised surface takes a bank texture, not a procedural one.",
    )


class TextureRandomization(StrictModel):
    """New textures or colours per appearance variant."""

    surfaces: list[str] = Field(
        ["table", "floor", "walls"],
        description="Surfaces to re-texture: table, floor, walls and spec object names (only "
        "if the instructions do not name colours). A textured material gets a new image, an "
        "untextured one a new colour.",
    )
    patterns: list[Literal["solid", "checker", "stripes", "noise", "gradient", "wood"]] = Field(
        ["solid", "checker", "stripes", "noise", "gradient", "wood"],
        description="Built-in procedural patterns drawn from (numpy only, no model weights).",
    )
    bank: TextureBankSpec | None = Field(
        None, description="A generative texture bank; null: procedural patterns only."
    )


class LightRandomization(StrictModel):
    """Light changes per appearance variant, each light in its body's frame."""

    position: float = Field(
        0.0, ge=0.0, description="Metres: each light moves by U(-p, p) per axis."
    )
    direction: float = Field(
        0.0, ge=0.0, le=3.1416, description="Radians: each light direction tilts by up to this."
    )
    intensity: tuple[float, float] = Field(
        (1.0, 1.0), description="[lo, hi]: diffuse light scaled by U(lo, hi)."
    )
    color: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="Diffuse also scaled per channel by 1 + U(-c, c): a tint around white.",
    )

    @field_validator("intensity")
    @classmethod
    def _range(cls, value: tuple[float, float]) -> tuple[float, float]:
        if not 0.0 <= value[0] <= value[1]:
            raise ValueError(f"expected [lo, hi] with 0 <= lo <= hi, got {list(value)}")
        return value


class CameraJitter(StrictModel):
    """Camera pose changes per variant, relative to the camera's parent body (eye-in-hand: hand)."""

    position: float = Field(
        0.0, ge=0.0, description="Metres: the camera moves by U(-p, p) per axis."
    )
    orientation: float = Field(
        0.0,
        ge=0.0,
        le=3.1416,
        description="Radians: the camera turns by up to this about a random axis.",
    )


class AppearanceSpec(StrictModel):
    """Per-episode looks: each trajectory is rendered K times, each render its own episode."""

    variants_per_trajectory: int = Field(
        1,
        ge=1,
        description="K: episode index = attempt id * K + variant; variant k draws its looks "
        "from a seed derived from (spec seed, attempt seed, k), recorded in "
        "provenance.appearance.",
    )
    keep_original: StrictBool = Field(
        True, description="Variant 0 of each trajectory renders the scene as modelled."
    )
    textures: TextureRandomization | None = Field(
        None, description="Texture and colour changes; null: none."
    )
    lights: LightRandomization | None = Field(None, description="Light changes; null: none.")
    camera: CameraJitter | None = Field(None, description="Camera pose jitter; null: none.")


class WaypointSpec(StrictModel):
    """One leg of a scripted seed demo: reach a gripper pose relative to an object in `steps`.

    The target's frame is taken when the waypoint starts; `factory/seeds/script.py` turns it into a
    pose.
    """

    relative_to: str | None = Field(
        None,
        description="Spec object whose pose, when this waypoint starts, is the frame of pos, rot "
        "and turn. null: the previous waypoint's target (the robot's start pose for the first); "
        "pos is then an offset in world axes and the orientation is kept.",
    )
    pos: tuple[float, float, float] = Field(
        (0.0, 0.0, 0.0), description="Metres, in the frame set by relative_to and orientation."
    )
    orientation: Literal["top_down", "object_yaw", "object", "start"] = Field(
        "top_down",
        description="top_down: world axes at the object's position; object_yaw: those axes "
        "turned by the object's yaw (a box grasped across its sides); object: the object's full "
        "frame (a door handle); start: world axes at the object's position, the hand kept as it "
        "was when the demo started (rot turns it from there: GR-1's hand, fingers forward and "
        "thumb up, takes a can from the side).",
    )
    rot: tuple[float, float, float] = Field(
        (0.0, 0.0, 0.0),
        description="Roll, pitch, yaw (radians, about the frame's x, y, z in that order) of the "
        "gripper relative to a top-down grasp (pointing down -z, fingers closing along y). For "
        "top_down and object_yaw the half turn nearer the robot's home orientation is used.",
    )
    turn: tuple[float, float, float] = Field(
        (0.0, 0.0, 0.0),
        description="Axis-angle (radians) in the object frame: the whole target turns about the "
        "object's origin (a handle about its latch).",
    )
    gripper: Literal["open", "close"] = Field(
        description="The gripper command held during this waypoint."
    )
    steps: int = Field(
        ge=1,
        description="Control steps to reach the target (interpolated); 20 per second at 20 Hz.",
    )

    @field_validator("pos", "rot", "turn", mode="before")
    @classmethod
    def _three(cls, value):
        if not isinstance(value, list | tuple) or len(value) != 3:
            raise ValueError(f"expected three numbers, e.g. [0, 0, 0.1], got {value!r}")
        return value

    @model_validator(mode="after")
    def _frame_needed(self) -> WaypointSpec:
        # Values, not `model_fields_set`: a stored spec (dataset_info.json's `spec`, a full
        # model_dump) writes every default, and must validate again; a default has no effect.
        framed = {
            name
            for name in ("rot", "turn", "orientation")
            if getattr(self, name) != type(self).model_fields[name].default
        }
        if self.relative_to is None and framed:
            raise ValueError(
                f"{', '.join(sorted(framed))} need relative_to (without it the previous "
                "target's orientation is kept and pos is a world offset), e.g. "
                "{relative_to: can, pos: [0, 0, 0.1], rot: [0, 0, 1.57]}"
            )
        return self


class ScriptSpec(StrictModel):
    """Seed demos without a person: `factory script SPEC --out demo.hdf5` runs these waypoints."""

    demos: int = Field(
        3,
        ge=1,
        description="Demos to record. Each starts from the reset layout plus a placement drawn "
        "from placement: with a seed derived from (seed, demo, try), none on demo 0's first try "
        "(generation places around the first demo's start); a try counts only if the task's "
        "success holds at its end.",
    )
    tries: int = Field(
        5, ge=1, description="Per demo: tries before `factory script` gives up with an error."
    )
    waypoints: list[WaypointSpec] = Field(
        [], description="Executed in order (one arm; a two-arm task gives `arms` instead)."
    )
    arms: dict[str, list[WaypointSpec]] | None = Field(
        None,
        description="Two arms: per arm (right, left) its own waypoints, executed side by side "
        "from the same step; an arm done before the other holds its last target. null: one arm "
        "(waypoints).",
    )

    @model_validator(mode="after")
    def _some_waypoints(self) -> ScriptSpec:
        if not self.waypoints and not self.arms:
            raise ValueError(
                "expected waypoints (one arm) or arms (two: {right: [...], left: [...]}), "
                "e.g. waypoints: [{relative_to: cube, pos: [0, 0, 0.1], gripper: open, steps: 40}]"
            )
        if self.waypoints and self.arms:
            raise ValueError("expected waypoints (one arm) or arms (two), not both")
        for arm, points in (self.arms or {}).items():
            if not points:
                raise ValueError(f"arms.{arm}: expected at least one waypoint")
        return self


class OutputSpec(StrictModel):
    """Where the dataset is written."""

    dir: str | None = Field(
        None, description="Output folder, relative to the working directory; null: out/<name>."
    )
    shard_layout: Literal["step", "episode"] = Field(
        "step",
        description="Samples in a shard: `step`, one WebDataset sample a time step; `episode`, "
        "one an episode ([T, ...] arrays, per-step JPEGs), ~10x fewer bytes a step without "
        "cameras. Every reader reads both as the same steps (demofactory.shards.shard_layout).",
    )


# --- physics: (demofactory.simulation.physics draws and applies it)
# ---------------------------------------------
def _as_range(value):
    """A plain number x is the fixed range [x, x]."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (value, value)
    return value


def _scale_range(value: tuple[float, float]) -> tuple[float, float]:
    lo, hi = value
    if lo > hi:
        raise ValueError(f"expected [lo, hi] with lo <= hi, got [{lo}, {hi}]")
    if lo <= 0:
        raise ValueError(f"expected scales > 0 (1: nominal), e.g. [0.8, 1.2], got [{lo}, {hi}]")
    check_drawable(lo, hi)
    return value


def _damping_range(value: tuple[float, float]) -> tuple[float, float]:
    lo, hi = value
    if lo > hi:
        raise ValueError(f"expected [lo, hi] with lo <= hi, got [{lo}, {hi}]")
    if lo < 0:
        raise ValueError(f"expected scales >= 0 (1: nominal), e.g. [0.8, 1.2], got [{lo}, {hi}]")
    check_drawable(lo, hi)
    return value


def _delay_range(value: tuple[int, int]) -> tuple[int, int]:
    lo, hi = value
    if lo < 0 or lo > hi:
        raise ValueError(
            f"expected whole control steps [lo, hi] with 0 <= lo <= hi, got {list(value)}"
        )
    if hi > MAX_DELAY_STEPS:
        raise ValueError(f"expected at most {MAX_DELAY_STEPS} control steps, got {list(value)}")
    return value


_RANGE_INPUT = float | tuple[float, float]
ScaleRange = Annotated[
    tuple[float, float],
    BeforeValidator(_as_range, json_schema_input_type=_RANGE_INPUT),
    AfterValidator(_scale_range),
]
DampingRange = Annotated[
    tuple[float, float],
    BeforeValidator(_as_range, json_schema_input_type=_RANGE_INPUT),
    AfterValidator(_damping_range),
]
DelayRange = Annotated[
    tuple[int, int],
    BeforeValidator(_as_range, json_schema_input_type=int | tuple[int, int]),
    AfterValidator(_delay_range),
]


class PhysicsSpec(StrictModel):
    """Physics drawn per attempt (from its seed), recorded in provenance.physics, undone at reset.

    Scales multiply the model's nominal value; a range is [lo, hi], a plain number x is [x, x].
    """

    friction: dict[str, ScaleRange] = Field(
        {},
        description="Target -> sliding friction scale. A target is a spec object, a MuJoCo body "
        '(every geom of its subtree) or "gripper" (the finger geoms), e.g. {cube: [0.5, 1.5]}.',
    )
    mass: dict[str, ScaleRange] = Field(
        {},
        description="Spec object or MuJoCo body -> mass scale of its subtree's bodies (inertia "
        "scaled alike), e.g. {cube: [0.8, 2.0]}.",
    )
    size: dict[str, ScaleRange] = Field(
        {},
        description="Spec object or MuJoCo body -> size scale of its subtree's geoms (boxes, "
        "spheres, capsules, cylinders, ellipsoids; not meshes), positions within it and inertia "
        "alike (mass kept), e.g. {cube: [0.95, 1.05]}.",
    )
    joint_damping: dict[str, DampingRange] = Field(
        {},
        description='"arm" (every arm joint of the robot) or a MuJoCo joint -> joint damping '
        "scale (>= 0).",
    )
    joint_armature: dict[str, ScaleRange] = Field(
        {}, description='"arm" or a MuJoCo joint -> joint armature (rotor inertia) scale.'
    )
    kp: ScaleRange | None = Field(
        None, description="OSC_POSE stiffness scale (position and orientation); null: nominal."
    )
    damping_ratio: ScaleRange | None = Field(
        None, description="OSC_POSE damping ratio scale; null: nominal."
    )
    delay: DelayRange | None = Field(
        None,
        description="[lo, hi] whole control steps an action waits before it acts (absolute, "
        "not a scale); null: none.",
    )
    gravity_tilt: float = Field(
        0.0,
        ge=0.0,
        le=0.5,
        description="Radians: gravity tilts by an angle drawn in [0, this] about a random "
        "horizontal axis (absolute); 0: straight down.",
    )
