"""The dataset verbs: `factory run`, `seeds`, `inspect`, `verify`, `preview`, `export`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from demofactory.cli.common import _LOCAL_COPIES, _check, _load, _reading
from demofactory.errors import SpecError, UserError
from demofactory.specs.overrides import spec_overrides


def cmd_run(args) -> int:
    from demofactory.build.report import format_summary, summarize
    from demofactory.build.run import run_dataset

    overrides = spec_overrides(args)  # --set, and its aliases --attempts, ...
    from demofactory.outputs import Output, check_outputs, spec_files

    run_out = [Output("--out", args.out, "dir", store=True, own=True)]
    check_outputs("run", run_out, inputs=spec_files(args.spec), force=None)
    # resolved by run_dataset, while the cluster starts
    spec = _check(args.spec, overrides, args.out, args.truncate, output=True)
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


def cmd_seeds(args) -> int:
    from demofactory.build.seed_dataset import check_one_robot, check_seeds_dir, write_seed_dataset
    from demofactory.outputs import Output, check_can_create, check_outputs, spec_files
    from demofactory.specs.spec import load_spec

    overrides = spec_overrides(args)
    outputs = [Output("--out", args.out, "dir", own=True)]
    check_outputs("seeds", outputs, inputs=spec_files(args.spec), force=None)
    spec = load_spec(args.spec, overrides)
    check_one_robot(spec)
    check_can_create(args.out, "--out")
    check_seeds_dir(args.out, spec.fingerprint())  # before the env is built
    resolved = _load(args.spec, overrides)
    print(json.dumps(write_seed_dataset(resolved, args.out)))
    return 0
