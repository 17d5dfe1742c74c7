"""Imports go one way: `factory/` (the orchestrator) uses the libraries, never the reverse.

    factory ──► generators ──► shards      (the texture bank stores images as datasets do)
       ├──────────────────────► shards
       └──► cluster                        (handed what to run; imports no other package)

Every .py file of the libraries is parsed (not imported): imports at any depth count, those
inside functions and under `if TYPE_CHECKING:` included, and so do module names given to
`importlib.import_module` / `__import__` as string literals. A failure names file:line.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIBRARIES = ("generators", "shards", "cluster")
PACKAGES = ("factory", *LIBRARIES)
# What each library may import of the project's packages (itself always).
ALLOWED = {
    "generators": {"shards"},  # the texture bank stores its images with the dataset's writer
    "shards": set(),  # the dataset format stands alone: a reader needs nothing else
    "cluster": set(),  # Ray plumbing: it is handed what to run
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


def _violations(library: str) -> list[str]:
    allowed = {library, *ALLOWED[library]}
    bad = []
    for path in _files(library):
        for line, module in imported_modules(path):
            top = module.split(".")[0]
            if top in PACKAGES and top not in allowed:
                bad.append(f"{path.relative_to(ROOT)}:{line}: imports {module}")
    return bad


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_library_imports_nothing_of_factory_nor_of_a_library_above_it(library):
    assert _files(library), f"no .py files under {library}/"
    bad = _violations(library)
    assert not bad, f"{library}/ must not import these (see tests/test_layers.py):\n" + "\n".join(
        bad
    )


def test_the_allowed_library_imports_have_no_cycle():
    # generators -> shards is allowed, so shards -> generators must not be (and so on).
    for library, uses in ALLOWED.items():
        for other in uses:
            assert library not in ALLOWED[other], f"{library} <-> {other} would be a cycle"


def test_the_checker_sees_every_kind_of_import(tmp_path):
    source = tmp_path / "generators" / "probe.py"
    source.parent.mkdir()
    source.write_text(
        "import factory.spec\n"
        "from factory import cli\n"
        "def f():\n"
        "    from factory.errors import UserError\n"
        "    import importlib\n"
        "    importlib.import_module('factory.pipeline')\n"
        "    __import__('cluster.runner')\n"
        "from . import mimicgen\n"
        "from .. import factory\n"
    )
    assert imported_modules(source, tmp_path) == [
        (1, "factory.spec"),
        (2, "factory"),
        (4, "factory.errors"),
        (5, "importlib"),
        (6, "factory.pipeline"),
        (7, "cluster.runner"),
        (8, "generators.mimicgen"),
        (9, "factory"),
    ]


def test_the_robosuite_scene_has_what_the_generators_scene_protocol_lists():
    from factory.sim import Scene as RobosuiteScene
    from generators.scene_api import Scene

    members = {
        name
        for name in vars(Scene)
        if not name.startswith("_") and (callable(vars(Scene)[name]) or name in dir(Scene))
    }
    assert {"reset_to", "step", "holds", "snapshot", "restore"} <= members
    missing = sorted(name for name in members if not hasattr(RobosuiteScene, name))
    assert not missing, f"factory.sim.Scene lacks {missing} of generators.scene_api.Scene"
