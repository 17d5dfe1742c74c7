"""Phase 2 of issue 29: `factory/` by stage, and one installed namespace, `demofactory`.

    python tools/relayout.py            # apply (git mv + rewrites), then print what it did
    python tools/relayout.py --dry-run  # print what it would do, change nothing

What it does, in order (each step idempotent: a second run finds nothing left to do):

1. moves each module of factory/ named in MODULES to its stage's subpackage (`git mv`, so
   history follows), creating the subpackages' __init__.py files;
2. maps the wheel onto one namespace in pyproject.toml: `demofactory` is factory/, and the
   libraries are its subpackages (`demofactory.generators` is generators/, ...); the folders
   stay where they are; the `factory` console script points at the moved CLI;
3. rewrites every reference in code, tests, benchmarks, examples, tools and docs: imports
   (`from factory.sim import Scene` -> `from demofactory.simulation.scene import Scene`,
   `from factory import spec_docs` -> `from demofactory.specs import docs as spec_docs`),
   dotted names in strings and prose (`"factory.cli"`, `factory.sim.Scene`), and file paths
   (`factory/sim.py` -> `factory/simulation/scene.py`);
4. fills tests/project/test_layers.py's STAGE_ALLOWED (which stage may import which);
5. runs tools/join_split_comments.py over the tree, then `ruff check --fix` (import order)
   and `ruff format`.

The tables below are data: a module another branch added to factory/ meanwhile goes into
MODULES (the script refuses to run while a module of factory/ is not in it).
Deterministic: the same tree gives the same result; nothing depends on time or ordering of
the file system (every list is sorted).
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "demofactory"

# factory module (file stem) -> its place under factory/ (dotted, without "factory.").
# Stages: specs (what a spec says), simulation (the robosuite adapter, fast loop, render),
# robots (which robots, their repairs, mixed robots), seeds (load, annotate, script, collect,
# cross-robot), build (driver, worker, recorder, output folder, stores), robustness
# (divergence, ADR, calibration, shifted physics), train, cli. Names chosen so that no
# subpackage has the name of a module left beside it.
MODULES: dict[str, str] = {
    # stays at the top: the package's start-up and the error tree every stage shares
    "__init__": "__init__",
    "_gl": "_gl",
    "errors": "errors",
    # specs
    "spec": "specs.spec",
    "spec_sections": "specs.sections",
    "scene_spec": "specs.scene",
    "spec_docs": "specs.docs",
    "overrides": "specs.overrides",
    "adapters": "specs.adapters",
    "language": "specs.language",
    # simulation
    "sim": "simulation.scene",
    "fast_step": "simulation.fast_step",
    "render": "simulation.render",
    "physics": "simulation.physics",
    "scene_build": "simulation.scene_build",
    "planning": "simulation.planning",
    "mujoco_log": "simulation.mujoco_log",
    "fixtures": "simulation.fixtures",
    "grasp_frame": "simulation.grasp_frame",
    "resimulate": "simulation.resimulate",
    "stills": "simulation.stills",
    "mesh_detail": "simulation.mesh_detail",
    # robots
    "robots": "robots.support",
    "robot_repairs": "robots.repairs",
    "arm_fixes": "robots.arm_fixes",
    "gripper_fixes": "robots.gripper_fixes",
    "gripper_sign": "robots.gripper_sign",
    "embodiments": "robots.embodiments",
    # seeds
    "demos": "seeds.demos",
    "annotate": "seeds.annotate",
    "annotation_report": "seeds.annotation_report",
    "script": "seeds.script",
    "collect": "seeds.collect",
    "cross_robot": "seeds.cross_robot",
    "suggest": "seeds.suggest",
    "suggest_spec": "seeds.suggest_spec",
    "replay_check": "seeds.replay_check",
    "resolve": "seeds.resolve",
    # build
    "run": "build.run",
    "pipeline": "build.pipeline",
    "shard_records": "build.records",
    "recorder": "build.recorder",
    "output_dir": "build.output_dir",
    "shard_output": "build.shard_output",
    "stored_run": "build.stored_run",
    "worker_factory": "build.worker_factory",
    "seeds": "build.seed_dataset",
    "mixed_worker": "build.mixed_worker",
    "progress": "build.progress",
    "report": "build.report",
    "failures": "build.failures",
    "preview": "build.preview",
    "contact_sheet": "build.contact_sheet",
    "outputs": "outputs",  # the output rule every stage's commands follow: at the top
    "coverage": "build.coverage",
    "rebalance": "build.rebalance",
    "action_spaces": "build.action_spaces",
    # robustness
    "divergence": "robustness.divergence",
    "divergence_report": "robustness.divergence_report",
    "divergence_run": "robustness.divergence_run",
    "adr": "robustness.adr",
    "calibrate": "robustness.calibrate",
    "calibrate_report": "robustness.calibrate_report",
    "calibrate_run": "robustness.calibrate_run",
    "eval_physics": "robustness.eval_physics",
    # train
    "policy": "train.policy",
    "train_core": "train.core",
    "train_eval": "train.train_eval",
    "train_eval_config": "train.config",
    "train_eval_mixed": "train.mixed",
    "vla": "train.vla",
    "vla_train": "train.vla_train",
    # cli (one module for now; the split per verb group is a follow-up: see the report)
    "cli": "cli.main",
}

# The libraries: repository folder -> import name inside the namespace.
LIBRARIES: dict[str, str] = {
    "generators": f"{NAMESPACE}.generators",
    "shards": f"{NAMESPACE}.shards",
    "cluster": f"{NAMESPACE}.cluster",
    "fileio": f"{NAMESPACE}.fileio",
}

# Which stage may import which (besides itself and the top: errors, _gl): the direction
# tests/project/test_layers.py then keeps. A stage below never imports one above.
STAGE_ALLOWED: dict[str, set[str]] = {
    "specs": set(),
    "robots": {"specs"},
    "simulation": {"specs", "robots"},
    "seeds": {"specs", "robots", "simulation"},
    "robustness": {"specs", "robots", "simulation", "seeds", "build"},
    "build": {"specs", "robots", "simulation", "seeds", "robustness"},
    "train": {"specs", "robots", "simulation", "seeds", "build", "robustness"},
    "cli": {"specs", "robots", "simulation", "seeds", "build", "robustness", "train"},
}

CONSOLE_SCRIPT = f'factory = "{NAMESPACE}.cli.main:main"'
REWRITE_DIRS = ("factory", "generators", "shards", "cluster", "fileio", "tests", "benchmarks")
REWRITE_MORE = ("examples", "tools", "docs")
REWRITE_FILES = ("README.md", "Makefile", "mkdocs.yml", "cluster/Dockerfile", "cluster/rayjob.yaml")
SKIP = {Path("tools/relayout.py")}  # this script names the old layout on purpose
WHEEL_TEST = Path("tests/project/test_wheel.py")


def log(actions: list[str], text: str) -> None:
    actions.append(text)


# --------------------------------------------------------------- 1. moves


def check_table() -> None:
    present = sorted(p.stem for p in (ROOT / "factory").glob("*.py"))
    missing = [stem for stem in present if stem not in MODULES]
    if missing:
        sys.exit(
            f"tools/relayout.py: factory/{missing[0]}.py is not in MODULES; add every module "
            f"({', '.join(missing)}) to the table at the top of the script"
        )


def move_modules(dry: bool, actions: list[str]) -> None:
    for stem, target in sorted(MODULES.items()):
        source = ROOT / "factory" / f"{stem}.py"
        dest = ROOT / "factory" / (target.replace(".", "/") + ".py")
        if source == dest or not source.exists():
            continue
        log(actions, f"move factory/{stem}.py -> {dest.relative_to(ROOT)}")
        if not dry:
            dest.parent.mkdir(parents=True, exist_ok=True)
            _git("mv", str(source.relative_to(ROOT)), str(dest.relative_to(ROOT)))
    for package in sorted({t.split(".")[0] for t in MODULES.values() if "." in t}):
        init = ROOT / "factory" / package / "__init__.py"
        if not init.exists():
            log(actions, f"create {init.relative_to(ROOT)}")
            if not dry:
                init.parent.mkdir(parents=True, exist_ok=True)
                init.write_text(f'"""The {package} stage of the factory (see docs/layout.md)."""\n')
                _git("add", str(init.relative_to(ROOT)))


def _git(*args: str) -> None:
    subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True)


# --------------------------------------------------------------- 2. pyproject


def packages_list() -> list[str]:
    """Every package the wheel holds, as import names (folders with an __init__.py)."""
    names = []
    for folder, name in [("factory", NAMESPACE), *LIBRARIES.items()]:
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            rel = init.parent.relative_to(ROOT / folder).parts
            names.append(".".join([name, *rel]))
    return sorted(names)


def rewrite_pyproject(dry: bool, actions: list[str]) -> None:
    path = ROOT / "pyproject.toml"
    text = path.read_text()
    mapping = {NAMESPACE: "factory", **{v: k for k, v in LIBRARIES.items()}}
    table = ", ".join(f'"{k}" = "{v}"' for k, v in sorted(mapping.items()))
    packages = ",\n".join(f'    "{p}"' for p in packages_list())
    block = (
        "[tool.setuptools]\n"
        "# One namespace: the wheel installs demofactory/ only; the folders stay where they are.\n"
        f"package-dir = {{{table}}}\n"
        f"packages = [\n{packages},\n]\n"
    )
    new = re.sub(r"\[tool\.setuptools\.packages\.find\]\ninclude = \[[^\]]*\]\n", block, text)
    new = re.sub(
        r"\[tool\.setuptools\]\n(?:#[^\n]*\n)?package-dir = \{[^}]*\}\npackages = \[[^\]]*\]\n",
        block,
        new,
    )
    new = re.sub(r'^factory = "[^"]*"$', CONSOLE_SCRIPT, new, flags=re.M)
    if new != text:
        log(actions, "pyproject.toml: package-dir maps demofactory, console script, packages")
        if not dry:
            path.write_text(new)


# --------------------------------------------------------------- 3. references


def _old_modules() -> dict[str, str]:
    """Old dotted module name -> new one, longest first (so `factory.spec_docs` is matched
    before `factory.spec`)."""
    names = {}
    for stem, target in MODULES.items():
        if stem == "__init__":
            continue
        names[f"factory.{stem}"] = f"{NAMESPACE}.{target}"
    return dict(sorted(names.items(), key=lambda kv: -len(kv[0])))


def _dotted_pattern(names) -> re.Pattern:
    alternatives = "|".join(re.escape(n) for n in names)
    return re.compile(rf"(?<![\w.])({alternatives})(?![\w])")


def rewrite_from_factory_imports(text: str) -> str:
    """`from factory import a, b as c` of modules: one import per new parent, aliased where the
    module's file name changed (so the code's names stay)."""

    def one(match: re.Match) -> str:
        indent, body, comment = match.group(1), match.group(2), match.group(3) or ""
        inner = body.strip().strip("()").replace("\n", " ")
        names = [n.strip() for n in inner.split(",") if n.strip()]
        lines = []
        for entry in names:
            name, _, alias = (part.strip() for part in entry.partition(" as "))
            target = MODULES.get(name)
            if target is None:  # a name of factory/__init__.py itself
                lines.append(f"{indent}from {NAMESPACE} import {entry}")
                continue
            parent, _, leaf = f"{NAMESPACE}.{target}".rpartition(".")
            bound = alias or name
            lines.append(
                f"{indent}from {parent} import {leaf}" + (f" as {bound}" if bound != leaf else "")
            )
        if comment:
            lines[-1] += comment
        return "\n".join(lines)

    pattern = re.compile(
        r"^([ \t]*)from factory import (\([^)]*\)|[^\n#]+?)([ \t]*#[^\n]*)?$", re.M
    )
    return pattern.sub(one, text)


def rewrite_prose(text: str) -> str:
    """Module names in text that is not code (docs, comments, strings): known modules only, so
    that `cluster.yaml` or `shards.tar` stay as they are."""
    modules, libraries = _old_modules(), _library_modules()
    text = _dotted_pattern(modules).sub(lambda m: modules[m.group(1)], text)
    return _dotted_pattern(libraries).sub(lambda m: libraries[m.group(1)], text)


def _code_name(dotted: str) -> str:
    """A dotted name in an import statement, or used through `import a.b`: its new name."""
    top = dotted.split(".")[0]
    if top == "factory":
        for old, new in _old_modules().items():
            if dotted == old or dotted.startswith(old + "."):
                return new + dotted[len(old) :]
        return NAMESPACE + dotted[len("factory") :]
    if top in LIBRARIES:
        return f"{LIBRARIES[top]}{dotted[len(top) :]}"
    return dotted


def _fstring_outside_braces(token: str) -> str:
    """An f-string's literal parts rewritten as prose; its {expressions} left alone (a variable
    may be called `cluster`)."""
    parts = re.split(r"(\{[^{}]*\})", token)
    return "".join(p if p.startswith("{") else rewrite_prose(p) for p in parts)


_LINE_STARTS = (tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING)


def rewrite_python(text: str) -> str:
    """Imports, names used through `import a.b`, and module names in strings and comments;
    other code is left alone (an attribute such as `cluster.address` is no module)."""
    text = rewrite_from_factory_imports(text)
    tops = {"factory", *LIBRARIES}
    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    bound = set()  # names bound by `import a.b` (a in tops): `a.b.c` in code is then a module
    for i, tok in enumerate(tokens):
        if tok.type == tokenize.NAME and tok.string == "import" and i + 1 < len(tokens):
            if i == 0 or tokens[i - 1].type in _LINE_STARTS:
                nxt = tokens[i + 1]
                if nxt.type == tokenize.NAME and nxt.string in tops:
                    bound.add(nxt.string)
    offsets = [0]
    for line in text.splitlines(keepends=True):
        offsets.append(offsets[-1] + len(line))

    def at(pos: tuple[int, int]) -> int:
        return offsets[pos[0] - 1] + pos[1]

    edits: list[tuple[int, int, str]] = []
    i, head = 0, None  # head: the first name of the statement the token is in
    while i < len(tokens):
        tok = tokens[i]
        if tok.type in (tokenize.NEWLINE, tokenize.NL):
            head = None
        elif head is None and tok.type == tokenize.NAME:
            head = tok.string
        if tok.type == tokenize.COMMENT:
            edits.append((at(tok.start), at(tok.end), rewrite_prose(tok.string)))
        elif tok.type == tokenize.STRING:
            is_f = re.match(r"^[rbuRBU]*[fF]", tok.string) is not None
            new = _fstring_outside_braces(tok.string) if is_f else rewrite_prose(tok.string)
            edits.append((at(tok.start), at(tok.end), new))
        elif tok.type == tokenize.NAME and tok.string in tops:
            previous = tokens[i - 1] if i else None
            if previous is not None and previous.type == tokenize.OP and previous.string == ".":
                i += 1
                continue  # an attribute: obj.shards
            j = i
            while (
                j + 2 < len(tokens)
                and tokens[j + 1].type == tokenize.OP
                and tokens[j + 1].string == "."
                and tokens[j + 2].type == tokenize.NAME
            ):
                j += 2
            dotted = "".join(t.string for t in tokens[i : j + 1])
            after = previous.string if previous is not None else ""
            module_slot = head == "import" or (head == "from" and after == "from")
            if module_slot or (tok.string in bound and head not in ("import", "from")):
                new = _code_name(dotted)
                if new != dotted:
                    edits.append((at(tok.start), at(tokens[j].end), new))
            i = j + 1
            continue
        i += 1
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text


def rewrite_text(text: str, is_python: bool) -> str:
    text = rewrite_python(text) if is_python else rewrite_prose(text)
    # file paths: factory/sim.py -> factory/simulation/scene.py (the folders stay)
    for stem, target in MODULES.items():
        new = target.replace(".", "/")
        if new != stem:
            text = re.sub(rf"(?<![\w/])factory/{re.escape(stem)}\.py\b", f"factory/{new}.py", text)
    return text


def _library_modules() -> dict[str, str]:
    """Each library module's dotted name -> its name in the namespace (`shards.loader` ->
    `demofactory.shards.loader`), longest first; only modules, so prose such as
    `cluster.yaml` is left alone."""
    names = {}
    for folder, name in LIBRARIES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if parts:
                names[".".join([folder, *parts])] = ".".join([name, *parts])
    return dict(sorted(names.items(), key=lambda kv: -len(kv[0])))


def _keep_marked(old: str, new: str) -> str:
    """`new`, but each line of `old` marked `relayout: keep` as it was (same line count)."""
    old_lines, new_lines = old.split("\n"), new.split("\n")
    if len(old_lines) != len(new_lines):
        return new
    return "\n".join(
        o if "relayout: keep" in o else n for o, n in zip(old_lines, new_lines, strict=True)
    )


# Literal replacements the general rules cannot infer: (file, old, new).
SPECIAL: tuple[tuple[str, str, str], ...] = (
    (
        "tests/project/test_error_tree.py",
        'PACKAGES = ("factory", "generators", "shards", "cluster", "fileio")',
        f'PACKAGES = ("{NAMESPACE}",)  # the libraries are its subpackages',
    ),
)


def _files_to_rewrite() -> list[Path]:
    files = []
    for folder in (*REWRITE_DIRS, *REWRITE_MORE):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in (".py", ".md", ".yaml", ".yml", ".toml", ".sh", ".txt"):
                files.append(path)
    files += [ROOT / f for f in REWRITE_FILES if (ROOT / f).exists()]
    return [f for f in files if f.relative_to(ROOT) not in SKIP and "/." not in str(f)]


def rewrite_references(dry: bool, actions: list[str]) -> None:
    for path in _files_to_rewrite():
        text = path.read_text()
        new = _keep_marked(text, rewrite_text(text, path.suffix == ".py"))
        for name, old, replacement in SPECIAL:
            if path.relative_to(ROOT) == Path(name):
                new = new.replace(old, replacement)
        if new != text:
            log(actions, f"rewrite {path.relative_to(ROOT)}")
            if not dry:
                path.write_text(new)


# --------------------------------------------------------------- 4. stage directions


def fill_stage_table(dry: bool, actions: list[str]) -> None:
    path = ROOT / "tests" / "test_layers.py"
    text = path.read_text()
    body = "".join(
        f'    "{stage}": {{{", ".join(repr(s) for s in sorted(allowed))}}},\n'
        if allowed
        else f'    "{stage}": set(),\n'
        for stage, allowed in STAGE_ALLOWED.items()
    )
    new = re.sub(
        r"^STAGE_ALLOWED: dict\[str, set\[str\]\] = \{(?:\}|\n(?:    [^\n]*\n)*\})\n",
        "STAGE_ALLOWED: dict[str, set[str]] = {\n" + body + "}\n",
        text,
        count=1,
        flags=re.M,
    )
    current = re.search(r"^STAGE_ALLOWED: dict\[str, set\[str\]\] = (\{.*?^\})$", text, re.M | re.S)
    if current is not None and eval(current.group(1), {"set": set}) == STAGE_ALLOWED:  # noqa: S307
        return  # filled already (ruff may have laid it out its own way)
    if new != text:
        log(actions, "tests/project/test_layers.py: STAGE_ALLOWED filled")
        if not dry:
            path.write_text(new)


# --------------------------------------------------------------- 5. tidy


LINE_LENGTH = 100
DIAGRAM = re.compile(r"[─│┌┐└┘├┤►◄▼▲]")  # drawn lines are left for a person to redraw


def _docstring_lines(tree: ast.AST) -> set[int]:
    lines = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                lines.update(range(value.lineno, value.end_lineno + 1))
    return lines


def _split(line: str, indent: str, prefix: str = "") -> list[str]:
    """`line` as lines of at most LINE_LENGTH, broken at spaces, continued at indent + prefix."""
    out = []
    while len(line) > LINE_LENGTH:
        cut = line.rfind(" ", len(indent) + len(prefix) + 1, LINE_LENGTH + 1)
        if cut <= 0:
            break
        out.append(line[:cut].rstrip())
        line = indent + prefix + line[cut + 1 :].lstrip()
    return [*out, line]


def wrap_long_lines(path: Path) -> int:
    """Break comment and docstring lines the longer names pushed past LINE_LENGTH; returns how
    many long lines are left (code, drawn diagrams)."""
    text = path.read_text()
    try:
        docstrings = _docstring_lines(ast.parse(text))
    except SyntaxError:
        return 0
    out, left = [], 0
    for number, line in enumerate(text.split("\n"), start=1):
        if len(line) <= LINE_LENGTH or DIAGRAM.search(line):
            left += len(line) > LINE_LENGTH
            out.append(line)
            continue
        stripped = line.lstrip()
        indent = line[: len(line) - len(stripped)]
        if stripped.startswith("#"):
            out += _split(line, indent, "# ")
        elif number in docstrings:
            body_indent = indent if not stripped.startswith(('"""', 'r"""')) else indent
            out += _split(line, body_indent)
        else:
            left += 1
            out.append(line)
    new = "\n".join(out)
    if new != text:
        path.write_text(new)
    return left


def tidy(dry: bool, actions: list[str]) -> None:
    if dry:
        log(actions, "would run tools/join_split_comments.py, ruff check --fix, ruff format")
        return
    python = sys.executable
    subprocess.run([python, "tools/join_split_comments.py"], cwd=ROOT, check=True)
    left = {}
    for path in _files_to_rewrite():
        if path.suffix == ".py":
            count = wrap_long_lines(path)
            if count:
                left[str(path.relative_to(ROOT))] = count
    for name, count in sorted(left.items()):
        log(actions, f"left for a person: {count} line(s) over {LINE_LENGTH} columns in {name}")
    ruff = Path(python).parent / "ruff"
    ruff_cmd = [str(ruff)] if ruff.exists() else [python, "-m", "ruff"]
    subprocess.run([*ruff_cmd, "check", "--fix", "-q", "--select", "I,F401", "."], cwd=ROOT)
    subprocess.run([*ruff_cmd, "format", "-q", "."], cwd=ROOT, check=True)
    log(actions, "ran join_split_comments, ruff check --fix (imports), ruff format")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="print what it would do")
    args = parser.parse_args(argv)
    check_table()
    actions: list[str] = []
    move_modules(args.dry_run, actions)
    rewrite_pyproject(args.dry_run, actions)
    rewrite_references(args.dry_run, actions)
    fill_stage_table(args.dry_run, actions)
    if actions:
        tidy(args.dry_run, actions)
    for line in actions:
        print(("would " if args.dry_run else "") + line)
    if not actions:
        print("nothing to do: the tree already has the new layout")
    return 0


if __name__ == "__main__":
    sys.exit(main())
