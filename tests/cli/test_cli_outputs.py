"""What the README shows people, through `demofactory.cli.main.main`: the plain text of `inspect`
and
`annotate`, the live progress line, a second `factory run` on a busy --out, `export --to lerobot`.

The `--json` forms are tested elsewhere (test_end_to_end, test_subtasks); here the text a person
reads is held to the same numbers.
"""

from __future__ import annotations

import io
import json
import re
import socket
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from demofactory.build.progress import ProgressState, RunProgress, format_progress
from demofactory.cli.main import main

from tests.conftest import REPO, SPECS


def _run_main(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


# --- inspect ------------------------------------------------------------------------------------


def test_inspect_text_shows_the_json_numbers_one_per_line(lift_dataset, capsys):
    code, text, err = _run_main(capsys, "inspect", lift_dataset)
    assert code == 0 and err == ""
    _, report, _ = _run_main(capsys, "inspect", lift_dataset, "--json")
    report = json.loads(report)
    rows = dict(
        re.match(r"^(\S+(?: \S+)?)\s{2,}(.*)$", line).groups() for line in text.splitlines()
    )
    assert rows["dataset"] == f"{lift_dataset}  (tiny_lift, Lift)"
    planned = report["attempts_planned"]
    assert rows["attempts"].startswith(f"{report['attempts']} of {planned} planned")
    assert rows["successes"] == f"{report['successes']}  ({report['success_rate']:.1%})"
    failures = ", ".join(f"{k}: {v}" for k, v in report["failures"].items()) or "none"
    assert rows["failures"] == failures
    for key in ("retries", "episodes", "steps"):
        assert rows[key] == str(report[key])
    assert rows["shards"].startswith(f"{report['shards']}  (")
    assert rows["cameras"] == "agentview 48x48, robot0_eye_in_hand 40x32"
    assert re.fullmatch(r"\d+\.\d s", rows["wall time"])
    for row in report["subtasks"]:
        cells = rows[f"subtask {row['index']}"].split()
        assert cells[0] == row["ends_when"]
        assert cells[1:] == [
            "reached",
            str(row["reached"]),
            "failed",
            str(row["failed"]),
            "retries",
            str(row["retries"]),
        ]
    assert len(rows) == 10 + len(report["subtasks"])


# --- annotate -----------------------------------------------------------------------------------


@pytest.mark.sim
def test_annotate_text_lists_each_demo_and_its_contiguous_segments(capsys):
    code, text, err = _run_main(capsys, "annotate", SPECS / "lift.yaml")
    assert code == 0, err
    lines = text.splitlines()
    headers = [i for i, line in enumerate(lines) if not line.startswith("  ")]
    lengths = []
    for i in headers:
        header = re.fullmatch(
            r"lift_panda_4demos_robosuite141\.hdf5:demo_\d  \((\d+) steps\)", lines[i]
        )
        assert header, lines[i]
        length = int(header.group(1))
        lengths.append(length)
        segments = [
            re.fullmatch(
                r"  subtask (\d)  cube\s+steps\s+(\d+) \.\. (\d+)\s+ends: (.*)", lines[i + k]
            ).groups()
            for k in (1, 3)
        ]
        # Under each segment, its skill window: inside the segment, ending where it ends.
        for k, (_, seg_start, seg_end, _) in zip((2, 4), segments, strict=True):
            window = re.fullmatch(
                r"      skill window\s+(\d+) \.\. (\d+)\s+\((.*); (\d+) paused steps dropped\)",
                lines[i + k],
            )
            assert window, lines[i + k]
            assert int(seg_start) <= int(window.group(1)) < int(window.group(2)) == int(seg_end)
        (g, g_start, g_end, g_why), (s, s_start, s_end, s_why) = segments
        assert (g, s) == ("0", "1")
        assert int(g_start) == 0 < int(g_end) == int(s_start) < int(s_end) == length
        assert g_why == f"grasped(cube) holds from step {int(g_end) - 1}"
        done = re.fullmatch(r"the task is done \(success from step (\d+)\), then 15 steps", s_why)
        assert done and min(length, int(done.group(1)) + 15) == length, s_why
    assert lengths == [226, 1143, 285, 296]
    assert len(lines) == 5 * len(headers)


# --- the progress line --------------------------------------------------------------------------


class _Terminal(io.StringIO):
    """A stream that says it is a terminal, as stderr in an interactive shell does."""

    encoding = "utf-8"

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("stream", [io.StringIO, _Terminal], ids=["pipe", "terminal"])
def test_the_progress_line_redraws_one_line_with_warnings_above_it(monkeypatch, stream):
    err = stream()
    monkeypatch.setattr(sys, "stderr", err)
    now = [0.0]
    state = ProgressState(shards_total=2, attempts_total=4)
    with RunProgress(state, enabled=True, clock=lambda: now[0]) as progress:
        progress.workers(2)
        now[0] = 60.0
        for ok in (True, False, True, True):
            progress.attempt(0, ok)
        progress.shard_done()
        progress.warn("worker pid 7 died during shard-000001.tar; the shard is redone")
        progress.shard_done()
    text = err.getvalue()
    final = format_progress(state, 60.0)
    assert final == (
        "shards 2/2 · attempts 4/4 · successes 3 (75%) · 3.0 ep/min · ETA 0s · workers 2"
    )
    # Every redraw returns to the line's start: the display is one line, ended once at the close.
    lines = text.split("\n")
    assert lines[-1] == "" and len(lines) == 3, lines
    above, bar = lines[0], lines[1]
    assert above.endswith(
        "\rwarning: worker pid 7 died during shard-000001.tar; the shard is redone"
    )
    draws = [d for d in bar.split("\r") if d]
    assert all(d.startswith("generating: ") for d in draws), draws
    assert re.fullmatch(r"generating: 100%\|.{10}\| " + re.escape(final), draws[-1]), draws[-1]
    assert "shards 0/2 · attempts 0/4" in above  # drawn before the attempts came in


def test_no_progress_shows_only_warnings(monkeypatch):
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    with RunProgress(ProgressState(shards_total=1, attempts_total=1), enabled=False) as progress:
        progress.attempt(0, True)
        progress.warn("something")
    assert err.getvalue() == "warning: something\n"


# --- a second run on a busy --out ---------------------------------------------------------------

HOLD = """
import sys
from pathlib import Path
from demofactory.build.run import lock_output_dir
held = lock_output_dir(Path(sys.argv[1]))
print("held", flush=True)
sys.stdin.read()
"""


@pytest.mark.sim  # the spec is resolved (its env built) before --out is judged under the lock
def test_a_second_run_on_a_directory_being_written_is_refused(tiny_lift_spec, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    # The first driver: another process holding DIR/.lock, as `factory run` does while it runs.
    first = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(out)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert first.stdout.readline() == "held\n"
        code, stdout, stderr = _run_main(
            capsys, "run", tiny_lift_spec, "--out", out, "--no-progress"
        )
    finally:
        first.communicate("")  # lets it end
    assert code == 2 and stdout == ""
    (line,) = stderr.splitlines()
    assert line == (
        f"error: {out}: another `factory run` is writing this dataset (pid {first.pid} on "
        f"{socket.gethostname()}); wait for it or choose another --out"
    )
    assert sorted(p.name for p in out.iterdir()) == [".lock"]  # nothing else written


# --- export --to lerobot ------------------------------------------------------------------------


def test_export_to_lerobot_through_the_cli(lift_dataset, tmp_path, capsys):
    out = tmp_path / "lerobot"
    code, stdout, stderr = _run_main(capsys, "export", lift_dataset, "--to", "lerobot", out)
    assert code == 0, stderr
    episodes = [json.loads(line) for line in (lift_dataset / "episodes.jsonl").open()]
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["robot_type"] == "Panda"
    assert info["total_episodes"] == len(episodes) > 0
    assert info["total_frames"] == sum(e["length"] for e in episodes)
    tables = [pq.read_table(p) for p in sorted((out / "data").rglob("*.parquet"))]
    assert sum(t.num_rows for t in tables) == info["total_frames"]
    rows = [i for t in tables for i in t.column("episode_index").to_pylist()]
    assert sorted(set(rows)) == list(range(len(episodes)))
    for camera in ("agentview", "robot0_eye_in_hand"):
        videos = list((out / "videos" / f"observation.images.{camera}").rglob("*.mp4"))
        assert videos and all(v.stat().st_size > 0 for v in videos)
    assert (out / "meta" / "tasks.parquet").is_file() and (out / "meta" / "stats.json").is_file()
    assert str(out) in stdout
    assert not list(tmp_path.glob(".lerobot.tmp-*"))
