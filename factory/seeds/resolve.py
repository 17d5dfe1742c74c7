"""Second validation step: the spec against the environment (files, simulator, cameras).

`load_spec` checked the YAML as pure data; this builds the env the spec names
and checks everything that needs it, with messages that name the field to fix.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
from demofactory.errors import SpecError, UserError
from demofactory.generators.mimicgen import sample_placement
from demofactory.generators.params import MimicGenParams
from demofactory.generators.records import AnnotatedDemo
from demofactory.robots.embodiments import robot_spec
from demofactory.robots.support import check_robot
from demofactory.seeds.cross_robot import annotate_seed
from demofactory.seeds.demos import load_seed_demos
from demofactory.simulation.scene import ACTION_LAYOUT, Placement, Scene
from demofactory.specs.adapters import mimicgen_params, placement_params
from demofactory.specs.spec import SceneSpec


def prepare_demos(spec: SceneSpec, scene: Scene) -> list[AnnotatedDemo]:
    """Load every seed demo of the spec and annotate it in `scene` (raises UserError)."""
    demos, others = [], {}  # others: a scene per other robot that recorded demos
    for i, rel in enumerate(spec.seed_demos):
        path = spec.resolve_path(rel)
        if not path.is_file():
            raise SpecError(spec.path, f"seed_demos[{i}]", f"file not found: {path}")
        loaded = load_seed_demos(path)
        width = sum(n for _, n in ACTION_LAYOUT)
        for demo in loaded:
            # generation replays them as the arm's delta-pose actions
            if demo.actions.shape[1] != width:
                layout = ", ".join(f"{k} {n}" for k, n in ACTION_LAYOUT)
                raise UserError(
                    f"{path}: data/{demo.name}: actions are {demo.actions.shape[1]} wide, expected "
                    f"{width} ({layout}) for {spec.task.controller}"
                )
        demos.extend(annotate_seed(scene, demo, others) for demo in loaded)
    return [replace(d, robot=spec.task.robot) for d in demos]


@dataclass
class Resolved:
    """A spec whose env builds, whose cameras exist and whose seed demos are annotated."""

    spec: SceneSpec
    scene: Scene
    demos: list[AnnotatedDemo]
    # A mixed-robot spec (task.robots): each robot's own; scene and demos above are task.robot's
    robots: dict[str, Resolved] = field(default_factory=dict)

    @property
    def worker_demos(self) -> list[AnnotatedDemo]:
        """What the shard workers get: every robot's annotated demos (`AnnotatedDemo.robot`)."""
        if not self.robots:
            return self.demos
        return [d for resolved in self.robots.values() for d in resolved.demos]

    @property
    def params(self) -> MimicGenParams:
        """The spec as `demofactory.generators.mimicgen.generate_attempt` takes it."""
        return mimicgen_params(self.spec)


def resolve_spec(spec: SceneSpec) -> Resolved:
    """Build the env, check cameras, load and annotate seed demos; raise SpecError/UserError."""
    if spec.task.robots:  # a mixed-robot dataset: each robot's env and demos
        return _resolve_robots(spec)
    _check_names(spec)
    if spec.task.two_arm is not None:
        return _resolve_two_arm(spec)
    for i, rel in enumerate(spec.seed_demos):
        if not spec.resolve_path(rel).is_file():
            raise SpecError(
                spec.path, f"seed_demos[{i}]", f"file not found: {spec.resolve_path(rel)}"
            )
    try:
        scene = Scene(spec)
    except SpecError:
        raise
    except Exception as err:  # robosuite raises bare exceptions for unusable combinations
        # MuJoCo names the element it refused: one of a scene's objects (<name>_...) is named.
        objects = spec.scene.objects if spec.scene is not None else {}
        field = next((f"scene.objects.{n}" for n in objects if f"'{n}_" in str(err)), "task")
        raise SpecError(
            spec.path,
            field,
            f"robosuite cannot build {spec.task.env} with {spec.task.robot}: {err}",
        ) from None
    check_cameras(spec, scene)
    demos = prepare_demos(spec, scene)
    if demos:
        check_placement(
            spec, scene, {name: poses[0][:2, 3] for name, poses in demos[0].object_poses.items()}
        )
    if spec.generation.transit == "plan":
        check_planning_goals(spec, scene, demos)
    return Resolved(spec=spec, scene=scene, demos=demos)


def check_cameras(spec: SceneSpec, scene) -> None:
    """Each `cameras[i].name` is a camera of the built model (one or two arms)."""
    cameras = scene.camera_names()
    for i, cam in enumerate(spec.cameras):
        if cam.name not in cameras:
            raise SpecError(
                spec.path,
                f"cameras[{i}].name",
                f"unknown camera {cam.name!r} in the {spec.task.env} model "
                f"(expected one of: {', '.join(cameras)})",
            )


def _resolve_two_arm(spec: SceneSpec) -> Resolved:
    """A two-arm spec: its `TwoArmScene`, cameras, seed demos annotated per arm
    (`demofactory.seeds.annotate_bimanual`); `Resolved.demos` holds `BimanualDemo`s."""
    from demofactory.seeds.annotate_bimanual import annotate_two_arm_demos, load_two_arm_demos
    from demofactory.seeds.script import make_scene

    seeds = load_two_arm_demos(spec)  # a one-arm demo is refused before the env is built
    scene = make_scene(spec)
    check_cameras(spec, scene)
    demos = annotate_two_arm_demos(scene, seeds)
    if demos:
        check_placement(
            spec, scene, {name: poses[0][:2, 3] for name, poses in demos[0].object_poses.items()}
        )
    return Resolved(spec=spec, scene=scene, demos=demos)


def check_planning_goals(spec: SceneSpec, scene: Scene, demos: list[AnnotatedDemo]) -> None:
    """For transit: plan, every skill window must start where the arm can reach: a planned
    transit's goal is that pose, re-targeted. A window the spec gives by hand (or a demo of
    another robot) can start out of reach; then every attempt would fall back, so it is
    refused here, naming the subtask and the demo."""
    for demo in demos:
        scene.reset_to(demo.start_state, Placement({}), fixtures=demo.fixture_poses)
        for position, index in enumerate(demo.order):
            start, _ = demo.skill(position)
            if not scene.reachable(demo.eef_poses[start]):
                field = f"subtasks[{index}].skill" if spec.subtasks[index].skill else "generation"
                raise SpecError(
                    spec.path,
                    field + (".window" if field.endswith("skill") else ".transit"),
                    f"the skill window of subtask {index} in {demo.demo.label} starts at step "
                    f"{start}, where the hand's pose is out of the {spec.task.robot}'s reach: "
                    "no planned transit can end there (expected a window the arm reaches: "
                    "another skill.window or skill.margin, or transit: direct)",
                )


def check_placement(spec: SceneSpec, scene: Scene, start_xy: dict[str, np.ndarray]) -> None:
    """Refuse placements under which every attempt must fail: objects moved off the table, or a
    `min_separation` no draw within the ranges can meet (a SpecError naming the field)."""
    table = _table_rect(scene)
    for name, ranges in spec.placement.objects.items():
        if table is None or name not in start_xy:
            break
        for axis, (lo, hi), start, (low_edge, high_edge) in zip(
            "xy", (ranges.x, ranges.y), start_xy[name], table, strict=True
        ):
            if start + lo < low_edge or start + hi > high_edge:
                raise SpecError(
                    spec.path,
                    f"placement.objects.{name}.{axis}",
                    f"[{lo}, {hi}] moves {name} off the table ({axis} from {start + lo:.2f} to "
                    f"{start + hi:.2f} m, the table spans {low_edge:.2f} to {high_edge:.2f} m); "
                    "expected offsets within "
                    f"[{low_edge - start:.2f}, {high_edge - start:.2f}]",
                )
    separation = spec.placement.min_separation
    if separation > 0 and set(spec.placement.objects) <= set(start_xy):
        try:  # the sampler generation uses, with many more draws than an attempt gets
            draws = placement_params(spec.placement)
            sample_placement(draws, start_xy, np.random.default_rng(0), max_tries=2000)
        except RuntimeError:
            raise SpecError(
                spec.path,
                "placement.min_separation",
                f"{separation} m cannot be met: no placement within placement.objects' ranges "
                "keeps every pair of objects that far apart (2000 draws); expected a smaller "
                "distance or wider ranges",
            ) from None


def _table_rect(scene: Scene) -> tuple[tuple[float, float], tuple[float, float]] | None:
    # robosuite's table-top tasks (Lift, Stack, ...) say where their table is; other arenas do not.
    size, offset = (
        getattr(scene.env, "table_full_size", None),
        getattr(scene.env, "table_offset", None),
    )
    if size is None or offset is None:
        return None
    return tuple((float(offset[i]) - size[i] / 2, float(offset[i]) + size[i] / 2) for i in range(2))


def _resolve_robots(spec: SceneSpec) -> Resolved:
    for i, entry in enumerate(spec.task.robots):
        check_robot(spec.path, entry.robot, field=f"task.robots[{i}].robot")
    robots = {r.robot: resolve_spec(robot_spec(spec, r.robot)) for r in spec.task.robots}
    first = robots[spec.task.robot]
    return Resolved(spec=spec, scene=first.scene, demos=first.demos, robots=robots)


def _check_names(spec: SceneSpec) -> None:
    import robosuite

    envs = sorted(robosuite.ALL_ENVIRONMENTS)
    if spec.scene is None and spec.task.env not in envs:  # a scene: section builds its own
        raise SpecError(
            spec.path,
            "task.env",
            f"unknown robosuite env {spec.task.env!r} (expected one of: {', '.join(envs)})",
        )
    two = spec.task.two_arm
    check_robot(
        spec.path,
        spec.task.robot,
        arms=2 if two is not None and two.configuration == "single-robot" else 1,
    )
