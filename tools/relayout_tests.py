"""Issue 29, step 5: tests/ mirrors the packages. Each tests/test_*.py moves into the folder of
what it tests (tests/specs, tests/shards, ...; tests/project holds the checks of the repository
as a whole: lint, docs, import layers, the wheel, the end-to-end and hostile-user runs).

    python tools/relayout_tests.py                          # apply, then print what it did
    python tools/relayout_tests.py --dry-run                # print what it would do
    python tools/relayout_tests.py --place test_new.py=build --place test_other.py=shards

What it does (idempotent: a second run finds nothing left to do):

1. refuses, in one line naming them, test files at the top of tests/ that neither TABLE nor a
   `--place NAME=FOLDER` places (a branch merged meanwhile may have added some);
2. makes tests/ and each folder a package (an empty __init__.py), so two folders may hold
   modules of the same name and `from tests.shards.test_loader import ...` names one module;
3. moves each placed file (`git mv` when git tracks it, so history follows), and in a file it
   moves, one level deeper now, turns `Path(__file__).parents[1]` (or `.parent.parent`, the
   repository's root) into `.parents[2]`;
4. rewrites what names a moved file anywhere in the repository: imports (`from tests.test_loader
   import`, `from test_loader import`, `from conftest import` -> `from tests.conftest import`),
   dotted names (`tests.test_loader.build_dataset`) and paths (`tests/test_loader.py`);
5. sorts the imports of the Python files it changed and formats them (`ruff check --fix
   --select I`, `ruff format`), and names their lines over 100 columns (a longer path in a
   comment or docstring: wrap those by hand).

`--place` adds to TABLE for this run only: put the line into TABLE too when the file stays.
No import of the factory; the standard library and git only.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"

# The folders, after the packages they test: factory's stages, the libraries, and `project`.
FOLDERS = (
    "specs",
    "simulation",
    "robots",
    "seeds",
    "build",
    "robustness",
    "train",
    "cli",
    "generators",
    "shards",
    "cluster",
    "project",
)

# file -> folder. A file is placed by what it tests, not by which fixtures it uses.
TABLE = {
    # factory/specs: the schema, its fingerprints and docs, language
    "test_spec.py": "specs",
    "test_spec_fingerprints.py": "specs",
    "test_spec_schema.py": "specs",
    "test_lift_colour.py": "specs",
    "test_subtask_language.py": "specs",
    # factory/simulation: the robosuite adapter, fast loop, physics, render, scenes from YAML
    "test_fast_step.py": "simulation",
    "test_physics.py": "simulation",
    "test_release.py": "simulation",
    "test_render_detail.py": "simulation",
    "test_view_cull.py": "simulation",
    "test_bimanual_sim.py": "build",
    "test_mjwarp_attempts.py": "build",
    "test_bimanual_spec.py": "specs",
    "test_render_modes.py": "simulation",
    "test_scene_registry.py": "simulation",
    "test_scene_yaml.py": "simulation",
    "test_scene_yaml_hostile.py": "simulation",
    # factory/robots: repairs, mixed-robot embodiments
    "test_arm_fixes.py": "robots",
    "test_gripper_fixes.py": "robots",
    "test_mixed_robots.py": "robots",
    "test_robot_repairs.py": "robots",
    # factory/seeds: loading, annotation, suggestions, replay checks, scripts, other robots
    "test_cross_robot.py": "seeds",
    "test_demos.py": "seeds",
    "test_replay_check.py": "seeds",
    "test_script.py": "seeds",
    "test_subtasks.py": "seeds",
    "test_suggest.py": "seeds",
    "test_suggest_strategies.py": "seeds",
    "test_touching.py": "seeds",
    # factory/build: driver, output folder and store, previews, coverage, action spaces
    "test_action_spaces.py": "build",
    "test_coverage.py": "build",
    "test_failures.py": "build",
    "test_local_and_store.py": "build",
    "test_outputs_rule.py": "build",
    "test_outputs_store.py": "build",
    "test_preview.py": "build",
    "test_store_run.py": "build",
    # factory/robustness
    "test_adr.py": "robustness",
    "test_calibrate.py": "robustness",
    "test_divergence.py": "robustness",
    "test_eval_physics.py": "robustness",
    # factory/train
    "test_mixed_policy.py": "train",
    "test_train_eval.py": "train",
    "test_train_eval_config.py": "train",
    "test_train_example.py": "train",
    "test_vla.py": "train",
    # factory/cli
    "test_cli_errors.py": "cli",
    "test_cli_outputs.py": "cli",
    "test_cli_set.py": "cli",
    # generators/: poses, generation, predicates, skills, appearance, textures
    "test_appearance.py": "generators",
    "test_generation.py": "generators",
    "test_generation_knobs.py": "generators",
    "test_held_object.py": "generators",
    "test_poses.py": "generators",
    "test_predicate_truth.py": "generators",
    "test_predicates.py": "generators",
    "test_skills.py": "generators",
    "test_task_predicates.py": "generators",
    "test_texture_bank.py": "generators",
    # shards/: the format, readers, loader, store, exports
    "test_export_gr00t.py": "shards",
    "test_exports.py": "shards",
    "test_journal.py": "shards",
    "test_lerobot_fidelity.py": "shards",
    "test_loader.py": "shards",
    "test_partial_stats.py": "shards",
    "test_readers.py": "shards",
    "test_sensor_noise.py": "shards",
    "test_shard_layout.py": "shards",
    "test_shards.py": "shards",
    "test_store.py": "shards",
    "test_store_datasets.py": "shards",
    "test_tario.py": "shards",
    "test_verify.py": "shards",
    # cluster/
    "test_cluster_faults.py": "cluster",
    "test_cluster_units.py": "cluster",
    "test_ray_job.py": "cluster",
    # the repository as a whole
    "test_docs.py": "project",
    "test_end_to_end.py": "project",
    "test_error_tree.py": "project",
    "test_hostile_34b.py": "project",
    "test_hostile_user.py": "project",
    "test_layers.py": "project",
    "test_lint.py": "project",
    "test_wheel.py": "project",
}

# Where a moved file may be named. Folders are searched for these suffixes; files as they are.
REWRITE_DIRS = ("factory", "generators", "shards", "cluster", "tests", "benchmarks")
REWRITE_DIRS += ("tools", "docs", "examples", ".ci", "scene_specs")
REWRITE_FILES = ("README.md", "Makefile", "pyproject.toml", "mkdocs.yml")
SUFFIXES = (".py", ".md", ".yml", ".yaml", ".toml", ".sh", ".txt", ".cfg", ".ini")
SELF = Path(__file__).resolve()
LINE_LENGTH = 100  # pyproject.toml's [tool.ruff]

# `Path(__file__).parents[1]`, `Path(__file__).resolve().parent.parent`, ...: how deep a file
# sits; one level more once moved.
FILE_PARENTS = re.compile(
    r"(Path\(__file__\)(?:\.resolve\(\))?)(?:\.parents\[(\d+)\]|((?:\.parent)+)(?![\w\[]))"
)


class Refused(Exception):
    pass


def parse_places(items: list[str]) -> dict[str, str]:
    places = {}
    for item in items:
        name, sep, folder = item.partition("=")
        name = Path(name).name
        if not sep or not re.fullmatch(r"test_\w+\.py", name) or folder not in FOLDERS:
            raise Refused(
                f"--place: {item!r}: expected test_NAME.py=FOLDER, FOLDER one of "
                + ", ".join(FOLDERS)
            )
        places[name] = folder
    return places


def placed_table(places: dict[str, str]) -> dict[str, str]:
    table = {**TABLE, **places}
    bad = sorted(f"{name}={folder}" for name, folder in table.items() if folder not in FOLDERS)
    if bad:
        raise Refused("TABLE: folders that are not in FOLDERS: " + ", ".join(bad))
    return table


def plan(table: dict[str, str]) -> list[tuple[Path, Path]]:
    """(from, to) of each file at the top of tests/ to move; refuses unplaced or clashing files."""
    top = sorted(p.name for p in TESTS.glob("test_*.py"))
    unplaced = [name for name in top if name not in table]
    if unplaced:
        raise Refused(
            "tests/: test files the table does not place (add them to TABLE in "
            "tools/relayout_tests.py, or --place NAME=FOLDER): " + ", ".join(unplaced)
        )
    clash = [f"{n} (tests/{table[n]}/{n})" for n in top if (TESTS / table[n] / n).exists()]
    if clash:
        raise Refused("tests/: files at the top and in their folder both: " + ", ".join(clash))
    return [(TESTS / name, TESTS / table[name] / name) for name in top]


def deepen(text: str) -> str:
    """A moved file's repository root: one `parents` level more."""

    def one(match: re.Match) -> str:
        levels = int(match[2]) + 1 if match[2] is not None else match[3].count(".parent")
        return f"{match[1]}.parents[{levels}]"

    return FILE_PARENTS.sub(one, text)


def rewrite(text: str, table: dict[str, str], moved: set[str]) -> str:
    """Names of files that sit in their folders now: imports, dotted names, paths."""
    stems = "|".join(sorted(re.escape(n[: -len(".py")]) for n in table if n in moved))
    if stems:
        folder = {name[: -len(".py")]: table[name] for name in table}
        # tests.test_loader / tests/test_loader.py
        text = re.sub(
            rf"\btests([./])({stems})\b",
            lambda m: f"tests{m[1]}{folder[m[2]]}{m[1]}{m[2]}",
            text,
        )
        # `from test_loader import ...` (tests/ on sys.path): the package's name now
        text = re.sub(
            rf"^(\s*)from ({stems}) import",
            lambda m: f"{m[1]}from tests.{folder[m[2]]}.{m[2]} import",
            text,
            flags=re.M,
        )
    return re.sub(r"^(\s*)from conftest import", r"\1from tests.conftest import", text, flags=re.M)


def candidates() -> list[Path]:
    found = [ROOT / name for name in REWRITE_FILES if (ROOT / name).is_file()]
    for top in REWRITE_DIRS:
        if (ROOT / top).is_dir():
            found += [
                p
                for p in (ROOT / top).rglob("*")
                if p.is_file() and p.suffix in SUFFIXES and p.resolve() != SELF
                if "data" not in p.relative_to(ROOT).parts[:2] or top != "tests"
            ]
    return sorted(found)


def tracked(path: Path) -> bool:
    done = subprocess.run(
        ["git", "ls-files", "--error-unmatch", str(path.relative_to(ROOT))],
        cwd=ROOT,
        capture_output=True,
    )
    return done.returncode == 0


def apply(table: dict[str, str], dry_run: bool) -> list[str]:
    actions = []
    moves = plan(table)
    for folder in ("", *sorted(set(table.values()))):
        init = TESTS / folder / "__init__.py"
        if not init.exists():
            actions.append(f"create {init.relative_to(ROOT)}")
            if not dry_run:
                init.parent.mkdir(parents=True, exist_ok=True)
                init.write_text("")
                subprocess.run(["git", "add", str(init.relative_to(ROOT))], cwd=ROOT, check=True)
    for source, target in moves:
        actions.append(f"move {source.relative_to(ROOT)} -> {target.relative_to(ROOT)}")
        if dry_run:
            continue
        if tracked(source):
            subprocess.run(
                ["git", "mv", str(source.relative_to(ROOT)), str(target.relative_to(ROOT))],
                cwd=ROOT,
                check=True,
            )
        else:
            source.rename(target)
        text = target.read_text()
        deeper = deepen(text)
        if deeper != text:
            target.write_text(deeper)
            actions.append(f"  {target.relative_to(ROOT)}: Path(__file__) one level deeper")
        left = [
            f"{target.relative_to(ROOT)}:{i}"
            for i, line in enumerate(deeper.splitlines(), 1)
            if "__file__" in line and not FILE_PARENTS.search(line)
        ]
        if left:
            actions.append("  check by hand (another use of __file__): " + ", ".join(left))
    # Every file in its folder, moved now or before, is named by its folder's path.
    moved = {name for name, folder in table.items() if (TESTS / folder / name).exists()}
    if dry_run:
        moved |= {source.name for source, _ in moves}
    changed = [target for _, target in moves if target.suffix == ".py"]
    for path in candidates():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        new = rewrite(text, table, moved)
        if new != text:
            actions.append(f"rewrite {path.relative_to(ROOT)}")
            if not dry_run:
                path.write_text(new)
                changed += [path] if path.suffix == ".py" else []
    if changed and not dry_run:
        actions += tidy(sorted(set(changed)))
    return actions


def tidy(paths: list[Path]) -> list[str]:
    """Imports sorted and the files formatted as the lint test wants; long lines named."""
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    names = [str(p.relative_to(ROOT)) for p in paths]
    if ruff is None:
        return ["  ruff not found: run `ruff check --fix --select I . && ruff format .`"]
    subprocess.run([ruff, "check", "-q", "--fix", "--select", "I", *names], cwd=ROOT)
    subprocess.run([ruff, "format", "-q", *names], cwd=ROOT, check=True)
    long = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in paths
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if len(line) > LINE_LENGTH
    ]
    return ["  wrap by hand (over 100 columns): " + ", ".join(long)] if long else []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="print what it would do")
    parser.add_argument(
        "--place",
        action="append",
        default=[],
        metavar="NAME=FOLDER",
        help="place a test file TABLE does not name, for this run (repeatable)",
    )
    args = parser.parse_args(argv)
    try:
        actions = apply(placed_table(parse_places(args.place)), args.dry_run)
    except Refused as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("\n".join(actions) if actions else "nothing to do: tests/ mirrors the layout")
    return 0


if __name__ == "__main__":
    sys.exit(main())
