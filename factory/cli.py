"""The `factory` command.

    factory validate scene_specs/stack.yaml
    factory annotate scene_specs/stack.yaml
    factory run scene_specs/stack.yaml --attempts 20 --out out/stack --workers 2
    factory inspect out/stack [--json]
    factory preview out/stack          # contact sheet PNG + one mp4 per camera
    factory verify out/stack           # checksums, sample counts, episodes, stats
    factory export out/stack --to lerobot out/stack-lerobot
    factory export out/stack --to robomimic out/stack.hdf5
    factory seeds scene_specs/lift_lowdim.yaml --out out/lift-seeds        # the human seed demos as a dataset
    factory train-eval out/lift_lowdim --spec scene_specs/lift_lowdim.yaml   # BC policy: rollout success, JSON

Bad input (a spec, a seed file, an output directory) prints one line naming
the file, the field and what was expected, and exits with code 2.
"""

from __future__ import annotations

import argparse
import json
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
                   help="stop once this many attempts succeeded, each giving K episodes, "
                        "K = appearance.variants_per_trajectory (overrides generation.target_successes)")
    p.add_argument("--workers", type=_positive_int, default=None, help="Ray actors (default: one per CPU of the cluster)")
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

    p = sub.add_parser("seeds", help="write a spec's human seed demos as a dataset (the baseline for train-eval)")
    p.add_argument("spec", type=Path)
    p.add_argument("--out", type=Path, required=True, help="dataset directory (new or empty, or a previous seeds output)")

    p = sub.add_parser("train-eval", help="train a behaviour-cloning policy on a dataset and report its rollout success")
    p.add_argument("dataset", type=Path)
    p.add_argument("--spec", type=Path, required=True, help="the scene spec whose env, placement and seeds the rollouts use")
    p.add_argument("--out", type=Path, help="also write the JSON report to this file")
    p.add_argument("--save-policy", type=Path, help="save the trained policy (torch state dict) here")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    _add_train_eval_flags(p)
    return parser


def _add_train_eval_flags(p: argparse.ArgumentParser) -> None:
    """One flag per TrainEvalConfig field, with its default and comment as help."""
    from factory.train_eval import TrainEvalConfig

    for name, field in TrainEvalConfig.model_fields.items():
        flag, kind = f"--{name.replace('_', '-')}", field.annotation
        if kind is bool:
            p.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, dest=f"cfg_{name}",
                           help=f"default: {'on' if field.default else 'off'}")
            continue
        parse = float if kind in (float, float | None) else str if kind in (str, str | None) else int
        p.add_argument(flag, type=parse, default=None, dest=f"cfg_{name}", metavar=name.upper(),
                       help=f"default: {field.default}")


def _load(path: Path, overrides: dict | None = None, out_dir: Path | None = None):
    """load_spec (pure), the output directory check (cheap), then resolve (builds the env)."""
    from factory.resolve import resolve_spec

    return resolve_spec(_check(path, overrides, out_dir))


def _check(path: Path, overrides: dict | None = None, out_dir: Path | None = None):
    """load_spec (pure), the output directory check and the texture model check (cheap)."""
    from factory.run import check_output_dir
    from factory.spec import load_spec
    from generators.texture_bank import check_texture_model

    spec = load_spec(path, overrides)
    target = (out_dir or spec.output_dir()) if out_dir is not None or overrides is not None else None
    if target is not None:
        check_output_dir(target, spec)
    bank = spec.appearance.textures.bank if spec.appearance.textures is not None else None
    if bank is not None:  # the model must be on disk unless the bank is already made (reads no weights)
        check_texture_model(bank, target, spec_path=spec.path)
    return spec


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
    spec = _check(args.spec, overrides, args.out)  # resolved by run_dataset, while the cluster starts
    if not spec.seed_demos:
        raise SpecError(args.spec, "seed_demos", "at least one seed demo file is needed to generate")
    out_dir = args.out or spec.output_dir()
    run_dataset(spec, out_dir, args.workers, args.address, show_progress=not args.no_progress)
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
    if (args.dataset / "textures").is_dir():  # a generative texture bank (appearance.textures.bank)
        from generators.texture_bank import verify_texture_bank

        problems += [line.removeprefix(f"{args.dataset}/") for line in verify_texture_bank(args.dataset)]
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


def cmd_seeds(args) -> int:
    from factory.seeds import check_seeds_dir, write_seed_dataset
    from factory.spec import load_spec

    spec = load_spec(args.spec)
    check_seeds_dir(args.out, spec.fingerprint())  # before the env is built
    resolved = _load(args.spec)
    print(json.dumps(write_seed_dataset(resolved, args.out)))
    return 0


def cmd_train_eval(args) -> int:
    from pydantic import ValidationError

    from factory.train_eval import TrainEvalConfig, train_eval

    values = {k[4:]: v for k, v in vars(args).items() if k.startswith("cfg_") and v is not None}
    try:
        config = TrainEvalConfig(**values)
    except ValidationError as err:
        first = err.errors()[0]
        raise UserError(f"--{str(first['loc'][0]).replace('_', '-')}: {first['msg']}") from None
    if not (args.dataset / "manifest.json").is_file():
        raise UserError(f"{args.dataset}: not a dataset (no manifest.json)")
    resolved = _load(args.spec)
    log = (lambda line: None) if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    report = train_eval(args.dataset, resolved, config, log=log, save=args.save_policy)
    report["command"] = "factory " + " ".join(sys.argv[1:]) if sys.argv[1:] else "factory train-eval"
    text = json.dumps(report)
    if args.out is not None:
        args.out.write_text(text + "\n")
    print(text)
    return 0


COMMANDS = {"validate": cmd_validate, "annotate": cmd_annotate, "run": cmd_run, "preview": cmd_preview, "export": cmd_export,
            "verify": cmd_verify,
            "inspect": cmd_inspect, "seeds": cmd_seeds, "train-eval": cmd_train_eval}


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
