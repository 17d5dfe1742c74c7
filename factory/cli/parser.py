"""The `factory` command's argument parser: every verb and flag, with its help text."""

from __future__ import annotations

import argparse
import typing
from pathlib import Path

from demofactory.cli.common import _location, _non_negative_int, _positive_int
from demofactory.specs.overrides import SPEC_VERBS, add_set_argument


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
        default=None,
        help="gr00t: the embodiment tag recorded in meta/info.json (default gr1 for a GR-1 "
        "dataset, else new_embodiment)",
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
    for verb in SPEC_VERBS:  # every verb that reads a spec: --set, its flags its aliases
        add_set_argument(sub.choices[verb], verb)
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
