"""The robustness verbs: `factory divergence` and `factory calibrate`."""

from __future__ import annotations

import json
import sys

from demofactory.errors import UserError
from demofactory.specs.overrides import spec_overrides


def cmd_calibrate(args) -> int:
    import math

    from demofactory.outputs import Output, check_outputs, spec_files
    from demofactory.robustness.calibrate_run import run_calibration

    overrides = spec_overrides(args)
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
        overrides=overrides,
    )
    half = {k: v if math.isfinite(v) else None for k, v in result.half_widths.items()}  # JSON
    summary = {
        name: {"value": value, "ci95_half_width": half[name]}
        for name, value in result.values().items()
    }
    print(json.dumps({"out": str(args.out), "report": str(report), "fitted": summary}))
    return 0


def cmd_divergence(args) -> int:
    from demofactory.build.output_dir import require_dataset_info
    from demofactory.robustness.divergence_run import score_dataset, summary_text
    from demofactory.specs.spec import load_spec, load_stored_spec

    overrides = spec_overrides(args)
    if isinstance(args.dataset, str):  # a URL: the scores are written into the dataset
        raise UserError(
            f"{args.dataset}: `factory divergence` writes scores into the dataset's own files, "
            "which it does on a local folder only; expected a local dataset directory"
        )
    if args.spec is not None:
        spec = load_spec(args.spec, overrides)
    else:  # the spec the dataset records (dataset_info.json), its paths against the cwd
        info = require_dataset_info(args.dataset, "or pass --spec")
        spec = load_stored_spec(info, args.dataset / "dataset_info.json", overrides)
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
