"""`factory annotate --replay N` through the CLI: each seed demo regenerated at its own start,
counted per segment, and a demo that cannot regenerate itself FLAGGED with its segment."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from demofactory.cli.main import main
from demofactory.specs.spec import load_raw_spec

from tests.conftest import DEMOS, SPECS


def _run_main(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.sim
def test_every_lift_demo_regenerates_itself_segment_by_segment(capsys):
    code, text, err = _run_main(
        capsys, "annotate", SPECS / "lift.yaml", "--replay", "1", "--no-progress"
    )
    assert code == 0, err
    lines = text.splitlines()
    headers = [line for line in lines if not line.startswith("  ")][:-1]
    assert [re.match(r"(\S+)  \((\d+) steps\)", h).groups() for h in headers] == [
        (f"lift_panda_4demos_robosuite141.hdf5:demo_{i}", str(n))
        for i, n in zip((1, 2, 3, 4), (226, 1143, 285, 296), strict=True)
    ]
    assert all("1 of 1 replays at its own start succeeded" in h for h in headers)
    segments = [line.split() for line in lines if line.startswith("  segment")]
    assert [(s[1], s[3], s[4], s[6], s[8], s[10]) for s in segments] == [
        ("0", "0", "cube", "1", "1", "grasped(cube)"),
        ("1", "1", "cube", "1", "1", "success"),
    ] * 4
    assert lines[-1] == "ok: every demo regenerates itself (4 demo(s), 1 replay(s) each)"
    assert "FLAGGED" not in text


@pytest.mark.sim
def test_a_demo_that_cannot_regenerate_itself_is_flagged_with_its_segment(tmp_path, capsys):
    # demo_2 takes 1143 steps, 1119 of them to grasp: under a horizon of 400 it cannot fit
    raw = load_raw_spec(SPECS / "lift.yaml")
    raw["seed_demos"] = [str(DEMOS / "lift_panda_4demos_robosuite141.hdf5")]
    raw["task"]["horizon"] = 400
    path = tmp_path / "short.yaml"
    path.write_text(yaml.safe_dump(raw))
    code, text, err = _run_main(capsys, "annotate", path, "--replay", "1", "--no-progress")
    assert code == 1, err  # the check ran and found a bad seed (bad input would be 2)
    flagged = [line for line in text.splitlines() if line.startswith("FLAGGED")]
    assert flagged == [
        "FLAGGED: lift_panda_4demos_robosuite141.hdf5:demo_2 fails its own replay (0 of 1 "
        "succeeded, fewer than 50%); most fail in segment 0 (subtask 0, cube, ends: "
        "grasped(cube)): 1 of the 1 that reached it"
    ]
    assert "  failures: horizon: 1" in text
    code, out, _ = _run_main(capsys, "annotate", path, "--replay", "1", "--no-progress", "--json")
    assert code == 1
    demos = {d["demo"].split(":")[1]: d for d in json.loads(out)["demos"]}
    assert {name: d["flagged"] for name, d in demos.items()} == {
        "demo_1": False, "demo_2": True, "demo_3": False, "demo_4": False,
    }  # fmt: skip
    assert demos["demo_2"]["worst_segment"] == 0
    assert [(s["reached"], s["completed"]) for s in demos["demo_2"]["segments"]] == [(1, 0), (0, 0)]
    assert [(s["reached"], s["completed"]) for s in demos["demo_1"]["segments"]] == [(1, 1), (1, 1)]


@pytest.mark.parametrize("value", ["0", "-1", "two", "99999999999999999999"])
def test_a_bad_replay_count_is_one_line_and_exit_2(value, capsys):
    code, out, err = _run_main(capsys, "annotate", SPECS / "lift.yaml", "--replay", value)
    assert code == 2 and out == ""
    assert err.splitlines() == [
        f"error: --replay: expected a number of replays per demo from 1 to 1000, got {value!r}"
    ]
