"""Undo what the formatter does to a trailing comment that made a line too long.

ruff (like black) keeps a trailing comment on the line it was on, so a statement that fits on one
line without its comment gets split open to make room for it:

    subtasks: dict[str, dict[str, int]] = field(
        default_factory=dict
    )  # index -> reached, failed, retries, fallbacks

This moves such a comment onto its own line above the statement and joins the statement again:

    # index -> reached, failed, retries, fallbacks
    subtasks: dict[str, dict[str, int]] = field(default_factory=dict)

Only statements whose only comment is the one at their end, with no trailing comma (a magic
comma asks to stay split), and whose joined code fits in the line length are changed; run
`ruff format` afterwards. Idempotent. Usage: python tools/join_split_comments.py [FILE|DIR ...]
(default: the project's packages, tests and benchmarks); --check exits 1 when it would change
something.
"""

from __future__ import annotations

import argparse
import ast
import io
import sys
import textwrap
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ("factory", "generators", "shards", "cluster", "tests", "benchmarks", "tools")
LINE_LENGTH = 100
SIMPLE = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr, ast.Return)
HEADERS = (ast.If, ast.While)  # joined up to the colon of their test


def _comments(lines: list[str], first: int, last: int) -> dict[int, str]:
    """line number -> comment text of lines first..last (1-based), read with tokenize."""
    found = {}
    source = "".join(lines[first - 1 : last])
    try:
        for tok in tokenize.generate_tokens(io.StringIO(textwrap.dedent(source)).readline):
            if tok.type == tokenize.COMMENT:
                found[first + tok.start[0] - 1] = tok.string
    except (tokenize.TokenError, IndentationError):
        return {-1: "unreadable"}
    return found


def _joined(code_lines: list[str]) -> str:
    """The lines of one statement as one line (brackets' inner spacing is ruff's to redo)."""
    out = code_lines[0].rstrip()
    for line in code_lines[1:]:
        piece = line.strip()
        if out.endswith(("(", "[", "{")) or piece.startswith((")", "]", "}")):
            out += piece
        else:
            out += " " + piece
    return out


def _spans(tree: ast.AST, lines: list[str]) -> list[tuple[int, int]]:
    spans = []
    for node in ast.walk(tree):
        if isinstance(node, SIMPLE) and node.end_lineno > node.lineno:
            spans.append((node.lineno, node.end_lineno))
        elif isinstance(node, HEADERS):
            last = node.test.end_lineno
            if last < len(lines) and lines[last].lstrip().startswith(")"):
                last += 1  # `if (\n    test\n):` ends at the bracket's line
            if last > node.lineno:
                spans.append((node.lineno, last))
    return spans


def rewrite(source: str) -> str:
    lines = source.splitlines(keepends=True)
    tree = ast.parse(source)
    for first, last in sorted(_spans(tree, lines), reverse=True):  # bottom up: line numbers hold
        comments = _comments(lines, first, last)
        if list(comments) != [last]:
            continue
        comment = comments[last]
        if last < len(lines) and lines[last].lstrip().startswith("#"):
            continue  # the comment goes on below: moving its first line would cut it
        tail = lines[last - 1]
        code_tail = tail[: tail.rindex(comment)].rstrip()
        code = [*(line.rstrip("\n") for line in lines[first - 1 : last - 1]), code_tail]
        if any(line.rstrip().endswith(",") for line in code[:-1]) or ",)" in code_tail:
            continue  # a magic trailing comma: split on purpose
        joined = _joined(code)
        indent = joined[: len(joined) - len(joined.lstrip())]
        if len(joined) > LINE_LENGTH or len(indent) + len(comment) > LINE_LENGTH:
            continue
        probe = joined.strip() + ("\n    pass" if joined.endswith(":") else "")
        if joined.lstrip().startswith("elif "):
            probe = "if x:\n    pass\n" + probe[2:]
        try:
            ast.parse(probe)
        except SyntaxError:
            continue
        lines[first - 1 : last] = [f"{indent}{comment}\n", f"{joined}\n"]
    return "".join(lines)


def _files(args: list[str]) -> list[Path]:
    targets = [Path(a) for a in args] or [ROOT / d for d in DEFAULT]
    files = []
    for target in targets:
        files += sorted(target.rglob("*.py")) if target.is_dir() else [target]
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*")
    parser.add_argument("--check", action="store_true", help="exit 1 if anything would change")
    args = parser.parse_args(argv)
    changed = []
    for path in _files(args.paths):
        source = path.read_text()
        new = rewrite(source)
        if new != source:
            changed.append(path)
            if not args.check:
                path.write_text(new)
    for path in changed:
        print(f"{'would join' if args.check else 'joined'}: {path}")
    return 1 if (args.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
