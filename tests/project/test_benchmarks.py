"""`--json-out PATH` (benchmarks/_common.py): a benchmark run writes its own results file, in the
form tools/bench_tables.py makes the docs' tables from; a script that makes no table is refused
in benchmarks/results/ before it runs. The benchmarks themselves are never run here except two
cheap ones on tiny real data, to see their files carry the docs table's columns."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"
RESULTS = BENCHMARKS / "results"

SCRIPT = """
import argparse, json, sys
sys.path.insert(0, {benchmarks!r})
from _common import run

def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1)
    args = parser.parse_args()
    print("a progress note, not JSON")
    for i in range(args.n):
        print(json.dumps({{"i": i, "square": i * i}}))
    print(json.dumps({{"total": args.n}}, indent=2))

def table(result):
    return ["i", "square"], [[r["i"], r["square"]] for r in result if "i" in r]

run(main{table})
"""


def _script(tmp_path: Path, with_table: bool) -> Path:
    path = tmp_path / "bench_toy.py"
    text = SCRIPT.format(benchmarks=str(BENCHMARKS), table=", table" if with_table else "")
    path.write_text(textwrap.dedent(text))
    return path


def _run(*argv, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *map(str, argv)], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def test_json_out_writes_what_the_script_printed_and_its_table(tmp_path):
    script = _script(tmp_path, with_table=True)
    out = tmp_path / "toy.json"
    done = _run(script, "--n", "3", "--json-out", out)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1] == '{"i": 0, "square": 0}'  # stdout as without it
    record = json.loads(out.read_text())
    assert record["benchmark"] == "bench_toy.py"
    assert record["command"] == "python bench_toy.py --n 3"  # --json-out is the helper's
    assert record["measured"]  # a date
    assert record["result"] == [
        {"i": 0, "square": 0},
        {"i": 1, "square": 1},
        {"i": 2, "square": 4},
        {"total": 3},
    ]
    assert record["columns"] == ["i", "square"]
    assert record["rows"] == [[0, 0], [1, 1], [2, 4]]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".toy.json")]  # no temp left


def test_a_script_without_a_table_is_refused_in_results_before_it_runs(tmp_path):
    script = _script(tmp_path, with_table=False)
    target = RESULTS / "toy_never_written.json"
    done = _run(script, "--json-out", target)
    assert done.returncode == 2
    assert done.stdout == ""  # main never ran
    assert done.stderr.strip().splitlines() == [
        f"error: --json-out {target}: bench_toy.py makes no docs table, and benchmarks/results/ "
        "holds only those (tools/bench_tables.py); expected a path elsewhere"
    ]
    assert not target.exists()
    # elsewhere, the same script writes its result without a table
    done = _run(script, "--json-out", tmp_path / "toy.json")
    assert done.returncode == 0, done.stderr
    record = json.loads((tmp_path / "toy.json").read_text())
    assert "columns" not in record and record["result"] == [{"i": 0, "square": 0}, {"total": 1}]


def test_help_names_json_out(tmp_path):
    done = _run(_script(tmp_path, with_table=True), "--help")
    assert done.returncode == 0
    assert "--json-out PATH" in done.stdout and "--n" in done.stdout


def test_every_benchmark_runs_through_the_helper():
    scripts = sorted(BENCHMARKS.glob("bench_*.py"))
    assert len(scripts) > 20
    missing = [p.name for p in scripts if "from _common import run" not in p.read_text()]
    assert not missing, f"benchmarks without --json-out (benchmarks/_common.py): {missing}"


def _results_columns(name: str) -> list[str]:
    return json.loads((RESULTS / f"{name}.json").read_text())["columns"]


def test_bench_layout_writes_the_docs_table_of_its_run(tmp_path):
    from tests.shards.test_exports import make_dataset

    make_dataset(tmp_path / "tiny")  # two cameras, three episodes
    out = tmp_path / "layout.json"
    done = _run(
        BENCHMARKS / "bench_layout.py",
        *("--source", tmp_path / "tiny", "--episodes", "3", "--repeats", "1"),
        *("--json-out", out),
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads(out.read_text())
    assert record["benchmark"] == "benchmarks/bench_layout.py"
    assert record["columns"] == _results_columns("layout")
    labels = [row[0] for row in record["rows"]]
    assert labels == [
        "low-dimensional, bytes a step",
        "low-dimensional, loader steps/s",
        "2 cameras, bytes a step",
        "2 cameras, loader steps/s",
    ]
    lowdim = record["result"]["lowdim"]
    assert record["rows"][0][1:] == [
        f"{lowdim['step']['bytes_per_step']:,.0f}",
        f"{lowdim['episode']['bytes_per_step']:,.0f}",
        f"{lowdim['bytes_ratio']:.2f}",
    ]


def test_bench_driver_scale_writes_the_docs_table_of_its_run(tmp_path):
    out = tmp_path / "driver_scale.json"
    done = _run(
        BENCHMARKS / "bench_driver_scale.py",
        *("--shards", "3,6", "--old", "", "--episodes", "2", "--steps", "20"),
        *("--tmp", tmp_path, "--json-out", out),
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads(out.read_text())
    assert record["columns"] == _results_columns("driver_scale")
    assert [row[0] for row in record["rows"]] == ["3", "6"]
    runs = record["result"]["runs"]
    assert record["rows"][1][3] == f"{runs[1]['peak_rss_mb']:,.0f} MB"


def test_bench_batched_draws_a_saved_sweep(tmp_path):
    """The README's batch-size curve is drawn from the sweep's JSON (`--plot-from`): a PNG of
    the ratio to one CPU core against the batch size, physics and OSC lines. The sweep here
    is a small hand-written one, not a measurement."""
    sweep = {
        "device_name": "cpu",
        "batches": [
            {"worlds": 1, "ratio_vs_one_cpu_core": 0.003},
            {"worlds": 4, "ratio_vs_one_cpu_core": 0.01},
            {"worlds": 4, "ratio_vs_one_cpu_core": 0.008, "osc": True},
        ],
    }
    source = tmp_path / "sweep.json"
    source.write_text(json.dumps(sweep))
    png = tmp_path / "curve.png"
    run = subprocess.run(
        [
            sys.executable,
            str(BENCHMARKS / "bench_batched.py"),
            "--plot-from",
            str(source),
            "--plot",
            str(png),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from PIL import Image

    with Image.open(png) as image:
        assert image.size == (720, 480)  # 6 x 4 inches at 120 dpi
        assert len(set(image.convert("RGB").getdata())) > 10  # lines and text, not blank
