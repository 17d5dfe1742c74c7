"""The seed-demo verbs: `factory annotate`, `factory script`, `factory collect`."""

from __future__ import annotations

import json
import sys

from demofactory.cli.common import _load
from demofactory.errors import SpecError, UserError
from demofactory.specs.overrides import spec_overrides


def cmd_collect(args) -> int:
    from demofactory.seeds.collect import collect, make_device
    from demofactory.seeds.script import check_output
    from demofactory.specs.spec import load_spec

    overrides = spec_overrides(args)
    check_output(args.out, args.force, command="collect", spec_path=args.spec)
    spec = load_spec(args.spec, overrides)
    lengths = collect(
        spec,
        args.out,
        args.demos,
        lambda env: make_device(args.device, env),
        log=lambda line: print(line, file=sys.stderr, flush=True),
        force=args.force,
    )
    print(json.dumps({"out": str(args.out), "demos": len(lengths), "lengths": lengths}))
    return 0


def cmd_annotate(args) -> int:
    from demofactory.seeds.annotation_report import format_rows, plot_timeline, segment_rows
    from demofactory.seeds.suggest_spec import DEMO_SUFFIXES

    times = _replay_count(args.replay) if args.replay is not None else None
    overrides = spec_overrides(args)
    if args.suggest and overrides:
        raise UserError(
            f"{overrides.option(next(iter(overrides)))}: --suggest reads the seed demos alone, "
            "not a spec's fields; expected no --set with --suggest"
        )
    if args.plot is not None and (args.suggest or times is not None):
        raise UserError("--plot: draws the annotation's timeline; not with --suggest or --replay")
    if args.plot is not None:
        from demofactory.outputs import Output, check_outputs, spec_files

        check_outputs(
            "annotate",
            [Output("--plot", args.plot, "dir")],
            inputs=spec_files(args.spec),
            force=args.force,
        )
    if args.suggest:
        return _annotate_suggest(args)
    if args.spec.suffix.lower() in DEMO_SUFFIXES:
        raise UserError(
            f"{args.spec}: a seed demo file, not a spec; only --suggest reads one "
            f"(factory annotate --suggest {args.spec})"
        )
    if times is not None:
        from demofactory.specs.spec import load_spec

        if load_spec(args.spec, overrides).task.two_arm is not None:
            raise UserError(f"{args.spec}: --replay: not yet for a two-arm spec (task.two_arm)")
        return _annotate_replay(args, times, overrides)
    resolved = _load(args.spec, overrides)
    spec = resolved.spec
    if spec.task.two_arm is not None:
        return _annotate_two_arm(args, resolved)
    report, plots = [], []
    for demo in resolved.demos:
        entry = {
            "demo": demo.demo.label,
            "length": demo.demo.length,
            "segments": segment_rows(spec, demo),
        }
        if args.plot is not None:
            name = f"{demo.demo.source.stem}_{demo.demo.name}.png"
            try:
                entry["plot"] = str(plot_timeline(spec, demo, args.plot / name))
            except OSError as err:
                raise UserError(
                    f"--plot {args.plot}: {err.strerror or err}; expected a directory the "
                    "timelines can be written into"
                ) from None
            plots.append(entry["plot"])
        report.append(entry)
    if args.json:
        print(json.dumps({"spec": str(args.spec), "demos": report}))
        return 0
    for entry in report:
        print(format_rows(entry["demo"], entry["length"], entry["segments"]))
    for plot in plots:
        print(f"timeline: {plot}")
    return 0


def _annotate_two_arm(args, resolved) -> int:
    """Both arms' timelines per demo (demofactory.seeds.annotate_bimanual)."""
    from demofactory.seeds.annotate_bimanual import arm_timelines, format_timelines

    if args.plot is not None:
        raise UserError(f"{args.spec}: --plot: not yet for a two-arm spec (task.two_arm)")
    report = [
        {
            "demo": demo.demo.label,
            "length": demo.demo.length,
            "arms": arm_timelines(resolved.spec, demo),
        }
        for demo in resolved.demos
    ]
    if args.json:
        print(json.dumps({"spec": str(args.spec), "demos": report}))
        return 0
    for entry in report:
        print(format_timelines(entry["demo"], entry["length"], entry["arms"]))
    return 0


def _replay_count(text: str) -> int:
    try:
        times = int(text)
    except ValueError:
        times = None
    if times is None or not 1 <= times <= MAX_REPLAYS:
        raise UserError(
            f"--replay: expected a number of replays per demo from 1 to {MAX_REPLAYS}, got {text!r}"
        )
    return times


MAX_REPLAYS = 1000  # a self-check, not a dataset: `factory run` makes many


def _annotate_suggest(args) -> int:
    """`annotate --suggest`: the fragment on stdout (its problems also on stderr); exit 1 when
    the spec with it pasted in does not annotate as suggested."""
    from demofactory.seeds.suggest_spec import fragment_text, suggest

    found = suggest(args.spec)
    text = fragment_text(found, f"factory annotate --suggest {args.spec}")
    if args.json:
        report = {
            "source": str(args.spec),
            "demos": found.demos,
            "objects": found.objects,
            "subtasks": found.spec_data()["subtasks"],
            "placement": found.placement,
            "orders": found.orders,
            "notes": found.left_out,
            "problems": found.problems,
            "fragment": text,
        }
        print(json.dumps(report))
    else:
        print(text, end="")
    for problem in found.problems:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if found.problems else 0


def _annotate_replay(args, times: int, overrides: dict) -> int:
    """`annotate --replay N`: per demo and segment, N replays at its own start; exit 1 when a
    demo is FLAGGED (the check ran and found a bad seed: not bad input, which is 2)."""
    from demofactory.seeds.replay_check import format_replays, replay_demos
    from tqdm import tqdm

    resolved = _load(args.spec, overrides)
    if not resolved.demos:
        raise SpecError(args.spec, "seed_demos", "no seed demos to replay")
    total = len(resolved.demos) * times
    with tqdm(
        total=total,
        desc="replaying",
        unit="attempt",
        file=sys.stderr,
        disable=args.no_progress,
        leave=False,
        dynamic_ncols=True,
    ) as bar:

        def tick(label: str, success: bool) -> None:
            bar.set_postfix_str(label, refresh=False)
            bar.update(1)

        replays = replay_demos(resolved, times, on_attempt=tick)
    if args.json:
        demos = [r.to_json() for r in replays]
        print(json.dumps({"spec": str(args.spec), "replays": times, "demos": demos}))
    else:
        print(format_replays(replays, times))
    return 1 if any(r.flagged for r in replays) else 0


def cmd_script(args) -> int:
    from demofactory.seeds.script import check_output
    from demofactory.specs.spec import load_spec

    check_output(args.out, args.force, spec_path=args.spec)  # the output rule first: cheap

    overrides = spec_overrides(args)  # --set, and its aliases --seed, ...
    demos = overrides.pop("script.demos", None)  # applied once the spec is known to script
    spec = load_spec(args.spec, overrides)
    if spec.script is None:
        raise SpecError(
            args.spec,
            "script",
            "no script: section (waypoints to record seed demos from; "
            "see scene_specs/pick_place_can.yaml)",
        )
    if demos is not None:
        spec = load_spec(args.spec, {**overrides, "script.demos": demos})
    from demofactory.seeds.script import make_scene, model_xml, record_demos, save_demos

    scene = make_scene(spec)
    log = (
        (lambda line: None)
        if args.quiet
        else (lambda line: print(line, file=sys.stderr, flush=True))
    )
    demos = record_demos(scene, spec.script.demos, log)
    save_demos(args.out, spec, model_xml(scene), demos)
    print(
        json.dumps(
            {
                "out": str(args.out),
                "demos": len(demos),
                "tries": sum(d.tries for d in demos),
                "lengths": [d.length for d in demos],
            }
        )
    )
    return 0
