"""The spec seen by the generators: the validated `SceneSpec` mapped onto their own records.

The generators are a library that imports nothing of `factory`; they define the parameters
they take (`demofactory.generators.params`) and the scene they drive
(`demofactory.generators.scene_api.Scene`, which
`demofactory.simulation.scene.Scene` implements). This module is the one place that knows both
sides.
"""

from __future__ import annotations

from demofactory.generators.params import (
    AppearanceParams,
    ArmSubtaskParams,
    BimanualParams,
    CameraJitterParams,
    GenerationParams,
    LightParams,
    MimicGenParams,
    PlacementParams,
    PlacementRangeParams,
    SubtaskParams,
    TextureBankParams,
    TextureParams,
)
from demofactory.specs.arms import arm_names, subtask_arm
from demofactory.specs.spec import (
    AppearanceSpec,
    GenerationSpec,
    PlacementSpec,
    SceneSpec,
    TextureBankSpec,
)


def placement_params(placement: PlacementSpec) -> PlacementParams:
    """`spec.placement` as `demofactory.generators.mimicgen.sample_placement` takes it."""
    return PlacementParams(
        objects={
            name: PlacementRangeParams(x=tuple(r.x), y=tuple(r.y), yaw=tuple(r.yaw))
            for name, r in placement.objects.items()
        },
        min_separation=placement.min_separation,
        joint_noise=placement.joint_noise,
    )


SKILL_MARGIN = 0.08  # metres: SkillSpec.margin's default (see there)


def generation_params(generation: GenerationSpec) -> GenerationParams:
    """`spec.generation`'s knobs of one attempt (the planning fields stay with the pipeline)."""
    fields = GenerationParams.__dataclass_fields__
    return GenerationParams(**{name: getattr(generation, name) for name in fields})


def mimicgen_params(spec: SceneSpec) -> MimicGenParams:
    """Everything `demofactory.generators.mimicgen.generate_attempt` needs of the spec."""
    return MimicGenParams(
        objects=tuple(spec.objects),
        subtasks=tuple(
            SubtaskParams(
                sub.object,
                sub.ends_when,
                tuple(sub.end_offset),
                skill_margin=sub.skill.margin if sub.skill else SKILL_MARGIN,
            )
            for sub in spec.subtasks
        ),
        horizon=spec.task.horizon,
        generation=generation_params(spec.generation),
        placement=placement_params(spec.placement),
        symmetry=dict(spec.symmetry),
    )


def bimanual_params(spec: SceneSpec) -> BimanualParams:
    """Everything `demofactory.generators.bimanual.generate_bimanual_attempt` needs of a
    two-arm spec (task.two_arm): per subtask its arm and coordination, `after` as an index."""
    named = {sub.name: i for i, sub in enumerate(spec.subtasks) if sub.name is not None}
    return BimanualParams(
        arms=arm_names(spec.task),
        objects=tuple(spec.objects),
        subtasks=tuple(
            ArmSubtaskParams(
                arm=subtask_arm(spec.task, sub),
                object=sub.object,
                ends_when=None if sub.ends_when == "success" else sub.ends_when,
                end_offset=tuple(sub.end_offset),
                coordination=sub.coordination,
                after=named.get(sub.after) if sub.after is not None else None,
            )
            for sub in spec.subtasks
        ),
        horizon=spec.task.horizon,
        generation=generation_params(spec.generation),
        placement=placement_params(spec.placement),
    )


def appearance_params(spec: SceneSpec) -> AppearanceParams:
    """`spec.appearance`, with what the randomizer needs to find surfaces and cameras."""
    app: AppearanceSpec = spec.appearance
    textures = None
    if app.textures is not None:
        bank = app.textures.bank
        textures = TextureParams(
            surfaces=tuple(app.textures.surfaces),
            patterns=tuple(app.textures.patterns),
            bank_share=bank.share if bank is not None else 0.0,
        )
    lights = None
    if app.lights is not None:
        lights = LightParams(
            position=app.lights.position,
            direction=app.lights.direction,
            intensity=tuple(app.lights.intensity),
            color=app.lights.color,
        )
    camera = None
    if app.camera is not None:
        camera = CameraJitterParams(app.camera.position, app.camera.orientation)
    return AppearanceParams(
        where=str(spec.path),
        env=spec.task.env,
        objects=dict(spec.objects),
        cameras=tuple(cam.name for cam in spec.cameras),
        textures=textures,
        lights=lights,
        camera=camera,
    )


def texture_bank_params(bank: TextureBankSpec) -> TextureBankParams:
    """`appearance.textures.bank` as `demofactory.generators.texture_bank` takes it."""
    fields = TextureBankParams.__dataclass_fields__
    values = {name: getattr(bank, name) for name in fields}
    return TextureBankParams(**{**values, "prompts": tuple(bank.prompts)})
