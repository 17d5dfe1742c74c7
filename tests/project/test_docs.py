"""The README and the docs site: the site builds (`mkdocs build --strict`), the benchmark page's
tables are those of benchmarks/results/, every link to a file resolves, and every command shown
parses with the real CLI (the cheap ones run for real)."""

from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from demofactory.cli.main import build_parser, main

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
MAX_README_LINES = 300
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")
# What a command shows that is the reader's to fill in, not a file of the repository.
PLACEHOLDER = re.compile(r"[<>]|\b(PORT|SPEC|DATASET|DIR|FILE|TAG|NAME)\b")


def _tools(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shell_commands(text: str) -> list[str]:
    """Each command line of the page's shell blocks (```sh, ```bash, ```console), continuation
    lines joined, comments dropped."""
    found = []
    for lang, body in FENCE.findall(text):
        if lang not in ("sh", "bash", "console", "shell"):
            continue
        joined = re.sub(r"\\\n\s*", " ", body)
        for line in joined.splitlines():
            line = line.strip().removeprefix("$ ")
            if line and not line.startswith("#"):
                found.append(line)
    return found


def factory_argv(command: str) -> list[str] | None:
    """The arguments after `factory` (or .venv/bin/factory), env assignments before it skipped;
    None when the line runs something else."""
    words = shlex.split(command, comments=True)
    while words and re.match(r"^[A-Z_]+=", words[0]):
        words = words[1:]
    if words and Path(words[0]).name == "factory":
        return words[1:]
    return None


def _all_commands() -> list[tuple[str, str]]:
    return [(page.name, c) for page in PAGES for c in shell_commands(page.read_text())]


def test_the_readme_is_short():
    lines = (REPO / "README.md").read_text().count("\n")
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; the rest belongs in docs/"


@pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None,
    reason="mkdocs is not installed (pip install -e '.[dev]' installs it)",
)
def test_the_docs_site_builds_strict(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (tmp_path / "site" / "index.html").is_file()


def test_the_benchmark_page_holds_the_tables_of_the_results():
    bench_tables = _tools("bench_tables")
    page = bench_tables.PAGE.read_text()
    results = bench_tables.load_results()
    assert results, "no benchmarks/results/*.json"
    assert bench_tables.render(page, results) == page, "run python tools/bench_tables.py"


def test_every_link_to_a_file_resolves():
    bad = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue  # a URL, or an anchor in the same page (mkdocs checks those)
            path = (page.parent / target.split("#", 1)[0]).resolve()
            if not path.exists():
                bad.append(f"{page.relative_to(REPO)}: {target}")
    assert not bad, "links to files that do not exist:\n" + "\n".join(bad)


def test_every_factory_command_shown_parses_with_the_real_cli():
    parser = build_parser()
    commands = [(name, c, factory_argv(c)) for name, c in _all_commands()]
    shown = [(name, c, argv) for name, c, argv in commands if argv is not None]
    assert len(shown) > 40, f"only {len(shown)} factory commands found in the docs"
    bad = []
    for name, command, argv in shown:
        try:
            parser.parse_args(argv)
        except SystemExit:
            bad.append(f"{name}: {command}")
    assert not bad, "commands the CLI does not parse:\n" + "\n".join(bad)


def test_the_files_commands_name_exist():
    bad = []
    for name, command in _all_commands():
        for word in shlex.split(command, comments=True):
            top = word.split("/", 1)[0]
            if "/" in word and top in ("scene_specs", "examples", "benchmarks", "tools"):
                if not PLACEHOLDER.search(word) and "*" not in word and "{" not in word:
                    if not (REPO / word).exists():
                        bad.append(f"{name}: {word} (in: {command})")
    assert not bad, "files the docs' commands name that are not in the repository:\n" + "\n".join(
        bad
    )


def test_the_cheap_commands_run_for_real(capsys):
    ran = 0
    for _, command in _all_commands():
        argv = factory_argv(command)
        if argv and argv[0] == "spec-help" and "--write" not in argv:
            assert main(argv) == 0, command
            ran += 1
    assert ran >= 2
    assert "generation.transit" in capsys.readouterr().out
