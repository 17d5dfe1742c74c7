"""Second validation step: the spec against the environment (files, simulator, cameras).

`load_spec` checked the YAML as pure data; this builds the env the spec names
and checks everything that needs it, with messages that name the field to fix.
"""

from __future__ import annotations

from dataclasses import dataclass

from factory.errors import SpecError
from factory.pipeline import prepare_demos
from factory.records import AnnotatedDemo
from factory.sim import Scene
from factory.spec import SceneSpec


@dataclass
class Resolved:
    """A spec whose env builds, whose cameras exist and whose seed demos are annotated."""

    spec: SceneSpec
    scene: Scene
    demos: list[AnnotatedDemo]


def resolve_spec(spec: SceneSpec) -> Resolved:
    """Build the env, check cameras, load and annotate seed demos; raise SpecError/UserError."""
    _check_names(spec)
    for i, rel in enumerate(spec.seed_demos):
        if not spec.resolve_path(rel).is_file():
            raise SpecError(spec.path, f"seed_demos[{i}]", f"file not found: {spec.resolve_path(rel)}")
    try:
        scene = Scene(spec)
    except SpecError:
        raise
    except Exception as err:  # robosuite raises bare exceptions for unusable combinations
        raise SpecError(spec.path, "task", f"robosuite cannot build {spec.task.env} with {spec.task.robot}: {err}") from None
    cameras = scene.camera_names()
    for i, cam in enumerate(spec.cameras):
        if cam.name not in cameras:
            raise SpecError(
                spec.path, f"cameras[{i}].name",
                f"unknown camera {cam.name!r} in the {spec.task.env} model (expected one of: {', '.join(cameras)})",
            )
    return Resolved(spec=spec, scene=scene, demos=prepare_demos(spec, scene))


def _check_names(spec: SceneSpec) -> None:
    import robosuite

    envs = sorted(robosuite.ALL_ENVIRONMENTS)
    if spec.task.env not in envs:
        raise SpecError(spec.path, "task.env", f"unknown robosuite env {spec.task.env!r} (expected one of: {', '.join(envs)})")
    robots = sorted(robosuite.ALL_ROBOTS)
    if spec.task.robot not in robots:
        raise SpecError(spec.path, "task.robot", f"unknown robot {spec.task.robot!r} (expected one of: {', '.join(robots)})")
