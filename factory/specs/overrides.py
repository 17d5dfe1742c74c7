"""`--set PATH=VALUE`: the one way a command line overrides a spec field, on every verb that
reads a spec (`SPEC_VERBS`).

    factory run scene_specs/lift.yaml --set generation.attempts=20 --set seed=3 \\
        --set 'physics.mass={cube: [0.8, 1.2]}'
    factory validate scene_specs/lift.yaml --set task.robot=UR5e

PATH is the field's dotted path as the YAML nests it (`factory spec-help` lists them); VALUE is
parsed as YAML (`20` an int, `[0.8, 1.2]` a list, `true`, `null`, `'20'` a string). The
overrides are applied to the spec's YAML before it is validated
(`demofactory.specs.spec.load_spec`), so a bad value fails exactly as it would in the file, in
one line that also names the option that set it.

The older per-field flags are aliases of it: `SPEC_VERBS` maps each verb's flags (their argparse
dests) to their paths, and `spec_overrides` turns flags and `--set`s alike into one `Overrides`
mapping. A flag and a `--set` of the same path that disagree are refused.
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

# Every verb that reads a spec -> its alias flags {flag dest: spec path}; the flags keep their
# own checks (type, choices) and help. `divergence` reads the dataset's stored spec without
# --spec: its --set applies to that one.
SPEC_VERBS: dict[str, dict[str, str]] = {
    "validate": {},
    "annotate": {},
    "run": {
        "attempts": "generation.attempts",
        "seed": "seed",
        "successes": "generation.target_successes",
        "shard_layout": "output.shard_layout",
    },
    "seeds": {},
    "script": {"seed": "seed", "demos": "script.demos"},
    "collect": {},
    "calibrate": {},
    "divergence": {},
    "train-eval": {},
}
ALIASES = {verb: aliases for verb, aliases in SPEC_VERBS.items() if aliases}


class Overrides(dict):
    """Dotted path -> value, and `given`: the option that set each path (`--attempts 7`,
    `--set seed=3`), which an error about that path names."""

    def __init__(self, values=(), given: Mapping[str, str] | None = None):
        super().__init__(values)
        self.given = dict(given or {})

    def option(self, path: str) -> str:
        return self.given.get(path, f"--set {path}={self[path]}")


class Assignment(tuple):
    """(path, value) of one `--set`, and `text`: the VALUE as typed, which an error names (the
    parsed value's repr would say `None` for `null` or an empty VALUE, `[1, 2]` for `[1,2]`)."""

    text: str

    def __new__(cls, path: str, value: Any, text: str):
        made = super().__new__(cls, (path, value))
        made.text = text
        return made


def parse_assignment(text: str) -> tuple[str, Any]:
    """`PATH=VALUE` as (path, the value parsed as YAML), an `Assignment` that keeps VALUE's
    text; an argparse `type` (its errors are argparse's one-line usage errors)."""
    path, sep, value = text.partition("=")
    path = path.strip()
    if not sep or not path:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected PATH=VALUE, e.g. generation.attempts=20"
        )
    parts = path.split(".")
    if not parts[0].isidentifier() or any(
        not (part.isidentifier() or part.isdigit()) for part in parts
    ):
        raise argparse.ArgumentTypeError(
            f"{text!r}: PATH is a spec field's dotted name, a list's items by index, e.g. "
            "generation.attempts or subtasks.0.name"
        )
    import yaml  # on use, as pydantic below: building the CLI's parser stays cheap

    try:
        parsed = yaml.safe_load(value) if value.strip() else None
    except yaml.YAMLError as err:
        reason = str(err).splitlines()[0]
        raise argparse.ArgumentTypeError(f"{text!r}: VALUE is not YAML ({reason})") from None
    return Assignment(path, parsed, value)


def add_set_argument(parser: argparse.ArgumentParser, verb: str) -> None:
    """`--set PATH=VALUE`, repeatable; the verb's aliases (flag dest -> path) named in its help."""
    aliases = SPEC_VERBS[verb]
    named = ", ".join(f"--{dest.replace('_', '-')} ({path})" for dest, path in aliases.items())
    parser.add_argument(
        "--set",
        dest="set",
        action="append",
        default=[],
        type=parse_assignment,
        metavar="PATH=VALUE",
        help="override any spec field: PATH its dotted name (factory spec-help), VALUE parsed as "
        "YAML; repeatable" + (f". The flags {named} are aliases of it" if named else ""),
    )


def spec_overrides(args: argparse.Namespace, verb: str | None = None) -> Overrides:
    """The dotted-key overrides of `args` (for `verb`, by default the parsed command): its alias
    flags that were given, then each `--set` (checked against the spec's fields as far as they
    are models)."""
    verb = verb or args.command
    found: dict[str, tuple[str, Any]] = {}  # path -> (the option that set it, value)
    for dest, path in SPEC_VERBS[verb].items():
        value = getattr(args, dest, None)
        if value is not None:
            found[path] = (f"--{dest.replace('_', '-')} {value}", value)
    for assignment in getattr(args, "set", None) or []:
        path, value = assignment
        try:
            check_path(_spec_model(), path)
        except UserError as err:  # the file first, as every spec error starts
            raise UserError(f"{_spec_file(args)}: {err}") from None
        given = f"--set {path}={getattr(assignment, 'text', value)}"
        if path in found and found[path][1] != value:
            raise UserError(f"{found[path][0]} and {given} disagree; give one of them")
        found[path] = (given, value)
    return Overrides(
        {path: value for path, (_, value) in found.items()},
        {path: option for path, (option, _) in found.items()},
    )


def _spec_file(args: argparse.Namespace) -> str:
    """The spec a verb's `--set` applies to: its spec file, else the dataset's stored spec."""
    spec = getattr(args, "spec", None)
    if spec is not None:
        return str(spec)
    dataset = getattr(args, "dataset", None)
    return f"{dataset}/dataset_info.json" if dataset is not None else "the spec"


def _spec_model() -> type[BaseModel]:
    # Imported on use: the CLI imports this module to build its parser, which stays cheap
    # (pydantic and the spec's models are most of a second on a busy machine).
    from demofactory.specs.spec import SceneSpec

    return SceneSpec


def check_path(model: type[BaseModel], path: str) -> None:
    """A UserError when `path` names a field that `model` (and the models it nests) lacks, or
    goes below a field that holds a plain value (`generation.attempts.x`).

    Checked as far as the fields are models: below a mapping, a list or a union of several
    models, the spec's own validation checks the rest."""
    current: type[BaseModel] | None = model
    annotation: Any = model
    done = []
    for part in path.split("."):
        if part.isdigit():  # an item of a list of models (subtasks.0), else the spec checks it
            item = _item_of(annotation)
            if item is None and current is not None:
                raise UserError(
                    f"--set {path}: {'.'.join(done)} holds fields, not a list; expected "
                    f"one of: {', '.join(sorted(current.model_fields))} after it"
                )
            done.append(part)
            annotation, current = item, _model_of(item)
            continue
        if current is None:
            if _is_plain(annotation):
                raise UserError(
                    f"--set {path}: {'.'.join(done)} holds a value ({_kind(annotation)}), not "
                    f"fields; expected --set {'.'.join(done)}=VALUE"
                )
            return
        fields = current.model_fields
        if part not in fields:
            where = f" under {'.'.join(done)}" if done else ""
            raise UserError(
                f"--set {path}: no field {part!r}{where}; expected one of: "
                f"{', '.join(sorted(fields))}"
            )
        done.append(part)
        annotation = fields[part].annotation
        current = _model_of(annotation)


def _is_plain(annotation: Any) -> bool:
    """A field of scalars only (int, float, str, bool, a Literal, optional or not): nothing
    can sit below it."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return bool(args) and all(_is_plain(a) for a in args)
    if typing.get_origin(annotation) is typing.Literal:
        return True
    return annotation in (int, float, str, bool)


def _kind(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def _item_of(annotation: Any) -> Any:
    """The item type of a list field (optional or not), else None."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        items = [_item_of(a) for a in typing.get_args(annotation) if a is not type(None)]
        return items[0] if len(items) == 1 else None
    if typing.get_origin(annotation) in (list, tuple):
        args = typing.get_args(annotation)
        return args[0] if args else None
    return None


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The one model a field holds (itself, or optional), else None."""
    if isinstance(annotation, type) and hasattr(annotation, "model_fields"):  # a pydantic model
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        models = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(models) == 1:
            return _model_of(models[0])
    return None
