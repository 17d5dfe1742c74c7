"""`factory validate` and `factory spec-help`: a spec checked, and what its fields mean."""

from __future__ import annotations

from pathlib import Path

from demofactory.cli.common import _control, _load
from demofactory.specs.overrides import spec_overrides


def cmd_validate(args) -> int:
    from demofactory.outputs import Output, check_outputs, spec_files

    overrides = spec_overrides(args)
    check_outputs(
        "validate",
        [Output("--still", args.still, "dir")],
        inputs=spec_files(args.spec),
        force=args.force,
    )
    spec = _load_spec_only(args.spec, overrides)
    if spec.generation.backend == "mjwarp":  # before the env is built: the extra first
        from demofactory.simulation import mjwarp

        mjwarp.require_mjwarp(str(args.spec))
    resolved = _load(args.spec, overrides)
    spec = resolved.spec
    backend = _backend(resolved, args.spec)
    ends = ", ".join(f"{d.demo.name}: {list(d.subtask_ends)}" for d in resolved.demos)
    cams = ", ".join(f"{c.name} {c.width}x{c.height}" for c in spec.cameras) or "none"
    # A mixed-robot spec names its robots, and each robot's control path on a line of its own.
    robots = "+".join(resolved.robots) if resolved.robots else spec.task.robot
    two = spec.task.two_arm
    if two is not None:  # a pair: robosuite's robot 0 (right) and 1 (left); or one two-armed
        pair = two.configuration != "single-robot"
        robots = f"{'+'.join([spec.task.robot] * (2 if pair else 1))}, {two.configuration}"
    control = (
        "per robot, below"
        if resolved.robots
        else _control(
            resolved.scene.fast_control_note,
            spec.task.two_arm is not None,
            spec.task.two_arm is None
            or all(resolved.scene.has_gripper_of(arm) for arm in resolved.scene.arms),
            one_robot=len(resolved.scene.env.robots) == 1,
        )
    )
    print(
        f"ok: {args.spec}: {spec.name} ({spec.task.env}, {robots}), "
        f"{len(resolved.demos)} seed demos, "
        f"{len(spec.subtasks)} subtasks (ends per demo: {ends}), cameras: {cams}, "
        f"control: {control}, backend: {backend}"
    )
    for robot, other in resolved.robots.items():  # a mixed-robot spec: each robot's env
        print(f"  {robot}: control: {_control(other.scene.fast_control_note)}")
    if args.still is not None:  # only once everything validated: a bad spec writes nothing
        from demofactory.simulation.stills import write_stills

        for path in write_stills(resolved.scene, args.still):
            print(f"still: {path}")
    return 0


def _load_spec_only(path: Path, overrides: dict | None):
    from demofactory.specs.spec import load_spec

    return load_spec(path, overrides)


def _backend(resolved, where: Path) -> str:
    """The backend's line in validate's report; mjwarp: every robot's model checked against
    MuJoCo Warp's own put_model (SpecError naming what it refuses, and the fallback)."""
    spec = resolved.spec
    if spec.generation.backend == "cpu":
        return "cpu"
    from demofactory.errors import SpecError
    from demofactory.simulation import mjwarp

    for scene in [resolved.scene, *(r.scene for r in resolved.robots.values())]:
        if not scene.fast_control:  # the batched loop is FastStepper's, for all worlds
            raise SpecError(
                where,
                "generation.backend",
                "mjwarp runs the factory's own OSC loop, which this robot does not take "
                f"({scene.fast_control_note}); set generation.backend: cpu",
            )
        mjwarp.check_model(scene.model, str(where))
    found = mjwarp.versions()
    return (
        f"mjwarp (MuJoCo Warp {found['mujoco_warp']}, warp {found['warp']}: the model is "
        "supported; factory run needs the batched loop, not landed yet)"
    )


def cmd_spec_help(args) -> int:
    from demofactory.specs import docs as spec_docs

    if args.write:
        for path in spec_docs.write_docs(Path.cwd()):
            print(f"wrote {path}")
    elif args.json_schema:
        print(spec_docs.schema_text(), end="")
    else:
        print(spec_docs.spec_help(args.field))
    return 0
