"""The `factory` command.

    factory validate scene_specs/stack.yaml
    factory validate scene_specs/cube_bowl.yaml --still out/stills   # + one PNG per camera
    factory spec-help [generation.transit]   # what a field means; --write: schema, reference
    factory annotate scene_specs/stack.yaml [--plot out/annotate]
    factory annotate --suggest scene_specs/demos/lift_panda_1demo_robosuite100.hdf5  # a spec
    factory annotate scene_specs/lift.yaml --replay 2   # each demo regenerates itself?
    factory run scene_specs/stack.yaml --attempts 20 --out out/stack --workers 2
    factory inspect out/stack [--json]
    factory divergence out/stack [--spec SPEC] [--draws 4] [--ranges r.yaml]   # default: its spec
    factory preview out/stack          # contact sheet PNG + one mp4 per camera
    factory preview out/stack --failures   # the failed attempts kept, captioned: where they failed
    factory verify out/stack           # checksums, sample counts, episodes, stats
    factory export out/stack --to lerobot out/stack-lerobot
    factory export out/stack --to robomimic out/stack.hdf5
    factory export out/stack --to gr00t out/stack-gr00t [--embodiment new_embodiment]
    factory seeds scene_specs/lift_lowdim.yaml --out out/lift-seeds   # the seed demos as a dataset
    factory train-eval out/lift_lowdim --spec scene_specs/lift_lowdim.yaml   # BC policy, rollouts
    factory script scene_specs/pick_place_can.yaml --out demo.hdf5 [--demos 3]   # from waypoints
    factory collect scene_specs/cube_bowl.yaml --out demo.hdf5 [--demos 5]   # teleoperation
    factory calibrate scene_specs/lift.yaml --recordings real.hdf5 --params mass.cube kp delay \
        --out lift.calibrated.yaml          # fitted physics: fragment (+ .html report)

Bad input (a spec, a seed file, an output directory) prints one line naming
the file, the field and what was expected, and exits with code 2.

Why one module: one small `cmd_*` entry per verb (each delegates to its module) and the
one parser; most of the length is argparse help text, kept beside the flags it documents.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import typing
from pathlib import Path

from demofactory.errors import USER_FACING_ERRORS, SpecError, UserError
from demofactory.specs.overrides import ALIASES, add_set_argument, spec_overrides


def _int_at_least(lowest: int):
    """An argparse type: an integer >= `lowest`, with a message naming what was expected."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected an integer >= {lowest}, got {text!r}"
            ) from None
        if value < lowest:
            raise argparse.ArgumentTypeError(f"expected an integer >= {lowest}, got {value}")
        return value

    return parse


_positive_int, _non_negative_int = _int_at_least(1), _int_at_least(0)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="factory", description="Synthetic demonstration data factory."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "validate",
        help="check a scene spec (YAML, seed demos, env, cameras)",
        description="Check a scene spec: its YAML and fields, then its seed demos, env and "
        "cameras. Every field is described by `factory spec-help [FIELD]`.",
    )
    p.add_argument("spec", type=Path)
    p.add_argument(
        "--still",
        type=_location,
        metavar="DIR",
        help="also render one PNG per camera into DIR (a new or empty folder)",
    )
    p.add_argument("--force", action="store_true", help="--still: write into a non-empty DIR")

    p = sub.add_parser(
        "spec-help",
        help="describe the spec's fields (type, default, meaning); write its JSON Schema",
        description="Describe the scene spec's fields, from the descriptions in its models.",
    )
    p.add_argument(
        "field",
        nargs="?",
        help="a section or dotted field, e.g. generation or generation.transit; none: all",
    )
    p.add_argument("--json-schema", action="store_true", help="print the spec's JSON Schema")
    p.add_argument(
        "--write",
        action="store_true",
        help="write scene_specs/schema.json and docs/spec_reference.md's tables "
        "(run in the repo root)",
    )

    p = sub.add_parser(
        "annotate",
        help="show where each subtask starts and ends in each seed demo, and why; "
        "--suggest: propose the subtasks; --replay N: check each demo regenerates itself",
        description="Where each subtask starts and ends in each seed demo, and why. --suggest "
        "proposes objects:, subtasks: and placement: from the demos alone; --replay N "
        "generates from each demo at its own start N times. Exit codes: 0 ok; 1 --suggest's "
        "fragment failed its own check, or --replay FLAGGED a demo; 2 bad input.",
    )
    p.add_argument(
        "spec",
        type=Path,
        metavar="SPEC",
        help="a scene spec; with --suggest also a seed demo file (.hdf5), whose "
        "data.attrs['env'] names the task",
    )
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument(
        "--plot",
        type=_location,
        metavar="DIR",
        help="also write a PNG timeline of the predicates per demo into DIR (new or empty)",
    )
    p.add_argument("--force", action="store_true", help="--plot: write into a non-empty DIR")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--suggest",
        action="store_true",
        help="propose objects:, subtasks: and placement: from the demos alone (gripper, "
        "contacts, joints, where things come to rest), as commented YAML to paste into the "
        "spec; checked by annotating the spec with it pasted in (exit 1 if that fails)",
    )
    mode.add_argument(
        "--replay",
        metavar="N",
        help="generate from each demo at its own start (no placement offsets) N times and "
        "report per segment how many reached and completed it; a demo succeeding in fewer "
        "than half is FLAGGED, naming its worst segment (exit 1)",
    )
    p.add_argument("--no-progress", action="store_true", help="--replay: no progress bar")

    p = sub.add_parser("run", help="generate, render and write a dataset on Ray")
    p.add_argument("spec", type=Path)
    p.add_argument(
        "--out",
        type=_location,
        help="dataset directory, or an object store's URL (s3://bucket/prefix, any fsspec URL); "
        "default: the spec's output.dir, or out/<name>",
    )
    p.add_argument(
        "--attempts", type=_positive_int, help="generation attempts (overrides generation.attempts)"
    )
    p.add_argument(
        "--successes",
        type=_positive_int,
        help="stop once this many attempts succeeded, each giving K episodes, "
        "K = appearance.variants_per_trajectory (overrides generation.target_successes)",
    )
    p.add_argument(
        "--workers",
        type=_positive_int,
        default=None,
        help="Ray actors (default: one per CPU of the cluster)",
    )
    p.add_argument(
        "--address",
        default=None,
        help="an existing Ray cluster (default: $RAY_ADDRESS, else a local one)",
    )
    p.add_argument("--seed", type=_non_negative_int, help="overrides the spec's seed")
    p.add_argument(
        "--shard-layout",
        choices=("step", "episode"),
        help="one sample a step or an episode in the shards (overrides output.shard_layout)",
    )
    add_set_argument(p, ALIASES["run"])
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--truncate",
        action="store_true",
        help="allow the dataset in --out to shrink (fewer --attempts, a lower --successes) "
        "or to replace `factory seeds` output; without it such a run is refused",
    )

    p = sub.add_parser("preview", help="a contact-sheet PNG and one mp4 per camera of a dataset")
    p.add_argument("dataset", type=_location)
    p.add_argument(
        "--out",
        type=_location,
        help="folder for the pictures: new or empty (default: DATASET/preview, refilled)",
    )
    p.add_argument("--force", action="store_true", help="write into a non-empty --out")
    p.add_argument("--episodes", type=_positive_int, default=6, help="rows of the contact sheet")
    p.add_argument(
        "--failures",
        action="store_true",
        help="instead: render the failed attempts the run kept, captioned with where each failed",
    )

    p = sub.add_parser(
        "export", help="write the dataset as LeRobot (v3.0), GR00T (LeRobot v2.1) or robomimic"
    )
    p.add_argument("dataset", type=_location)
    p.add_argument("--to", choices=("lerobot", "gr00t", "robomimic"), required=True)
    p.add_argument(
        "out",
        type=_location,
        help="a new folder (lerobot, gr00t) or a new .hdf5 file (robomimic)",
    )
    p.add_argument(
        "--force", action="store_true", help="replace an existing OUT (once the export is whole)"
    )
    p.add_argument(
        "--embodiment",
        metavar="TAG",
        default="new_embodiment",
        help="gr00t: the embodiment tag recorded in meta/info.json (default new_embodiment)",
    )
    p.add_argument(
        "--actions",
        action="append",
        metavar="SPACES",
        help="lerobot, gr00t: the action spaces written side by side in `action`, "
        "comma-separated or repeated: delta_eef (the shards' OSC deltas, the default), abs_eef, "
        "joint_pos; each relabeling is replayed and reported in meta/action_spaces.json "
        "(docs/action_spaces.md)",
    )

    p = sub.add_parser("verify", help="check shards against the manifest, episodes and stats")
    p.add_argument("dataset", type=_location)

    p = sub.add_parser("inspect", help="summarize a dataset")
    p.add_argument("dataset", type=_location)
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument(
        "--plot",
        type=_location,
        metavar="PNG",
        help="draw the ADR schedule (generation.adr: range fraction and probe success per round)",
    )
    p.add_argument("--force", action="store_true", help="overwrite --plot if it exists")
    p.add_argument(
        "--coverage",
        nargs="?",
        const="",
        type=str,
        metavar="PNG",
        help="placement coverage: attempts against kept episodes per placement cell, per object; "
        "plotted to PNG (default DATASET/coverage.png) (docs/coverage.md)",
    )
    p.add_argument(
        "--bins",
        type=_positive_int,
        help="--coverage: cells per placed axis (default: generation.rebalance.bins, else 4)",
    )

    p = sub.add_parser(
        "divergence",
        help="score each episode's actions replayed open loop under N other physics draws",
    )
    p.add_argument("dataset", type=_location)
    p.add_argument(
        "--spec",
        type=Path,
        help="the spec to take the env and physics from (default: the one the dataset records)",
    )
    p.add_argument("--draws", type=_positive_int, default=4, help="physics draws (default 4)")
    p.add_argument(
        "--ranges",
        type=Path,
        metavar="YAML",
        help="a physics: fragment to draw from (default: the spec's physics: section)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")

    p = sub.add_parser(
        "seeds", help="write a spec's human seed demos as a dataset (the baseline for train-eval)"
    )
    p.add_argument("spec", type=Path)
    p.add_argument(
        "--out",
        type=_location,
        required=True,
        help="dataset directory (new or empty, or a previous seeds output)",
    )

    p = sub.add_parser(
        "script", help="record seed demos from the spec's script: waypoints (robosuite hdf5)"
    )
    p.add_argument("spec", type=Path)
    p.add_argument(
        "--out",
        type=_location,
        required=True,
        help="a new .hdf5 file (robosuite's raw collection format)",
    )
    p.add_argument("--demos", type=_positive_int, help="demos to record (overrides script.demos)")
    p.add_argument("--seed", type=_non_negative_int, help="overrides the spec's seed")
    add_set_argument(p, ALIASES["script"])
    p.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    p.add_argument("--quiet", action="store_true", help="no line per try on stderr")

    p = sub.add_parser(
        "collect", help="record seed demos by teleoperation in robosuite's viewer (robosuite hdf5)"
    )
    p.add_argument("spec", type=Path)
    p.add_argument("--out", type=_location, required=True, help="a new .hdf5 file")
    p.add_argument("--demos", type=_positive_int, default=1, help="successful demos to record")
    p.add_argument("--device", choices=("keyboard", "spacemouse"), default="keyboard")
    p.add_argument("--force", action="store_true", help="overwrite --out if it exists")

    p = sub.add_parser(
        "calibrate",
        help="fit physics parameters to recorded trajectories (mujoco.sysid): a physics: fragment",
    )
    p.add_argument("spec", type=Path)
    p.add_argument(
        "--recordings",
        type=Path,
        nargs="+",
        required=True,
        help="robosuite hdf5 files (data/demo_N/states and actions) recorded on the real system",
    )
    p.add_argument(
        "--params",
        nargs="+",
        required=True,
        metavar="KIND[.TARGET][=LO,HI]",
        help="what to fit, e.g. mass.cube=0.5,2 friction.cube joint_damping.arm "
        "joint_armature.arm kp damping_ratio delay=0,3 (scales of the nominal values; "
        "delay in control steps; default bounds 0.5,2 and 0,3)",
    )
    p.add_argument(
        "--out", type=_location, required=True, help="the fragment: a new .yaml spec file"
    )
    p.add_argument("--report", type=_location, help="the HTML report (default: --out with .html)")
    p.add_argument(
        "--max-steps", type=_positive_int, help="use at most this many steps of each recording"
    )
    p.add_argument(
        "--max-iters", type=_positive_int, default=30, help="least-squares iterations at most"
    )
    p.add_argument("--force", action="store_true", help="overwrite --out and --report")
    p.add_argument("--quiet", action="store_true", help="no optimiser lines on stderr")

    p = sub.add_parser(
        "train-eval",
        help="train a behaviour-cloning policy on a dataset and report its rollout success",
    )
    p.add_argument("dataset", type=_location)
    p.add_argument(
        "--spec",
        type=Path,
        required=True,
        help="the scene spec whose env, placement and seeds the rollouts use",
    )
    p.add_argument("--out", type=_location, help="also write the JSON report to this file")
    p.add_argument(
        "--save-policy", type=_location, help="save the trained policy (torch state dict) here"
    )
    p.add_argument("--force", action="store_true", help="overwrite --out and --save-policy")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    _add_train_eval_flags(p)
    return parser


def _add_train_eval_flags(p: argparse.ArgumentParser) -> None:
    """One flag per TrainEvalConfig field; its description and default are the flag's help."""
    from demofactory.train.config import TrainEvalConfig

    for name, field in TrainEvalConfig.model_fields.items():
        flag, kind = f"--{name.replace('_', '-')}", field.annotation
        if kind is bool:
            p.add_argument(
                flag,
                action=argparse.BooleanOptionalAction,
                default=None,
                dest=f"cfg_{name}",
                help=f"{field.description} (default: {'on' if field.default else 'off'})",
            )
            continue
        choices = typing.get_args(kind) if typing.get_origin(kind) is typing.Literal else None
        parse = (
            float
            if kind in (float, float | None)
            else str
            if kind in (str, str | None) or choices
            else int
        )
        p.add_argument(
            flag,
            type=parse,
            default=None,
            choices=choices,
            dest=f"cfg_{name}",
            metavar=name.upper() if choices is None else None,
            help=f"{field.description} (default: {field.default})",
        )


def _load(path: Path, overrides: dict | None = None, out_dir: Path | None = None):
    """load_spec (pure), the output directory check (cheap), then resolve (builds the env)."""
    from demofactory.seeds.resolve import resolve_spec

    return resolve_spec(_check(path, overrides, out_dir))


def _check(
    path: Path, overrides: dict | None = None, out_dir: Path | None = None, truncate: bool = False
):
    """load_spec (pure), the output directory check and the texture model check (cheap)."""
    from demofactory.build.run import check_output_dir
    from demofactory.generators.texture_bank import check_texture_model
    from demofactory.specs.adapters import texture_bank_params
    from demofactory.specs.spec import load_spec

    spec = load_spec(path, overrides)
    target = (
        (out_dir or spec.output_dir()) if out_dir is not None or overrides is not None else None
    )
    if isinstance(target, str):  # a store's URL: checked on its local copy, once pulled (run)
        target = None
    if target is not None:
        check_output_dir(target, spec, truncate)
    bank = spec.appearance.textures.bank if spec.appearance.textures is not None else None
    # the model must be on disk unless the bank is already made (reads no weights)
    if bank is not None:
        check_texture_model(texture_bank_params(bank), target, spec_path=spec.path)
    return spec


def _location(text: str) -> Path | str:
    """A path argument: a local path, or a URL (s3://...) kept as one string, normalized
    (demofactory.shards.store.normalize_url): pathlib would fold its "//" (`s3:/bkt/x`). Whether a
    URL is
    accepted is the command's to say (demofactory.outputs, or the store), in one line."""
    from demofactory.shards.store import StoreError, is_remote, normalize_url

    if not is_remote(text):
        return Path(text)
    try:
        return normalize_url(text)
    except StoreError:  # refused in one line once the command looks at it (argparse would
        return text  # print its usage too)


def _reading(location: Path | str, *, shards: bool = True, fresh: bool = False, partial=False):
    """A reader's private snapshot of the dataset at `location`, a folder or a store's URL
    (demofactory.shards.snapshot: never the files a writer is changing, nor a driver's local copy; a
    run
    writing it is one line). `shards=False`: its top-level files only; `fresh`: a stored
    dataset's shards downloaded again (what the store holds now); `partial`: a run's committed
    shards read as far as its journal goes (`inspect`). Messages name `location`, not the
    snapshot (`_main`)."""
    from demofactory.shards.snapshot import reading

    if isinstance(location, Path) and not location.exists():
        raise UserError(f"{location}: no such dataset directory")
    return reading(location, shards=shards, fresh=fresh, partial=partial)


# A stored dataset's local copy -> its URL: messages name the dataset the user gave, not the
# cache folder a reader happened to look into (see `user_message`).
_LOCAL_COPIES: dict[str, str] = {}


def _control(note: str) -> str:
    """How steps are taken: demofactory.simulation.fast_step, or robosuite's env.step and why."""
    return f"robosuite env.step ({note})" if note else "fast (demofactory.simulation.fast_step)"


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


def cmd_collect(args) -> int:
    from demofactory.seeds.collect import collect, make_device
    from demofactory.seeds.script import check_output
    from demofactory.specs.spec import load_spec

    check_output(args.out, args.force, command="collect", spec_path=args.spec)
    spec = load_spec(args.spec)
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


def cmd_calibrate(args) -> int:
    import math

    from demofactory.outputs import Output, check_outputs, spec_files
    from demofactory.robustness.calibrate_run import run_calibration

    out = Output("--out", args.out)
    check_outputs("calibrate", [out], force=args.force)  # a URL refused before .with_suffix
    report = args.report or args.out.with_suffix(".html")
    check_outputs(
        "calibrate",
        [out, Output("--report", report)],
        inputs=[*spec_files(args.spec), *args.recordings],
        force=args.force,
    )
    result = run_calibration(
        args.spec,
        args.recordings,
        args.params,
        args.out,
        report,
        command=f"factory calibrate {args.spec} --recordings "
        + " ".join(map(str, args.recordings))
        + f" --params {' '.join(args.params)} --out {args.out}",
        max_steps=args.max_steps,
        max_iters=args.max_iters,
        log=None if args.quiet else sys.stderr,
    )
    half = {k: v if math.isfinite(v) else None for k, v in result.half_widths.items()}  # JSON
    summary = {
        name: {"value": value, "ci95_half_width": half[name]}
        for name, value in result.values().items()
    }
    print(json.dumps({"out": str(args.out), "report": str(report), "fitted": summary}))
    return 0


def cmd_annotate(args) -> int:
    from demofactory.seeds.annotation_report import format_rows, plot_timeline, segment_rows
    from demofactory.seeds.suggest_spec import DEMO_SUFFIXES

    times = _replay_count(args.replay) if args.replay is not None else None
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
        return _annotate_replay(args, times)
    resolved = _load(args.spec)
    spec = resolved.spec
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


def _annotate_replay(args, times: int) -> int:
    """`annotate --replay N`: per demo and segment, N replays at its own start; exit 1 when a
    demo is FLAGGED (the check ran and found a bad seed: not bad input, which is 2)."""
    from demofactory.seeds.replay_check import format_replays, replay_demos
    from tqdm import tqdm

    resolved = _load(args.spec)
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


def cmd_run(args) -> int:
    from demofactory.build.report import format_summary, summarize
    from demofactory.build.run import run_dataset

    overrides = spec_overrides(args, "run")  # --set, and its aliases --attempts, ...
    from demofactory.outputs import Output, check_outputs, spec_files

    run_out = [Output("--out", args.out, "dir", store=True, own=True)]
    check_outputs("run", run_out, inputs=spec_files(args.spec), force=None)
    # resolved by run_dataset, while the cluster starts
    spec = _check(args.spec, overrides, args.out, args.truncate)
    if not spec.seed_demos:
        raise SpecError(
            args.spec, "seed_demos", "at least one seed demo file is needed to generate"
        )
    out_dir = args.out or spec.output_dir()
    if args.out is None:  # the spec's output.dir: the same rule as --out
        default = [Output("output.dir", out_dir, "dir", store=True, own=True)]
        check_outputs("run", default, inputs=spec_files(args.spec), force=None)
    if isinstance(out_dir, str):  # messages about its local copy name the URL
        from demofactory.shards.remote import local_copy_dir

        _LOCAL_COPIES[str(local_copy_dir(out_dir))] = out_dir
    written = run_dataset(  # a store's URL: its local copy, which the store now matches
        spec,
        out_dir,
        args.workers,
        args.address,
        show_progress=not args.no_progress,
        truncate=args.truncate,
    )
    print(format_summary(summarize(written)))
    return 0


def cmd_preview(args) -> int:
    from demofactory.build.preview import PREVIEW_DIRNAME, preview
    from demofactory.outputs import Output, check_outputs

    outputs = [Output("--out", args.out, "dir")]
    check_outputs("preview", outputs, inputs=[args.dataset], force=args.force)  # before a pull
    if args.out is None and isinstance(args.dataset, str):  # a URL: the snapshot goes
        raise UserError(f"{args.dataset}: --out: a stored dataset's preview needs --out DIR")
    if args.out is None:  # DATASET/preview: the one folder of a dataset a command may refill
        own = [Output("--out", args.dataset / PREVIEW_DIRNAME, "dir", own=True)]
        check_outputs("preview", own, force=args.force)
    out = args.out or args.dataset / PREVIEW_DIRNAME  # the dataset's folder, not the snapshot
    with _reading(args.dataset) as snapshot:
        if args.failures:
            from demofactory.build.failures import render_failures
            from demofactory.build.output_dir import require_dataset_info

            info = require_dataset_info(snapshot)
            written = render_failures(snapshot, info, out / "failures.png", args.episodes)
            print(f"failures: {written}")
            return 0
        written = preview(snapshot, out, episodes=args.episodes)
    print(f"contact sheet: {written['contact_sheet']}")
    for video in written["videos"]:
        print(f"video: {video}")
    return 0


def cmd_export(args) -> int:
    from demofactory.build.action_spaces import DEFAULT_ACTIONS, parse_action_spaces

    options = {}
    spaces = parse_action_spaces(args.actions)  # checked before anything is read
    if spaces != DEFAULT_ACTIONS and args.to == "robomimic":
        raise UserError(
            f"--actions: the robomimic export writes the shards' delta_eef actions only, got "
            f"{','.join(spaces)}; use --to lerobot or --to gr00t"
        )
    if args.to == "lerobot":
        from demofactory.shards.export_lerobot import export_lerobot as export
    elif args.to == "gr00t":
        from demofactory.shards.export_gr00t import export_gr00t as export

        options = {"embodiment": args.embodiment}
    else:
        from demofactory.shards.export_robomimic import export_robomimic as export
    from demofactory.outputs import Output, check_outputs, replacing

    kind = "file" if args.to == "robomimic" else "dir"
    check_outputs(
        "export", [Output("OUT", args.out, kind)], inputs=[args.dataset], force=args.force
    )
    if args.force and kind == "dir" and args.out.is_dir() and any(args.out.iterdir()):
        if not (args.out / "meta" / "info.json").is_file():  # --force replaces the whole folder
            raise UserError(
                f"{args.out}: OUT: not an earlier LeRobot/GR00T export (no meta/info.json); "
                "--force replaces only one of those: expected a new, empty or exported folder"
            )
    with _reading(args.dataset) as source, replacing(args.out, args.force) as target:
        if spaces != DEFAULT_ACTIONS:
            from demofactory.build.action_spaces import SceneRelabeler

            options["actions"] = SceneRelabeler(source, spaces)
        summary = export(source, target, **options)  # --force: swapped in once whole
        if "actions" in options:
            summary["action_spaces"] = {
                name: entry.get("replay")
                for name, entry in options["actions"].report()["spaces"].items()
            }
    summary = {k: args.out if str(v) == str(target) else v for k, v in summary.items()}
    print(
        json.dumps(
            {k: str(v) if isinstance(v, Path) else v for k, v in summary.items()}, default=str
        )
    )
    return 0


def cmd_verify(args) -> int:
    from demofactory.build.output_dir import load_generation, require_dataset_info
    from demofactory.shards.format import DatasetError
    from demofactory.shards.snapshot import shown_as
    from demofactory.shards.verify import verify_dataset

    shown = str(args.dataset).rstrip("/")
    with _reading(args.dataset, fresh=True) as dataset:  # a store's: what it holds now
        require_dataset_info(dataset)  # like inspect and run: a folder without it is no dataset
        if not (dataset / "manifest.json").is_file():
            raise UserError(f"{dataset}: not a dataset (no manifest.json)")
        problems = verify_dataset(dataset)
        try:
            load_generation(dataset)
        except (DatasetError, UnicodeDecodeError) as err:  # UnicodeDecodeError: a binary file
            problems.append(str(err))
        if (dataset / "textures").is_dir():  # a generative texture bank
            from demofactory.generators.texture_bank import verify_texture_bank

            problems += [line.removeprefix(f"{dataset}/") for line in verify_texture_bank(dataset)]
        problems = [shown_as(line).removeprefix(f"{shown}/") for line in problems]
    if problems:
        for line in problems:  # named in the dataset, not in the snapshot
            print(f"{shown}/{line}", file=sys.stderr)
        print(f"error: {shown}: {len(problems)} problem(s) found", file=sys.stderr)
        return 2
    print(f"ok: {shown}: every shard, episode and statistic matches")
    return 0


def cmd_inspect(args) -> int:
    from demofactory.build.preview import PREVIEW_DIRNAME
    from demofactory.build.report import format_summary, summarize
    from demofactory.outputs import Output, atomic_path, check_outputs

    plot = [Output("--plot", args.plot, "file")]
    coverage_png = None
    if args.coverage is not None:  # a PNG named, else DATASET/preview/coverage.png
        if args.coverage:
            coverage_png = Path(args.coverage)
            plot.append(Output("--coverage", coverage_png, "file"))
        elif isinstance(args.dataset, str):
            raise UserError(
                f"{args.dataset}: --coverage: a stored dataset's plot needs a file name "
                "(--coverage PNG)"
            )
        else:
            coverage_png = args.dataset / PREVIEW_DIRNAME / "coverage.png"
            own = [Output("--coverage", coverage_png, "file", own=True)]
            check_outputs("inspect", own, force=True)
    check_outputs("inspect", plot, inputs=[args.dataset], force=args.force)
    # partial: a running `factory run`'s committed shards so far (manifest and generation.json
    # with its journal applied agree; inspect reads nothing else)
    with _reading(args.dataset, shards=False, partial=True) as snapshot:
        summary = summarize(snapshot)
        summary["path"] = str(args.dataset)
        if args.plot is not None:  # checked before anything is printed
            from demofactory.build.output_dir import load_generation
            from demofactory.robustness.adr import plot_adr

            found = load_generation(snapshot).get("adr")
            if found is None:
                raise UserError(
                    f"{args.dataset}: --plot: generation.json holds no ADR schedule "
                    "(the spec's generation.adr was off); expected a dataset made with it"
                )
            with atomic_path(args.plot, "--plot") as tmp:
                plot_adr(found, tmp)
            summary["adr_plot"] = str(args.plot)
        if args.coverage is not None:
            summary["coverage"] = _coverage(snapshot, coverage_png, args.bins)
    print(json.dumps(summary, sort_keys=True) if args.json else format_summary(summary))
    if args.plot is not None and not args.json:
        print(f"adr plot: {summary['adr_plot']}")
    if args.coverage is not None and not args.json:
        print(_coverage_text(summary["coverage"]))
    return 0


def _coverage(dataset: Path, path: Path, bins: int | None) -> dict:
    """`inspect --coverage`: the figures, and the plot written (demofactory.build.coverage)."""
    from demofactory.build.coverage import PlacementGrid, count, plot_coverage, summarize
    from demofactory.build.output_dir import load_generation
    from demofactory.shards import DATASET_INFO_FILENAME
    from demofactory.shards.metadata import load_dataset_info, load_episodes
    from demofactory.specs.spec import load_stored_spec

    spec = load_stored_spec(load_dataset_info(dataset), dataset / DATASET_INFO_FILENAME)
    rebalance = spec.generation.rebalance
    grid = PlacementGrid.from_spec(spec.placement, bins or (rebalance.bins if rebalance else 4))
    if not grid.ranges:
        raise UserError(
            f"{dataset}: --coverage: the spec places nothing (placement.objects has no range); "
            "expected a dataset whose spec has placement ranges"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    generation = load_generation(dataset)
    counts = count(grid, generation, load_episodes(dataset))
    found = summarize(grid, counts)
    found["plot"] = str(plot_coverage(grid, counts, path))
    if "rebalance" in generation:
        found["rebalance"] = {k: v for k, v in generation["rebalance"].items() if k != "coverage"}
    return found


def _coverage_text(found: dict) -> str:
    lines = [f"placement coverage ({found['bins_per_axis']} cells per placed axis):"]
    for name, entry in found["objects"].items():
        tried = (
            f", attempts in {entry['attempts_covered']:.0%} ({entry['attempts']} attempts)"
            if "attempts" in entry
            else " (attempts not recorded)"
        )
        lines.append(
            f"  {name} ({'/'.join(entry['axes'])}, {entry['cells']} cells): kept episodes in "
            f"{entry['kept_covered']:.0%} ({entry['kept']} kept){tried}"
        )
    lines.append(f"  all objects: {found['kept_covered']:.0%} of cells hold a kept episode")
    lines.append(f"coverage plot: {found['plot']}")
    return "\n".join(lines)


def cmd_divergence(args) -> int:
    from demofactory.build.output_dir import require_dataset_info
    from demofactory.robustness.divergence_run import score_dataset, summary_text
    from demofactory.specs.spec import load_spec, load_stored_spec

    if isinstance(args.dataset, str):  # a URL: the scores are written into the dataset
        raise UserError(
            f"{args.dataset}: `factory divergence` writes scores into the dataset's own files, "
            "which it does on a local folder only; expected a local dataset directory"
        )
    if args.spec is not None:
        spec = load_spec(args.spec)
    else:  # the spec the dataset records (dataset_info.json), its paths against the cwd
        info = require_dataset_info(args.dataset, "or pass --spec")
        spec = load_stored_spec(info, args.dataset / "dataset_info.json")
    summary = score_dataset(
        args.dataset,
        spec,
        draws=args.draws,
        ranges=args.ranges,
        show_progress=not args.no_progress,
        log=lambda line: print(line, file=sys.stderr),
    )
    print(summary_text(summary))
    return 0


def cmd_seeds(args) -> int:
    from demofactory.build.output_dir import check_can_create
    from demofactory.build.seed_dataset import check_one_robot, check_seeds_dir, write_seed_dataset
    from demofactory.outputs import Output, check_outputs, spec_files
    from demofactory.specs.spec import load_spec

    outputs = [Output("--out", args.out, "dir", own=True)]
    check_outputs("seeds", outputs, inputs=spec_files(args.spec), force=None)
    spec = load_spec(args.spec)
    check_one_robot(spec)
    check_can_create(args.out, "--out")
    check_seeds_dir(args.out, spec.fingerprint())  # before the env is built
    resolved = _load(args.spec)
    print(json.dumps(write_seed_dataset(resolved, args.out)))
    return 0


def cmd_script(args) -> int:
    from demofactory.seeds.script import check_output
    from demofactory.specs.spec import load_spec

    check_output(args.out, args.force, spec_path=args.spec)  # the output rule first: cheap

    overrides = spec_overrides(args, "script")  # --set, and its aliases --seed, ...
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


def cmd_train_eval(args) -> int:
    from demofactory.train.config import TrainEvalConfig
    from demofactory.train.train_eval import train_eval
    from pydantic import ValidationError

    values = {k[4:]: v for k, v in vars(args).items() if k.startswith("cfg_") and v is not None}
    try:
        config = TrainEvalConfig(**values)
    except ValidationError as err:
        first = err.errors()[0]
        raise UserError(f"--{str(first['loc'][0]).replace('_', '-')}: {first['msg']}") from None
    from demofactory.outputs import Output, atomic_write_text, check_outputs, spec_files

    # up front: training and rollouts take minutes, and the report would be lost
    outputs = [Output("--out", args.out), Output("--save-policy", args.save_policy)]
    inputs = [args.dataset, *spec_files(args.spec)]
    check_outputs("train-eval", outputs, inputs=inputs, force=args.force)
    with _reading(args.dataset) as snapshot:  # trained on one consistent view, to the end
        if not (snapshot / "manifest.json").is_file():
            raise UserError(f"{args.dataset}: not a dataset (no manifest.json)")
        resolved = _load(args.spec)
        log = (
            (lambda line: None)
            if args.quiet
            else (lambda line: print(line, file=sys.stderr, flush=True))
        )
        report = train_eval(snapshot, resolved, config, log=log, save=args.save_policy)
    report = _shown_in(report)  # the dataset's name, not the snapshot's
    report["command"] = (
        "factory " + " ".join(sys.argv[1:]) if sys.argv[1:] else "factory train-eval"
    )
    text = json.dumps(report)
    if args.out is not None:
        atomic_write_text(args.out, text + "\n", "--out")
    print(text)
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


COMMANDS = {
    "validate": cmd_validate,
    "spec-help": cmd_spec_help,
    "annotate": cmd_annotate,
    "run": cmd_run,
    "preview": cmd_preview,
    "export": cmd_export,
    "verify": cmd_verify,
    "inspect": cmd_inspect,
    "divergence": cmd_divergence,
    "seeds": cmd_seeds,
    "train-eval": cmd_train_eval,
    "script": cmd_script,
    "collect": cmd_collect,
    "calibrate": cmd_calibrate,
}


# What an interrupted command (Ctrl-C, SIGTERM) leaves: each writes its outputs through a
# temporary name (demofactory.outputs), so only `run`, which keeps each shard it finished,
# resumes.
READ_ONLY = "nothing was written"
INTERRUPTED = {
    "run": "finished shards are kept; run the same command again to resume",
    "seeds": "--out holds no manifest yet (written last); run the same command again",
    "export": "OUT was not written (an export is renamed into place only once whole); "
    "the dataset is unchanged",
    "script": "--out was not written (the demos are saved only once all are recorded)",
    "collect": "--out was not written (the demos are saved only once all are recorded)",
    "calibrate": "--out and --report were not written",
    "train-eval": "--out and --save-policy were not written",
    "divergence": "the dataset is unchanged (scores are written only once all are computed)",
    "preview": "pictures already finished are kept in the preview folder; the dataset is unchanged",
    "validate": "the spec is unchanged; --still keeps the pictures already finished",
    "annotate": "the spec is unchanged; --plot keeps the timelines already finished",
}


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C: what finished is kept (Ray's own handler aborts the driver)."""


# received: the exit code says which, whatever re-raised the interrupt on the way
_signals: list[int] = []


def _terminate(signum, frame) -> None:
    _signals.append(signum)
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    import signal

    args = build_parser().parse_args(argv)
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if main_thread else None
    try:
        return _main(args)
    finally:
        # main() called in-process (tests): leave the caller's handler as it was
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _main(args) -> int:
    """Run the command; the one place where errors become what the user sees.

    Every user-facing error (`demofactory.errors.USER_FACING_ERRORS`: factory's, the dataset
    format's, the cluster's, the generators') is one `error: ...` line on stderr, exit 2.
    """
    never_step = ("verify", "inspect", "export", "preview", "spec-help")
    if args.command not in never_step:  # those never step MuJoCo
        from demofactory.simulation.mujoco_log import route_mujoco_warnings

        route_mujoco_warnings()
    if args.command not in ("verify", "inspect", "export", "spec-help"):  # those build no env
        from demofactory.robots import (
            repairs as robot_repairs,  # robosuite: only for the verbs that build envs
        )

        robot_repairs.install()  # before any env is built (preview: --failures re-renders)
    try:
        return COMMANDS[args.command](args)
    except USER_FACING_ERRORS as err:
        print(f"error: {_shown(user_message(err))}", file=sys.stderr)
        return 2
    except SystemExit as err:
        import signal

        if err.code != signal.SIGTERM:
            raise
        # ray.init's own SIGTERM handler (`sys.exit(signum)`), in force while it starts Ray:
        # the same SIGTERM, so the same line and exit code as in every other phase.
        print(f"interrupted: {INTERRUPTED.get(args.command, READ_ONLY)}", file=sys.stderr)
        return 143
    except KeyboardInterrupt as err:
        print(f"interrupted: {INTERRUPTED.get(args.command, READ_ONLY)}", file=sys.stderr)
        return 143 if isinstance(err, Terminated) or _signals else 130
    except BrokenPipeError:  # `factory inspect DIR | head`: the reader left; not an error
        _silence_stdout()
        return 141  # what a shell reports for a process ended by SIGPIPE (128 + 13)
    except OSError as err:  # a file the checks above missed: still one line, not a traceback
        where = f"{err.filename}: " if getattr(err, "filename", None) else ""
        text = (
            getattr(err, "strerror", None)
            or (str(err).strip().splitlines() or [type(err).__name__])[0]
        )
        print(f"error: {_shown(f'{where}{text}')}", file=sys.stderr)
        return 2


def _shown(text: str) -> str:
    """`text` naming datasets as the user did, not the private snapshots readers work on."""
    from demofactory.shards.snapshot import shown_as

    return shown_as(text)


def _shown_in(value):
    """`value` (a JSON document) with `_shown` applied to every string in it."""
    if isinstance(value, str):
        return _shown(value)
    if isinstance(value, dict):
        return {k: _shown_in(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_shown_in(v) for v in value]
    return value


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's final flush does not fail again."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout replaced by an object without a descriptor (tests)
        pass
    finally:
        os.close(devnull)


def user_message(err: BaseException) -> str:
    """A user-facing error's text on one line (a Ray task error's: what the worker raised)."""
    cause = getattr(err, "cause", None)  # ray.exceptions.RayTaskError wraps the worker's error
    if isinstance(cause, USER_FACING_ERRORS):
        err = cause
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    text = " ".join(lines) if lines else type(err).__name__
    return _as_given(text)


def _as_given(text: str) -> str:
    """`text` with each stored dataset's local copy named by its URL."""
    for local, url in _LOCAL_COPIES.items():
        text = text.replace(local, url)
    return text


if __name__ == "__main__":
    sys.exit(main())
