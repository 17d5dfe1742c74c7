"""`factory train-eval`: train a policy on a dataset and roll it out."""

from __future__ import annotations

import json
import sys

from demofactory.cli.common import _load, _reading, _shown_in
from demofactory.errors import UserError
from demofactory.specs.overrides import spec_overrides


def cmd_train_eval(args) -> int:
    from demofactory.train.config import TrainEvalConfig
    from demofactory.train.train_eval import train_eval
    from pydantic import ValidationError

    overrides = spec_overrides(args)
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
        resolved = _load(args.spec, overrides)
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
