"""`--set PATH=VALUE`: the one way a command line overrides a spec field.

    factory run scene_specs/lift.yaml --set generation.attempts=20 --set seed=3 \\
        --set 'physics.mass={cube: [0.8, 1.2]}'

PATH is the field's dotted path as the YAML nests it (`factory spec-help` lists them); VALUE is
parsed as YAML (`20` an int, `[0.8, 1.2]` a list, `true`, `null`, `'20'` a string). The
overrides are applied to the spec's YAML before it is validated
(`demofactory.specs.spec.load_spec`), so a
bad value fails exactly as it would in the file.

The older per-field flags are aliases of it: `ALIASES` maps each flag (its argparse dest) to its
path, and `spec_overrides` turns both into the same dotted-key mapping. A flag and a `--set` of
the same path that disagree are refused.
"""

from __future__ import annotations

import argparse
import types
import typing
from collections.abc import Mapping
from typing import Any

from demofactory.errors import UserError

if typing.TYPE_CHECKING:
    from pydantic import BaseModel

# verb -> {flag dest: spec path}; the flags keep their own checks (type, choices) and help.
ALIASES: dict[str, dict[str, str]] = {
    "run": {
        "attempts": "generation.attempts",
        "seed": "seed",
        "successes": "generation.target_successes",
        "shard_layout": "output.shard_layout",
    },
    "script": {"seed": "seed", "demos": "script.demos"},
}


def parse_assignment(text: str) -> tuple[str, Any]:
    """`PATH=VALUE` as (path, the value parsed as YAML); an argparse `type` (its errors are
    argparse's one-line usage errors)."""
    path, sep, value = text.partition("=")
    path = path.strip()
    if not sep or not path:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected PATH=VALUE, e.g. generation.attempts=20"
        )
    if any(not part.isidentifier() for part in path.split(".")):
        raise argparse.ArgumentTypeError(
            f"{text!r}: PATH is a spec field's dotted name, e.g. generation.attempts"
        )
    import yaml  # on use, as pydantic below: building the CLI's parser stays cheap

    try:
        parsed = yaml.safe_load(value) if value.strip() else None
    except yaml.YAMLError as err:
        reason = str(err).splitlines()[0]
        raise argparse.ArgumentTypeError(f"{text!r}: VALUE is not YAML ({reason})") from None
    return path, parsed


def add_set_argument(parser: argparse.ArgumentParser, aliases: Mapping[str, str]) -> None:
    """`--set PATH=VALUE`, repeatable; `aliases` (flag dest -> path) are named in its help."""
    named = ", ".join(f"--{dest.replace('_', '-')} ({path})" for dest, path in aliases.items())
    parser.add_argument(
        "--set",
        dest="set",
        action="append",
        default=[],
        type=parse_assignment,
        metavar="PATH=VALUE",
        help="override any spec field: PATH its dotted name (factory spec-help), VALUE parsed as "
        f"YAML; repeatable. The flags {named} are aliases of it",
    )


def spec_overrides(args: argparse.Namespace, verb: str) -> dict[str, Any]:
    """The dotted-key overrides of `args`: its alias flags that were given, then each `--set`
    (checked against the spec's fields as far as they are models)."""
    found: dict[str, tuple[str, Any]] = {}  # path -> (the option that set it, value)
    for dest, path in ALIASES[verb].items():
        value = getattr(args, dest, None)
        if value is not None:
            found[path] = (f"--{dest.replace('_', '-')} {value}", value)
    for path, value in getattr(args, "set", None) or []:
        check_path(_spec_model(), path)
        given = f"--set {path}={value}"
        if path in found and found[path][1] != value:
            raise UserError(f"{found[path][0]} and {given} disagree; give one of them")
        found[path] = (given, value)
    return {path: value for path, (_, value) in found.items()}


def _spec_model() -> type[BaseModel]:
    # Imported on use: the CLI imports this module to build its parser, which stays cheap
    # (pydantic and the spec's models are most of a second on a busy machine).
    from demofactory.specs.spec import SceneSpec

    return SceneSpec


def check_path(model: type[BaseModel], path: str) -> None:
    """A UserError when `path` names a field that `model` (and the models it nests) lacks.

    Checked as far as the fields are models: below a mapping, a list or a union of several
    models, the spec's own validation checks the rest."""
    current: type[BaseModel] | None = model
    done = []
    for part in path.split("."):
        if current is None:
            return
        fields = current.model_fields
        if part not in fields:
            where = f" under {'.'.join(done)}" if done else ""
            raise UserError(
                f"--set {path}: no field {part!r}{where}; expected one of: "
                f"{', '.join(sorted(fields))}"
            )
        done.append(part)
        current = _model_of(fields[part].annotation)


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The one model a field holds (itself, or optional), else None."""
    if isinstance(annotation, type) and hasattr(annotation, "model_fields"):  # a pydantic model
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        models = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(models) == 1:
            return _model_of(models[0])
    return None
