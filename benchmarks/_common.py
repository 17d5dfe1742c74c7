"""What the benchmark scripts share: `--json-out PATH`, a run's result written as a file.

    python benchmarks/bench_layout.py --source out/lift_img \\
        --json-out benchmarks/results/layout.json
    python tools/bench_tables.py      # docs/benchmarks.md's tables, from benchmarks/results/

Each script ends in `run(main)` (or `run(main, table)`): the script parses its own flags and
prints its JSON on stdout as before; `run` takes `--json-out PATH` off the command line first,
and once the script has finished, writes what it printed into PATH (whole or not at all: a
temporary file renamed over it):

    {"benchmark": "benchmarks/bench_layout.py", "command": "python benchmarks/bench_layout.py ...",
     "measured": "2026-12-02", "result": <the JSON it printed; a list when it printed several>,
     "columns": [...], "rows": [[...], ...]}

`columns` and `rows` are the docs' table of the run, there when the script hands `run` a `table`
function (result -> (columns, rows)); tools/bench_tables.py renders them. benchmarks/results/
holds docs tables only, so a script without one is refused there, before it runs.

Hand-written rather than a library's: a stdout tee and a JSON stream reader are a few lines, and
the scripts run on machines without the factory's dependencies (benchmarks/device_check.sh).
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import os
import shlex
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
HELP = (
    "--json-out PATH: also write the result as a JSON file (benchmarks/_common.py): the "
    "benchmark, the command, the date, the result, and the docs table where the script makes one"
)

# result -> (columns, rows): the docs table of one run
Table = Callable[[Any], tuple[list[str], list[list[Any]]]]


def run(main: Callable[[], Any], table: Table | None = None) -> None:
    """Run the script's `main` with `--json-out PATH` taken off sys.argv; then write PATH."""
    taker = argparse.ArgumentParser(add_help=False)
    taker.add_argument("--json-out", type=Path, metavar="PATH")
    known, rest = taker.parse_known_args(sys.argv[1:])
    path = known.json_out
    if path is not None:
        check_json_out(path, table)
    sys.argv[1:] = rest
    printed = _Tee(sys.stdout)
    sys.stdout = printed
    try:
        main()
    except SystemExit as done:
        if done.code in (None, 0) and {"-h", "--help"} & set(rest):
            print(HELP)
        raise
    finally:
        sys.stdout = printed.inner
    if path is not None:
        documents = json_documents(printed.text())
        if not documents:
            _refuse(path, f"{_script()} printed no JSON; nothing to write")
        write_json_out(path, documents[0] if len(documents) == 1 else documents, table)
        print(f"wrote {path}", file=sys.stderr)


def check_json_out(path: Path, table: Table | None = None) -> None:
    """Before the run: exit 2 with one line when `path` cannot take this script's result."""
    if table is None and path.resolve().parent == RESULTS:
        _refuse(
            path,
            f"{_script()} makes no docs table, and benchmarks/results/ holds only those "
            "(tools/bench_tables.py); expected a path elsewhere",
        )
    if path.is_dir():
        _refuse(path, "is a directory; expected a file path")
    if not path.resolve().parent.is_dir():
        _refuse(path, f"no folder {path.parent}; expected a path in an existing folder")


def write_json_out(path: Path, result: Any, table: Table | None = None) -> dict:
    """The record of this run at `path`, written whole or not at all; returned."""
    record: dict[str, Any] = {
        "benchmark": _script(),
        "command": "python " + shlex.join([_script(), *sys.argv[1:]]),
        "measured": datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
        "result": result,
    }
    if table is not None:
        record["columns"], record["rows"] = table(result)
    text = json.dumps(record, indent=2, default=str) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.resolve().parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return record


def json_documents(text: str) -> list[Any]:
    """Every JSON object or array that starts a line of `text` (one a line, or indented over
    several); other lines (a progress note) are skipped."""
    decoder, found, i = json.JSONDecoder(), [], 0
    while i < len(text):
        if text[i] in "{[":
            try:
                document, i = decoder.raw_decode(text, i)
                found.append(document)
                continue
            except json.JSONDecodeError:
                pass
        newline = text.find("\n", i)
        i = len(text) if newline < 0 else newline + 1
    return found


class _Tee(io.TextIOBase):
    """stdout as it was, and a copy of what went through it."""

    def __init__(self, inner):
        self.inner, self._copy = inner, io.StringIO()

    def write(self, text: str) -> int:
        self._copy.write(text)
        return self.inner.write(text)

    def flush(self) -> None:
        self.inner.flush()

    def fileno(self) -> int:
        return self.inner.fileno()

    def isatty(self) -> bool:
        return self.inner.isatty()

    def text(self) -> str:
        return self._copy.getvalue()


def _script() -> str:
    main = Path(sys.argv[0]).resolve()
    try:
        return str(main.relative_to(ROOT))
    except ValueError:
        return main.name


def _refuse(path: Path, what: str) -> None:
    print(f"error: --json-out {path}: {what}", file=sys.stderr)
    raise SystemExit(2)
