"""Placement coverage (`factory inspect --coverage`) and `generation.rebalance`."""

from __future__ import annotations

import json

import numpy as np
import pytest
from demofactory.build.coverage import PlacementGrid, count, summarize
from demofactory.build.rebalance import RebalancedPlan, deficits, extend_plan, plan_round
from demofactory.build.records import ShardPlan
from demofactory.cli.main import main
from demofactory.specs.spec import load_spec

from tests.conftest import write_spec


class _Range:
    def __init__(self, x=(0.0, 0.0), y=(0.0, 0.0), yaw=(0.0, 0.0)):
        self.x, self.y, self.yaw = x, y, yaw


class _Placement:
    def __init__(self, **objects):
        self.objects = objects


def _grid(bins=2) -> PlacementGrid:
    placement = _Placement(a=_Range(x=(-1.0, 1.0), yaw=(0.0, 4.0)), b=_Range(y=(0.0, 1.0)))
    return PlacementGrid.from_spec(placement, bins)


def test_grid_cells_cover_only_the_placed_axes_and_invert():
    grid = _grid(bins=4)
    assert grid.ranges == {"a": {"x": (-1.0, 1.0), "yaw": (0.0, 4.0)}, "b": {"y": (0.0, 1.0)}}
    assert grid.cells("a") == 16 and grid.cells("b") == 4
    for cell in range(16):
        r = grid.cell_ranges("a", cell)
        centre = ((r["x"][0] + r["x"][1]) / 2, 0.0, (r["yaw"][0] + r["yaw"][1]) / 2)
        assert grid.cell("a", centre) == cell
    assert grid.cell("a", (1.0, 0.0, 4.0)) == 15  # the upper edge is inside the last cell


def _generation(rows, per_shard=2) -> dict:
    shards = {}
    for k in range(0, len(rows), per_shard):
        shards[f"shard-{k // per_shard:06d}.tar"] = {"placements": rows[k : k + per_shard]}
    return {"shards": shards}


def _row(attempt, kept, ax, ayaw, by):
    return {"attempt": attempt, "kept": kept, "placement": {"a": [ax, 0, ayaw], "b": [0, by, 0]}}


def test_counts_and_the_covered_share_from_recorded_attempts():
    grid = _grid()
    rows = [_row(0, True, -0.5, 1, 0.2), _row(1, False, 0.5, 1, 0.7), _row(2, True, -0.5, 3, 0.7)]
    counts = count(grid, _generation(rows))
    assert counts.attempts["a"].tolist() == [1, 1, 1, 0] and counts.kept["a"].tolist() == [
        1,
        1,
        0,
        0,
    ]
    summary = summarize(grid, counts)
    assert summary["objects"]["a"]["kept_covered"] == 0.5
    assert summary["objects"]["a"]["attempts_covered"] == 0.75
    assert summary["objects"]["b"]["kept_covered"] == 1.0
    assert summary["kept_covered"] == round((0.5 * 4 + 1.0 * 2) / 6, 4)


def test_without_recorded_attempts_the_kept_episodes_are_counted_once_per_trajectory():
    from demofactory.shards.metadata import EpisodeRecord

    def record(index, trajectory, ax):
        return EpisodeRecord(
            index=index,
            shard="shard-000000.tar",
            instruction="lift",
            seed=index,
            length=3,
            provenance={"trajectory": trajectory, "placement": {"a": [ax, 0, 0], "b": [0, 0, 0]}},
        )

    grid = _grid()
    counts = count(grid, {"shards": {"s": {}}}, [record(0, 0, -0.5), record(1, 0, -0.5)])
    assert counts.attempts is None and counts.kept["a"].sum() == 1


class _Spec:
    """What demofactory.build.rebalance reads of a spec."""

    class generation:  # noqa: N801
        attempts = 4
        attempts_per_shard = 2

        class rebalance:  # noqa: N801
            bins = 2
            tolerance = 0.5
            rounds = 2
            max_extra_attempts = 6

    placement = _Placement(a=_Range(x=(-1.0, 1.0), yaw=(0.0, 4.0)), b=_Range(y=(0.0, 1.0)))


def test_a_round_aims_at_the_short_cells_within_the_budget_deterministically():
    grid = _grid()
    rows = [_row(i, True, -0.5, 1, 0.2) for i in range(4)]
    counts = count(grid, _generation(rows))
    short = deficits(grid, counts, 0.5)
    assert short["a"].tolist() == [0, 1, 1, 1] and short["b"].tolist() == [0, 1]
    tasks = plan_round(_Spec, grid, counts, first_index=2, first_id=4, budget=6)
    assert [t.index for t in tasks] == [2, 3, 4]
    assert [t.attempt_ids for t in tasks] == [(4, 5), (6, 7), (8, 9)]
    aimed = [dict(target) for t in tasks for target in t.targets]
    assert {a["a"] for a in aimed} == {1, 2, 3}  # every short cell of a, none of the full one
    assert {a["b"] for a in aimed} == {1}
    assert plan_round(_Spec, grid, counts, 2, 4, 6) == tasks  # the same counts, the same plan
    assert len([t for t in plan_round(_Spec, grid, counts, 2, 4, 3) for _ in t.attempt_ids]) == 3


def test_the_plan_grows_a_round_only_once_the_shards_before_it_are_recorded():
    base = ShardPlan(4, 2)
    rows = [_row(i, True, -0.5, 1, 0.2) for i in range(4)]
    half = {"shards": dict(list(_generation(rows)["shards"].items())[:1])}
    plan, record = extend_plan(_Spec, base, half)
    assert len(plan) == 2 and record["rounds"] == []
    plan, record = extend_plan(_Spec, base, _generation(rows))
    assert len(plan) > 2 and len(record["rounds"]) == 1
    assert record["rounds"][0]["shards"] == [plan[i].name for i in range(2, len(plan))]
    assert "coverage" not in record  # the extra shards are not run yet
    assert isinstance(plan, RebalancedPlan) and plan[len(plan) - 1].targets


def test_rebalance_true_is_the_defaults_and_off_keeps_the_fingerprint(tmp_path):
    plain = load_spec(write_spec(tmp_path / "a.yaml"))
    on = load_spec(write_spec(tmp_path / "b.yaml", generation={"rebalance": True}))
    off = load_spec(write_spec(tmp_path / "c.yaml", generation={"rebalance": False}))
    assert on.generation.rebalance.bins == 4 and off.generation.rebalance is None
    assert off.fingerprint() == plain.fingerprint() != on.fingerprint()
    same = load_spec(write_spec(tmp_path / "d.yaml", generation={"rebalance": {}}))
    assert same.fingerprint() == on.fingerprint()


def test_rebalance_without_placement_ranges_is_one_line_naming_the_field(tmp_path, capsys):
    path = write_spec(
        tmp_path / "s.yaml", placement={"objects": {}}, generation={"rebalance": True}
    )
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "generation.rebalance" in err[0] and str(path) in err[0]


@pytest.mark.slow
def test_a_rebalanced_run_records_what_it_did_and_resumes_to_the_same_dataset(
    tmp_path, ray_cluster, capsys
):
    """Tiny Lift: 4 planned attempts, then rounds of extra ones aimed at the empty cells; the
    record is in generation.json, inspect --coverage reads it, and a second run adds nothing."""
    from demofactory.shards import load_manifest

    spec = write_spec(
        tmp_path / "rb.yaml",
        name="rb_lift",
        task={"horizon": 400},
        generation={
            "attempts": 4,
            "attempts_per_shard": 2,
            "rebalance": {"bins": 2, "rounds": 1, "max_extra_attempts": 4},
        },
        cameras=[],
    )
    out = tmp_path / "rb"
    run = ["run", str(spec), "--out", str(out), "--workers", "2", "--no-progress"]
    assert main(run) == 0
    generation = json.loads((out / "generation.json").read_text())
    record = generation["rebalance"]
    assert record["bins"] == 2 and len(record["rounds"]) == 1
    assert record["extra_attempts"] == 4 == record["rounds"][0]["attempts"]
    placements = [r for e in generation["shards"].values() for r in e["placements"]]
    assert sorted(r["attempt"] for r in placements) == list(range(8))
    assert "coverage" in record and "satisfied" in record
    manifest = load_manifest(out).by_name()
    assert len(manifest) == 4
    assert main(run) == 0  # resume: the same rounds are planned again, and all are done
    assert load_manifest(out).by_name() == manifest
    capsys.readouterr()
    assert main([*run, "--attempts", "6"]) == 2  # more planned shards would take the extras' places
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "generation.attempts" in err[0]
    assert load_manifest(out).by_name() == manifest
    png = tmp_path / "cov.png"
    assert main(["inspect", str(out), "--coverage", str(png), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)["coverage"]
    assert png.stat().st_size > 0 and found["attempts_recorded"]
    assert found["objects"]["cube"]["attempts"] == 8
    kept = sum(r["kept"] for r in placements)
    assert found["objects"]["cube"]["kept"] == kept
    assert np.isclose(found["kept_covered"], record["coverage"]["kept_covered"])
