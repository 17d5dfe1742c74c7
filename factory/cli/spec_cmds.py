"""`factory validate` and `factory spec-help`: a spec checked, and what its fields mean."""

from __future__ import annotations

from pathlib import Path

from demofactory.cli.common import _control, _load


def cmd_validate(args) -> int:
    from demofactory.outputs import Output, check_outputs, spec_files

    check_outputs(
        "validate",
        [Output("--still", args.still, "dir")],
        inputs=spec_files(args.spec),
        force=args.force,
    )
    resolved = _load(args.spec)
    spec = resolved.spec
    ends = ", ".join(f"{d.demo.name}: {list(d.subtask_ends)}" for d in resolved.demos)
    cams = ", ".join(f"{c.name} {c.width}x{c.height}" for c in spec.cameras) or "none"
    # A mixed-robot spec names its robots, and each robot's control path on a line of its own.
    robots = "+".join(resolved.robots) if resolved.robots else spec.task.robot
    if spec.task.two_arm is not None:  # a pair: robosuite's robot 0 (right) and 1 (left)
        robots = f"{spec.task.robot}+{spec.task.robot}, {spec.task.two_arm.configuration}"
    control = "per robot, below" if resolved.robots else _control(resolved.scene.fast_control_note)
    print(
        f"ok: {args.spec}: {spec.name} ({spec.task.env}, {robots}), "
        f"{len(resolved.demos)} seed demos, "
        f"{len(spec.subtasks)} subtasks (ends per demo: {ends}), cameras: {cams}, "
        f"control: {control}"
    )
    for robot, other in resolved.robots.items():  # a mixed-robot spec: each robot's env
        print(f"  {robot}: control: {_control(other.scene.fast_control_note)}")
    if args.still is not None:  # only once everything validated: a bad spec writes nothing
        from demofactory.simulation.stills import write_stills

        for path in write_stills(resolved.scene, args.still):
            print(f"still: {path}")
    return 0


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
