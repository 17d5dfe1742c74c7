"""The spec's documentation, generated from the pydantic models' field descriptions.

    factory spec-help                       # top-level fields, one line each
    factory spec-help generation            # that section's fields: type, default, meaning
    factory spec-help generation.transit    # one field in full (allowed values, bounds)
    factory spec-help --write               # schema.json, docs/spec_reference.md's tables

The same walk over the models makes all four, so the help, the JSON Schema that editors use
(`# yaml-language-server: $schema=./schema.json` atop each spec) and the reference's tables cannot
disagree; tests/specs/test_spec_schema.py fails when the committed files drift from the models.
"""

from __future__ import annotations

import json
import re
import textwrap
import types
import typing
from dataclasses import dataclass
from pathlib import Path

from demofactory.errors import UserError
from demofactory.generators.predicates import COMBINATORS, PREDICATE_KINDS, parse_predicate
from demofactory.specs.spec import SceneSpec
from pydantic import BaseModel
from pydantic.fields import FieldInfo

SCHEMA_FILE = Path("scene_specs/schema.json")
REFERENCE_FILE = Path("docs/spec_reference.md")  # the docs page holding the tables
SCHEMA_LINE = "# yaml-language-server: $schema=./schema.json"
WRITE_COMMAND = "factory spec-help --write"
# Not a model field: `demofactory.specs.spec.load_raw_spec` resolves it before validation.
EXTENDS_DOC = (
    "Another spec file, relative to this one, that this file is merged over: mappings key by "
    "key, lists and scalars replaced whole (e.g. extends: stack.yaml). Resolved before "
    "validation; the dataset's fingerprint is the merged spec's."
)
# Top-level fields a `scene:` section fills in when a spec leaves them out (with task.env).
SCENE_FILLS = ("objects",)
# What each predicate of the registry means, with an example call; the reference's table and
# `factory spec-help subtasks.ends_when` come from here (a test checks that every kind has one).
PREDICATE_DOCS: dict[str, tuple[str, str]] = {
    "grasped": (
        "grasped(a)",
        "both finger pads touch `a` and the hand is commanded closed (in a demo: its recorded "
        "gripper command)",
    ),
    "lifted": ("lifted(a, 0.04)", "`a` is 0.04 m above where the episode started it"),
    "on_top": ("on_top(a, b)", "`a` rests on `b`: above it, touching it, not held"),
    "near": ("near(a, b, 0.05)", "the centres of `a` and `b` are closer than 0.05 m"),
    "contact": ("contact(a, b)", "any collision geom of `a` touches one of `b`"),
    "touching": (
        "touching(hand, handle)",
        "a collision geom of one is within 3 mm of one of the other (contact, or nearly); either "
        "may be `hand`, the robot's gripper (palm, fingers, pads): a push or a press, no grasp "
        "needed",
    ),
    "inside": (
        "inside(a, bin)",
        "`a`'s centre is in the container's cavity: over its floor (its widest geom), within "
        "its walls, below its rim + 5 cm, in the container's own frame",
    ),
    "on_peg": (
        "on_peg(nut, peg, 0.03)",
        "`nut`'s centre is within 0.03 m of the peg's axis and below the peg's top",
    ),
    "opened": (
        "opened(door, 0.3)",
        "the joint moving `door` (its own or its nearest ancestor's hinge or slide) moved 0.3 "
        "(rad or m) from its start, whatever moved it (a grasp, a push)",
    ),
    "joint": ("joint(handle, 0.5, 3.2)", "that joint's position lies in [0.5, 3.2] (rad or m)"),
    "success": ("success", "the task's success (`task.success`, else robosuite's own check)"),
    "all": ("all(p, q, ...)", "every one of the predicates holds"),
    "any": ("any(p, q, ...)", "at least one of them holds"),
    "not": ("not(p)", "`p` does not hold"),
}


@dataclass(frozen=True)
class FieldDoc:
    """One field as the docs show it: dotted path, type and default as text, its description."""

    path: str
    type: str
    default: str
    description: str
    allowed: tuple[str, ...]  # Literal values, if any
    bounds: tuple[str, ...]  # e.g. ">= 1", "multiple of 8"
    section: type[BaseModel] | None  # the model inside the field's type, if any


def field_docs(model: type[BaseModel] = SceneSpec, prefix: str = "") -> list[FieldDoc]:
    """The fields of `model` in declaration order (with `extends` first at the top level)."""
    docs = [_extends_doc()] if model is SceneSpec and not prefix else []
    for name, info in model.model_fields.items():
        docs.append(_doc(f"{prefix}{name}", info))
    return docs


def sections(model: type[BaseModel] = SceneSpec, prefix: str = "") -> list[FieldDoc]:
    """Every field holding a section (a model), depth first: task, placement.objects, ..."""
    found = []
    for doc in field_docs(model, prefix):
        if doc.section is not None:
            found.append(doc)
            found += sections(doc.section, doc.path + ".")
    return found


def lookup(path: str) -> FieldDoc:
    """The field at a dotted path (`generation.transit`), or a UserError naming the valid ones."""
    model: type[BaseModel] | None = SceneSpec
    prefix, doc = "", None
    for part in path.split("."):
        docs = field_docs(model, prefix) if model is not None else []
        doc = next((d for d in docs if d.path == prefix + part), None)
        if doc is None:
            where = f"{prefix[:-1]} has no fields" if model is None else "expected one of: "
            names = ", ".join(d.path for d in docs)
            raise UserError(f"spec-help: unknown field {path!r} ({where}{names})")
        model, prefix = doc.section, doc.path + "."
    return doc


def spec_help(path: str | None = None) -> str:
    """The text `factory spec-help [FIELD]` prints."""
    if not path:
        rows = []
        for doc in field_docs():
            text = f"{doc.path:<13} {_first_sentence(doc.description)}"
            rows += textwrap.wrap(text, 98, initial_indent="  ", subsequent_indent=" " * 16)
        return "\n".join(
            [
                "Scene spec sections and fields; `factory spec-help FIELD` shows one with its type",
                "and default, e.g. `factory spec-help generation`, `... generation.transit`.",
                "JSON Schema for editors: scene_specs/schema.json.",
                "",
                *rows,
            ]
        )
    doc = lookup(path)
    lines = [f"{doc.path}: {doc.type}; {_default_text(doc)}"]
    lines += textwrap.wrap(doc.description, 96, initial_indent="  ", subsequent_indent="  ")
    if doc.allowed:
        lines.append(f"  allowed values: {', '.join(doc.allowed)}")
    if doc.bounds:
        lines.append(f"  bounds: {', '.join(doc.bounds)}")
    if doc.path.endswith(("ends_when", "success")) and doc.type.startswith("str"):
        lines += ["", "Predicates:"]
        for example, text in _predicate_rows():
            lines += textwrap.wrap(
                f"{example:<26} {text}", 98, initial_indent="  ", subsequent_indent=" " * 29
            )
    if doc.section is not None:
        lines += ["", f"Fields of {doc.path}:", *_listing(field_docs(doc.section, doc.path + "."))]
    return "\n".join(lines)


def json_schema() -> dict:
    """SceneSpec's JSON Schema for editors, with the loader's `extends` key.

    A spec with `extends` may leave out what its parent states, so the top-level fields are
    required only in a spec without it; and one with `scene:` may leave out what that section
    fills in before validation (`demofactory.specs.scene.fill_from_scene`: objects, task.env).
    """
    schema = SceneSpec.model_json_schema()
    schema["properties"] = {
        "extends": {"type": "string", "title": "Extends", "description": EXTENDS_DOC},
        **schema["properties"],
    }
    required = [name for name in schema.pop("required", []) if name not in SCENE_FILLS]
    task = schema["$defs"]["TaskSpec"]
    task["required"] = [name for name in task.get("required", []) if name != "env"]
    without_scene = {"required": list(SCENE_FILLS), "properties": {"task": {"required": ["env"]}}}
    schema["if"] = {"required": ["extends"]}
    schema["else"] = {"required": required, "if": {"required": ["scene"]}, "else": without_scene}
    return schema


def schema_text() -> str:
    return json.dumps(json_schema(), indent=2) + "\n"


def reference_blocks() -> dict[str, str]:
    """Marker name -> the reference page's text generated between `<!-- NAME:begin -->` and its
    end."""
    spec = [_table(field_docs())]
    for doc in sections():
        spec += ["", f"**`{doc.path}`** ({doc.type}): {_md(doc.description)}", ""]
        spec.append(_table(field_docs(doc.section, doc.path + ".")))
    rows = ["| predicate | holds when |", "|---|---|"]
    rows += [f"| `{example}` | {_md(text)} |" for example, text in _predicate_rows()]
    return {"spec-tables": "\n".join(spec), "predicate-table": "\n".join(rows)}


def render_reference(text: str) -> str:
    """`text` (the reference page) with each generated block replaced; a UserError if a marker
    is gone."""
    for name, body in reference_blocks().items():
        begin, end = _markers(name)
        if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
            raise UserError(f"{REFERENCE_FILE}: expected one {begin} ... {end} pair")
        head, rest = text.split(begin)
        text = f"{head}{begin}\n{body}\n{end}{rest.split(end, 1)[1]}"
    return text


def write_docs(root: Path) -> list[Path]:
    """Write scene_specs/schema.json and the reference page's generated blocks under `root`."""
    schema, reference = root / SCHEMA_FILE, root / REFERENCE_FILE
    if not schema.parent.is_dir() or not reference.is_file():
        raise UserError(
            f"{root}: --write: expected the repository root (with {SCHEMA_FILE.parent}/ and "
            f"{REFERENCE_FILE}); run it there"
        )
    schema.write_text(schema_text())
    reference.write_text(render_reference(reference.read_text()))
    return [schema, reference]


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:begin (generated: {WRITE_COMMAND}) -->", f"<!-- {name}:end -->"


def _predicate_rows() -> list[tuple[str, str]]:
    rows = []
    for name in [*PREDICATE_KINDS, *COMBINATORS]:
        if name not in PREDICATE_DOCS:
            raise KeyError(
                f"predicate {name!r} has no entry in demofactory.specs.docs.PREDICATE_DOCS"
            )
        rows.append(PREDICATE_DOCS[name])
    return rows


def check_predicate_docs() -> list[str]:
    """Problems with PREDICATE_DOCS: kinds it misses or has extra, examples that do not parse."""
    names = [*PREDICATE_KINDS, *COMBINATORS]
    problems = [f"{n}: no entry" for n in names if n not in PREDICATE_DOCS]
    problems += [f"{n}: not a predicate" for n in PREDICATE_DOCS if n not in names]
    for name, (example, _) in PREDICATE_DOCS.items():
        if name in COMBINATORS:  # all(p, q, ...) names no real predicate: only its head counts
            ok = example.startswith(f"{name}(")
        else:
            ok = name in PREDICATE_KINDS and parse_predicate(example).name == name
        if not ok:
            problems.append(f"{name}: example {example!r} is not a call of {name}")
    return problems


def _first_sentence(text: str) -> str:
    return re.split(r"(?<=[a-z)])\. (?=[A-Z])", text, maxsplit=1)[0].removesuffix(".") + "."


def _listing(docs: list[FieldDoc]) -> list[str]:
    lines = []
    for doc in docs:
        name = doc.path.rsplit(".", 1)[-1]
        lines.append(f"  {name:<26} {doc.type}; {_default_text(doc)}")
        lines += textwrap.wrap(
            doc.description, 92, initial_indent=" " * 6, subsequent_indent=" " * 6
        )
    return lines


def _table(docs: list[FieldDoc]) -> str:
    rows = ["| field | type | default | meaning |", "|---|---|---|---|"]
    for doc in docs:
        name = doc.path.rsplit(".", 1)[-1]
        kind = _md(doc.type + "".join(f", {b}" for b in doc.bounds))
        rows.append(f"| `{name}` | {kind} | {_md(doc.default)} | {_md(doc.description)} |")
    return "\n".join(rows)


def _md(text: str) -> str:
    # A table cell: `|` would end the cell, and `<name>` would read as an HTML tag.
    return text.replace("|", "\\|").replace("<", "&lt;")


def _default_text(doc: FieldDoc) -> str:
    return "required" if doc.default == "required" else f"default: {doc.default}"


def _extends_doc() -> FieldDoc:
    return FieldDoc("extends", "str or null", "null", EXTENDS_DOC, (), (), None)


def _doc(path: str, info: FieldInfo) -> FieldDoc:
    annotation = info.annotation
    return FieldDoc(
        path=path,
        type=_type_text(annotation),
        default=_default(info),
        description=info.description or "",
        allowed=tuple(str(v) for v in _literals(annotation)),
        bounds=tuple(_bounds(info)),
        section=_model_in(annotation),
    )


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    if info.default_factory is not None:
        value = info.default_factory()
    else:
        value = info.default
    if isinstance(value, BaseModel):
        return "its fields' defaults"
    return _flow(value)


def _flow(value) -> str:
    """A value as YAML flow text: [0.0, 0.0], {a: 1}, null, true."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    return str(value)


def _bounds(info: FieldInfo) -> list[str]:
    words = {
        "ge": ">= {}",
        "gt": "> {}",
        "le": "<= {}",
        "lt": "< {}",
        "multiple_of": "multiple of {}",
        "min_length": "at least {} long",
        "max_length": "at most {} long",
        "pattern": "matching {}",
    }
    found = []
    for item in info.metadata:
        for attr, text in words.items():
            value = getattr(item, attr, None)
            if value is not None:
                found.append(text.format(value))
    return found


def _args(annotation) -> tuple:
    return typing.get_args(annotation)


def _is_union(annotation) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType)


def _type_text(annotation) -> str:
    origin = typing.get_origin(annotation)
    if annotation is type(None):
        return "null"
    if _is_union(annotation):
        return " or ".join(_type_text(a) for a in _args(annotation))
    if origin is typing.Literal:
        return "one of: " + ", ".join(str(v) for v in _args(annotation))
    if origin is typing.Annotated:
        return _type_text(_args(annotation)[0])
    if origin is tuple:
        args = _args(annotation)
        if len(args) == 2 and args[1] is Ellipsis:
            return f"[{_type_text(args[0])}, ...]"
        return "[" + ", ".join(_type_text(a) for a in args) + "]"
    if origin is list:
        return f"list of {_grouped(_args(annotation)[0])}"
    if origin is dict:
        key, value = _args(annotation)
        return f"mapping {_type_text(key)} -> {_grouped(value)}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "mapping"
    if isinstance(annotation, type):
        return {"str": "str", "int": "int", "float": "number", "bool": "bool"}.get(
            annotation.__name__, annotation.__name__
        )
    return str(annotation)


def _grouped(annotation) -> str:
    text = _type_text(annotation)
    return f"({text})" if " " in text else text


def _literals(annotation) -> list:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return list(_args(annotation))
    if _is_union(annotation) or origin is list:
        return [value for arg in _args(annotation) for value in _literals(arg)]
    if origin is typing.Annotated:
        return _literals(_args(annotation)[0])
    return []


def _model_in(annotation) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in _args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None
