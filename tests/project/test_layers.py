"""Imports go one way: `factory/` (the orchestrator) uses the libraries, never the reverse.

    factory ──► generators ──► shards.fileio   (the texture bank writes files as datasets do:
       │                                         that module of shards/, nothing else of it)
       ├──────► shards                         (the dataset format; shards/fileio.py, atomic
       │                                         writes, JSON, sha256, imports nothing)
       └──► cluster                            (handed what to run; imports no other package)

Every .py file of the libraries is parsed (not imported): imports at any depth count, those
inside functions and under `if TYPE_CHECKING:` included, and so do module names given to
`importlib.import_module` / `__import__` as string literals. A failure names file:line.

Modules, too: no module of any package reaches itself through imports (at any depth, as above),
so a function-local import is never what keeps a cycle from failing at start-up.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]
LIBRARIES = ("generators", "shards", "cluster")
PACKAGES = ("factory", *LIBRARIES)
# import name -> repository folder, as the wheel maps them (pyproject's package-dir); empty when
# each folder is imported under its own name.
PACKAGE_DIR: dict[str, str] = (
    tomllib.loads((ROOT / "pyproject.toml").read_text())
    .get("tool", {})
    .get("setuptools", {})
    .get("package-dir", {})
)


def folder_of(module: str) -> str:
    """The repository folder holding `module` (an import name, or a folder-based dotted name)."""
    for name in sorted(PACKAGE_DIR, key=len, reverse=True):
        if module == name or module.startswith(name + "."):
            return PACKAGE_DIR[name]
    return module.split(".")[0]


def import_name(dotted: str) -> str:
    """A folder-based dotted name (`demofactory.specs.spec`) as it is imported (the same, unless
    mapped)."""
    top, _, rest = dotted.partition(".")
    for name, folder in sorted(PACKAGE_DIR.items(), key=lambda kv: len(kv[0])):
        if folder == top:
            return f"{name}.{rest}" if rest else name
    return dotted


# What each library may import of the project's packages (itself always): a library, or one
# module of it ("shards.fileio": that module, nothing else of shards/).
ALLOWED = {
    "generators": {"shards.fileio"},  # the texture bank writes and checks files as datasets do
    "shards": set(),  # the dataset format: a reader needs nothing else
    "cluster": set(),  # Ray plumbing: it is handed what to run
}
# Modules another library may import: they import nothing of the project's packages.
STANDALONE = ("shards/fileio.py",)


# factory/'s stages (its subpackages) -> the stages each may import (the top: errors, _gl,
# outputs, always). The one table of them.
STAGE_ALLOWED: dict[str, set[str]] = {
    "specs": set(),
    "robots": {"specs"},
    "simulation": {"robots", "specs"},
    "seeds": {"robots", "simulation", "specs"},
    "robustness": {"build", "robots", "seeds", "simulation", "specs"},
    "build": {"robots", "robustness", "seeds", "simulation", "specs"},
    "train": {"build", "robots", "robustness", "seeds", "simulation", "specs"},
    "cli": {"build", "robots", "robustness", "seeds", "simulation", "specs", "train"},
}


def imported_modules(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, absolute module name) for every import in `path`, at any depth."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.append((node.lineno, node.module or ""))
        elif isinstance(node, ast.ImportFrom):  # relative: resolved against the file's package
            package = path.relative_to(root).parent.parts
            base = [*package[: len(package) - node.level + 1], *filter(None, [node.module])]
            found += [(node.lineno, ".".join([*base, alias.name])) for alias in node.names]
        elif isinstance(node, ast.Call) and _is_dynamic_import(node.func):
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.append((node.lineno, first.value))
    return sorted(found)


def _is_dynamic_import(func: ast.expr) -> bool:
    if isinstance(func, ast.Name):
        return func.id in ("__import__", "import_module")
    return isinstance(func, ast.Attribute) and func.attr == "import_module"


def _files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def folder_dotted(module: str) -> str:
    """An import name as its folder-based dotted name (`demofactory.shards.fileio` ->
    `shards.fileio`)."""
    for name in sorted(PACKAGE_DIR, key=len, reverse=True):
        if module == name or module.startswith(name + "."):
            return PACKAGE_DIR[name] + module[len(name) :]
    return module


def _allows(allowed: set[str], module: str) -> bool:
    dotted = folder_dotted(module)
    return any(dotted == a or dotted.startswith(a + ".") for a in allowed)


def _violations(library: str) -> list[str]:
    allowed = {library, *ALLOWED[library]}
    bad = []
    for path in _files(library):
        for line, module in imported_modules(path):
            if folder_of(module) in PACKAGES and not _allows(allowed, module):
                bad.append(f"{path.relative_to(ROOT)}:{line}: imports {module}")
    return bad


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_library_imports_nothing_of_factory_nor_of_a_library_above_it(library):
    assert _files(library), f"no .py files under {library}/"
    bad = _violations(library)
    assert not bad, (
        f"{library}/ must not import these (see tests/project/test_layers.py):\n" + "\n".join(bad)
    )


def test_the_allowed_library_imports_have_no_cycle():
    # generators -> shards.fileio is allowed, so shards -> generators must not be (and so on).
    for library, uses in ALLOWED.items():
        for other in uses:
            top = other.split(".")[0]
            assert not _allows(ALLOWED[top], library), f"{library} <-> {other} would be a cycle"


@pytest.mark.parametrize("module", STANDALONE)
def test_a_module_other_libraries_may_import_imports_nothing_of_the_project(module):
    found = [
        f"{module}:{line}: imports {name}"
        for line, name in imported_modules(ROOT / module)
        if folder_of(name) in PACKAGES
    ]
    assert not found, "\n".join(found)


def test_the_checker_allows_one_module_and_not_its_package():
    assert _allows({"shards.fileio"}, "demofactory.shards.fileio")
    assert not _allows({"shards.fileio"}, "demofactory.shards")  # `from demofactory.shards import`
    assert not _allows({"shards.fileio"}, "demofactory.shards.writer")
    assert not _allows({"shards.fileio"}, "demofactory.shards.fileio_extra")
    assert _allows({"shards"}, "demofactory.shards.writer")


def test_the_checker_sees_every_kind_of_import(tmp_path):
    source = tmp_path / "generators" / "probe.py"
    source.parent.mkdir()
    source.write_text(
        "import demofactory.specs.spec\n"
        "from factory import cli\n"
        "def f():\n"
        "    from demofactory.errors import UserError\n"
        "    import importlib\n"
        "    importlib.import_module('demofactory.build.pipeline')\n"
        "    __import__('demofactory.cluster.runner')\n"
        "from . import mimicgen\n"
        "from .. import factory\n"
    )
    assert imported_modules(source, tmp_path) == [
        (1, "demofactory.specs.spec"),
        (2, "factory"),
        (4, "demofactory.errors"),
        (5, "importlib"),
        (6, "demofactory.build.pipeline"),
        (7, "demofactory.cluster.runner"),
        (8, "generators.mimicgen"),  # relayout: keep (a relative import: folder-based)
        (9, "factory"),
    ]


def test_the_robosuite_scene_has_what_the_generators_scene_protocol_lists():
    from demofactory.generators.scene_api import Scene
    from demofactory.simulation.scene import Scene as RobosuiteScene

    members = {
        name
        for name in vars(Scene)
        if not name.startswith("_") and (callable(vars(Scene)[name]) or name in dir(Scene))
    }
    assert {"reset_to", "step", "holds", "snapshot", "restore"} <= members
    missing = sorted(name for name in members if not hasattr(RobosuiteScene, name))
    assert not missing, (
        f"demofactory.simulation.scene.Scene lacks {missing} of "
        f"demofactory.generators.scene_api.Scene"
    )


def module_graph(
    root: Path = ROOT, packages: Iterable[str] = PACKAGES
) -> dict[str, dict[str, int]]:
    """module -> {module it imports: first line}, over the project's modules only. An import of
    `a.b.c` counts as one of the longest importable prefix (`from factory import cli` is
    `demofactory.cli.main` when that is a module, else `factory`, the package's __init__)."""
    files = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            dotted = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            files[import_name(dotted) if root == ROOT else dotted] = path
    graph: dict[str, dict[str, int]] = {}
    for name, path in files.items():
        edges = graph.setdefault(name, {})
        for line, module in [*imported_modules(path, root), *_from_imported(path)]:
            parts = (import_name(module) if root == ROOT else module).split(".")
            target = next(
                (
                    ".".join(parts[:i])
                    for i in range(len(parts), 0, -1)
                    if ".".join(parts[:i]) in files
                ),
                None,
            )
            if target is not None and target != name:
                edges.setdefault(target, line)
    return graph


def _from_imported(path: Path) -> list[tuple[int, str]]:
    """`from a import b` also names `a.b`: the module, when b is one (a name in a otherwise)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        (node.lineno, f"{node.module}.{alias.name}")
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
        for alias in node.names
    ]


def import_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Each strongly connected group of more than one module (Tarjan's algorithm, iterative),
    as one cycle through it: [a, b, ..., a]."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(_cycle_through(graph, set(group)))
    return groups


def _cycle_through(graph: dict[str, dict[str, int]], group: set[str]) -> list[str]:
    """A shortest cycle from the group's first module back to itself, inside the group."""
    first = min(group)
    paths = {first: [first]}
    frontier = [first]
    while frontier:
        nxt = []
        for node in frontier:
            for target in sorted(graph[node]):
                if target == first:
                    return [*paths[node], first]
                if target in group and target not in paths:
                    paths[target] = [*paths[node], target]
                    nxt.append(target)
        frontier = nxt
    raise AssertionError(f"{sorted(group)} is not strongly connected")


def _describe(graph: dict[str, dict[str, int]], cycle: list[str]) -> str:
    steps = [f"{a} (line {graph[a][b]}) -> {b}" for a, b in zip(cycle, cycle[1:], strict=False)]
    return "  " + ", ".join(steps)


def test_no_module_imports_itself_through_others():
    graph = module_graph()
    assert len(graph) > 100, f"only {len(graph)} modules found under {PACKAGES}"
    cycles = import_cycles(graph)
    assert not cycles, "import cycles (move the shared names to a module both may import):\n" + (
        "\n".join(_describe(graph, c) for c in cycles)
    )


def test_the_cycle_checker_finds_cycles_hidden_in_functions_and_type_checking(tmp_path):
    package = tmp_path / "factory"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from factory.b import x\n")
    (package / "b.py").write_text("def f():\n    from factory import c\n")
    (package / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from factory.a import y\n"
    )
    (package / "d.py").write_text("import factory.a\n")  # into the cycle, not part of it
    graph = module_graph(tmp_path, ["factory"])
    assert graph["factory.b"] == {"factory": 2, "factory.c": 2}  # the package, then c
    assert import_cycles(graph) == [["factory.a", "factory.b", "factory.c", "factory.a"]]
    (package / "c.py").write_text("")
    assert import_cycles(module_graph(tmp_path, ["factory"])) == []


def _stage(module: str) -> str | None:
    """The stage of a factory module's import name (`demofactory.build.run` -> build), None for
    the package's top (`errors`, `_gl`) and for modules outside factory/."""
    if folder_of(module) != "factory":
        return None
    parts = import_name(module).split(".")
    return parts[1] if len(parts) > 2 and parts[1] in STAGE_ALLOWED else None


@pytest.mark.skipif(not STAGE_ALLOWED, reason="factory/ is not split into stages yet")
def test_each_stage_imports_only_the_stages_it_may():
    bad = []
    for module, edges in module_graph().items():
        stage = _stage(module)
        if stage is None:
            continue
        for target, line in sorted(edges.items()):
            other = _stage(target)
            if other not in (None, stage) and other not in STAGE_ALLOWED[stage]:
                bad.append(f"{module} (line {line}) -> {target}: {stage} may not import {other}")
    where = "tests/project/test_layers.py STAGE_ALLOWED"
    assert not bad, f"stage directions ({where}):\n" + "\n".join(bad)
