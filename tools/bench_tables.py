"""The tables of docs/benchmarks.md, rebuilt from the benchmarks' JSON in benchmarks/results/.

Each results file is one table: the benchmark that measured it, the command, the columns, the
rows and when it was measured:

    {"benchmark": "benchmarks/bench_generate.py", "command": "...", "measured": "2026-11-30",
     "columns": ["task", "generator steps/s", ...], "rows": [["Stack", "625", ...], ...]}

docs/benchmarks.md holds the prose; each table sits between `<!-- bench-table: NAME -->` and
`<!-- /bench-table -->`, NAME the results file's stem. Rewrite the tables after a benchmark run:

    python tools/bench_tables.py           # rewrites docs/benchmarks.md
    python tools/bench_tables.py --check   # exit 1 when the page differs (test_docs.py)

No import of the factory: this reads JSON and writes Markdown.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "benchmarks.md"
BLOCK = re.compile(r"(<!-- bench-table: ([\w-]+) -->\n)(.*?)(<!-- /bench-table -->)", re.S)
REQUIRED = ("benchmark", "columns", "rows")


def load_results(folder: Path = RESULTS) -> dict[str, dict]:
    """name -> the results file's JSON; a ValueError names a file that lacks a field."""
    found = {}
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text())
        missing = [key for key in REQUIRED if key not in data]
        if missing:
            raise ValueError(f"{path}: expected the fields {', '.join(missing)}")
        for i, row in enumerate(data["rows"]):
            if len(row) != len(data["columns"]):
                raise ValueError(
                    f"{path}: rows[{i}] has {len(row)} cells, expected {len(data['columns'])}"
                )
        found[path.stem] = data
    return found


def table(data: dict) -> str:
    """The Markdown table of one results file, with where it came from under it."""
    lines = ["| " + " | ".join(data["columns"]) + " |", "|" + "---|" * len(data["columns"])]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in data["rows"]]
    source = f"`{data['benchmark']}`"
    if data.get("measured"):
        source += f", measured {data['measured']}"
    return "\n".join(lines) + f"\n\n<small>From {source}.</small>\n"


def render(page: str, results: dict[str, dict]) -> str:
    """`page` with every bench-table block rebuilt; a ValueError names a block without results
    or results without a block."""
    named = [m.group(2) for m in BLOCK.finditer(page)]
    unknown = sorted(set(named) - set(results))
    unused = sorted(set(results) - set(named))
    if unknown or unused:
        raise ValueError(
            f"{PAGE.name}: tables without results {unknown}, results without a table {unused}"
        )
    return BLOCK.sub(lambda m: m.group(1) + table(results[m.group(2)]) + m.group(4), page)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    args = parser.parse_args(argv)
    page = PAGE.read_text()
    new = render(page, load_results())
    if args.check:
        if new != page:
            print(f"{PAGE} is stale: run python tools/bench_tables.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(new)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
