"""The `factory` command.

    factory validate scene_specs/stack.yaml
    factory annotate scene_specs/stack.yaml
    factory run scene_specs/stack.yaml --attempts 20 --out out/stack --workers 2
    factory inspect out/stack [--json]
    factory preview out/stack          # contact sheet PNG + one mp4 per camera
    factory verify out/stack           # checksums, sample counts, episodes, stats
    factory export out/stack --to lerobot out/stack-lerobot
    factory export out/stack --to robomimic out/stack.hdf5

Bad input (a spec, a seed file, an output directory) prints one line naming
the file, the field and what was expected, and exits with code 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from factory.errors import SpecError, UserError


def _int_at_least(lowest: int):
    """An argparse type: an integer >= `lowest`, with a message naming what was expected."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {lowest}, got {text!r}") from None
        if value < lowest:
            raise argparse.ArgumentTypeError(f"expected an integer >= {lowest}, got {value}")
        return value

    return parse


_positive_int, _non_negative_int = _int_at_least(1), _int_at_least(0)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="factory", description="Synthetic demonstration data factory.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("validate", help="check a scene spec (YAML, seed demos, env, cameras)")
    p.add_argument("spec", type=Path)

    p = sub.add_parser("annotate", help="show where each subtask starts and ends in each seed demo")
    p.add_argument("spec", type=Path)
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")

    p = sub.add_parser("run", help="generate, render and write a dataset on Ray")
    p.add_argument("spec", type=Path)
    p.add_argument("--out", type=Path, help="dataset directory (default: the spec's output.dir, or out/<name>)")
    p.add_argument("--attempts", type=_positive_int, help="generation attempts (overrides generation.attempts)")
    p.add_argument("--successes", type=_positive_int,
                   help="stop once this many episodes succeeded (overrides generation.target_successes)")
    p.add_argument("--workers", type=_positive_int, default=None, help="Ray actors (default: CPU count)")
    p.add_argument("--address", default=None, help="an existing Ray cluster (default: $RAY_ADDRESS, else a local one)")
    p.add_argument("--seed", type=_non_negative_int, help="overrides the spec's seed")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")

    p = sub.add_parser("preview", help="a contact-sheet PNG and one mp4 per camera of a dataset")
    p.add_argument("dataset", type=Path)
    p.add_argument("--out", type=Path, help="folder for the pictures (default: DATASET/preview)")
    p.add_argument("--episodes", type=_positive_int, default=6, help="rows of the contact sheet")

    p = sub.add_parser("export", help="write the dataset as LeRobot (v3.0) or robomimic (hdf5)")
    p.add_argument("dataset", type=Path)
    p.add_argument("--to", choices=("lerobot", "robomimic"), required=True)
    p.add_argument("out", type=Path, help="a new folder (lerobot) or a new .hdf5 file (robomimic)")

    p = sub.add_parser("verify", help="check shards against the manifest, episodes and stats")
    p.add_argument("dataset", type=Path)

    p = sub.add_parser("inspect", help="summarize a dataset")
    p.add_argument("dataset", type=Path)
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return parser


def _load(path: Path, overrides: dict | None = None, out_dir: Path | None = None):
    """load_spec (pure), the output directory check (cheap), then resolve (builds the env)."""
    from factory.resolve import resolve_spec
    from factory.run import check_output_dir
    from factory.spec import load_spec

    spec = load_spec(path, overrides)
    if out_dir is not None or overrides is not None:
        check_output_dir(out_dir or spec.output_dir(), spec)
    return resolve_spec(spec)


def cmd_validate(args) -> int:
    resolved = _load(args.spec)
    spec = resolved.spec
    ends = ", ".join(f"{d.demo.name}: {list(d.subtask_ends)}" for d in resolved.demos)
    cams = ", ".join(f"{c.name} {c.width}x{c.height}" for c in spec.cameras) or "none"
    print(f"ok: {args.spec}: {spec.name} ({spec.task.env}, {spec.task.robot}), {len(resolved.demos)} seed demos, "
          f"{len(spec.subtasks)} subtasks (ends per demo: {ends}), cameras: {cams}")
    return 0


def cmd_annotate(args) -> int:
    resolved = _load(args.spec)
    spec = resolved.spec
    report = []
    for demo in resolved.demos:
        segments = []
        for position, index in enumerate(demo.order):
            start, end = demo.segment(position)
            sub = spec.subtasks[index]
            ends = sub.ends_when or ("end of demo" if position == len(demo.order) - 1 else "gripper event")
            segments.append({"subtask": index, "object": sub.object, "ends_when": ends, "start": start, "end": end})
        report.append({"demo": demo.demo.label, "length": demo.demo.length, "segments": segments})
    if args.json:
        print(json.dumps({"spec": str(args.spec), "demos": report}))
        return 0
    for entry in report:
        print(f"{entry['demo']}  ({entry['length']} steps)")
        for seg in entry["segments"]:
            print(f"  subtask {seg['subtask']}  {seg['object']:<12} steps {seg['start']:>5} .. {seg['end']:<5}"
                  f"  ends when {seg['ends_when']}")
    return 0


def cmd_run(args) -> int:
    from factory.report import format_summary, summarize
    from factory.run import run_dataset

    overrides = {}
    if args.attempts is not None:
        overrides["generation.attempts"] = args.attempts
    if args.seed is not None:
        overrides["seed"] = args.seed
    if args.successes is not None:
        overrides["generation.target_successes"] = args.successes
    resolved = _load(args.spec, overrides, args.out)
    if not resolved.demos:
        raise SpecError(args.spec, "seed_demos", "at least one seed demo file is needed to generate")
    out_dir = args.out or resolved.spec.output_dir()
    workers = args.workers or max(1, os.cpu_count() or 1)
    run_dataset(resolved, out_dir, workers, args.address, show_progress=not args.no_progress)
    print(format_summary(summarize(out_dir)))
    return 0


def cmd_preview(args) -> int:
    from factory.preview import preview

    written = preview(args.dataset, args.out, episodes=args.episodes)
    print(f"contact sheet: {written['contact_sheet']}")
    for video in written["videos"]:
        print(f"video: {video}")
    return 0


def cmd_export(args) -> int:
    if args.to == "lerobot":
        from shards.export_lerobot import export_lerobot as export
    else:
        from shards.export_robomimic import export_robomimic as export
    summary = export(args.dataset, args.out)
    print(json.dumps({k: str(v) if isinstance(v, Path) else v for k, v in summary.items()}, default=str))
    return 0


def cmd_verify(args) -> int:
    from shards.verify import verify_dataset

    if not (args.dataset / "manifest.json").is_file():
        raise UserError(f"{args.dataset}: not a dataset (no manifest.json)")
    problems = verify_dataset(args.dataset)
    if problems:
        for line in problems:
            print(f"{args.dataset}/{line}", file=sys.stderr)
        print(f"error: {args.dataset}: {len(problems)} problem(s) found", file=sys.stderr)
        return 2
    print(f"ok: {args.dataset}: every shard, episode and statistic matches")
    return 0


def cmd_inspect(args) -> int:
    from factory.report import format_summary, summarize

    summary = summarize(args.dataset)
    print(json.dumps(summary, sort_keys=True) if args.json else format_summary(summary))
    return 0


COMMANDS = {"validate": cmd_validate, "annotate": cmd_annotate, "run": cmd_run, "preview": cmd_preview, "export": cmd_export,
            "verify": cmd_verify,
            "inspect": cmd_inspect}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: finished shards are kept; run the same command again to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
