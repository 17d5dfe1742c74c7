"""`generation.rebalance`: extra attempts in the placement cells that kept episodes under-cover.

    planned shards (generation.attempts) all recorded
      ──► count: attempts and kept episodes per object and placement cell
      (demofactory.build.coverage,
          from generation.json's per-attempt placements, journal applied)
      ──► deficits: a cell needs ceil((1 - tolerance) x kept / cells) kept episodes, at least
          one; its success rate so far ((kept + 1) / (attempts + 2)) says how many attempts
          that takes
      ──► a round: extra shards after the last one (indices and attempt ids continue), each
          attempt given per object the cell its placement is drawn in (ShardTask.targets;
          the worker narrows that object's ranges to the cell: targeted_params)
      ──► run them; count again; stop when no cell is short, after `rounds` rounds, or once
          `max_extra_attempts` are spent
      ──► generation.json "rebalance": per round the coverage before, the shards and attempts
          added; and the coverage at the end

Deterministic and resumable without a plan file: round r is computed from the shards of the
rounds before it only (each deterministic), so a resumed run plans the same extra shards again
and skips those the manifest lists. Seeds are generation's: (spec seed, shard index, attempt id).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import numpy as np
from demofactory.build.coverage import Counts, PlacementGrid, count, summarize
from demofactory.build.records import ShardTask


class RebalancedPlan(Sequence[ShardTask]):
    """The planned shards, then the extra ones (shard i is tasks[i], as `task_named` expects)."""

    def __init__(self, base: Sequence[ShardTask], extra: Sequence[ShardTask]):
        self.base, self.extra = base, list(extra)

    def __len__(self) -> int:
        return len(self.base) + len(self.extra)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if 0 <= index < len(self.base):
            return self.base[index]
        if 0 <= index - len(self.base) < len(self.extra):
            return self.extra[index - len(self.base)]
        raise IndexError(f"shard {index} is not in a plan of {len(self)} shards")


def grid_for(spec) -> PlacementGrid:
    return PlacementGrid.from_spec(spec.placement, spec.generation.rebalance.bins)


def deficits(grid: PlacementGrid, counts: Counts, tolerance: float) -> dict[str, np.ndarray]:
    """Per object, kept episodes each cell is short of its share (0 where covered)."""
    out = {}
    for name in grid.ranges:
        kept = counts.kept[name]
        need = max(1, math.ceil((1.0 - tolerance) * kept.sum() / kept.size))
        out[name] = np.maximum(need - kept, 0)
    return out


def _queues(grid: PlacementGrid, counts: Counts, short: Mapping[str, np.ndarray]) -> dict:
    """Per object, the cells to aim attempts at, each as often as its success rate says."""
    queues = {}
    for name, lack in short.items():
        tried = counts.attempts[name] if counts.attempts is not None else np.zeros_like(lack)
        rate = (counts.kept[name] + 1.0) / (tried + 2.0)  # Laplace: an untried cell, 1/2
        needed = np.ceil(lack / rate).astype(int)
        # the most short cells first, interleaved, so that a cut budget still spreads out
        order = [c for c in np.argsort(-needed, kind="stable") if needed[c] > 0]
        queue, left = [], {c: int(needed[c]) for c in order}
        while left:
            for c in list(left):
                queue.append(int(c))
                left[c] -= 1
                if not left[c]:
                    del left[c]
        queues[name] = queue
    return queues


def plan_round(
    spec, grid: PlacementGrid, counts: Counts, first_index: int, first_id: int, budget: int
) -> list[ShardTask]:
    """The extra shards of one round (empty when no cell is short or no budget is left)."""
    short = deficits(grid, counts, spec.generation.rebalance.tolerance)
    queues = {n: q for n, q in _queues(grid, counts, short).items() if q}
    n = min(budget, max((len(q) for q in queues.values()), default=0))
    targets = [tuple((name, q[j % len(q)]) for name, q in sorted(queues.items())) for j in range(n)]
    per = spec.generation.attempts_per_shard
    return [
        ShardTask(
            first_index + k,
            tuple(range(first_id + start, first_id + min(start + per, n))),
            tuple(targets[start : start + per]),
        )
        for k, start in enumerate(range(0, n, per))
    ]


def extend_plan(spec, base: Sequence[ShardTask], generation: Mapping) -> tuple[Sequence, dict]:
    """The plan with every extra round the recorded shards already decide, and the record of
    what rebalancing did so far ({} when off). A round is planned only once every shard before
    it is recorded in `generation` (generation.json with the journal applied)."""
    config = spec.generation.rebalance
    if config is None:
        return base, {}
    grid = grid_for(spec)
    budget = config.max_extra_attempts or spec.generation.attempts
    extra: list[ShardTask] = []
    rounds = []
    while True:
        plan = RebalancedPlan(base, extra)
        recorded = generation.get("shards", {})
        if any(task.name not in recorded for task in _last_round(plan, extra, rounds)):
            break  # this round is still running: the next is decided by it
        counts = count(grid, _within(generation, plan))
        if counts.attempts is None:
            break  # shards without placements (a dataset made before they were recorded)
        used = sum(len(t.attempt_ids) for t in extra)
        more = (
            plan_round(spec, grid, counts, len(plan), _next_id(plan), budget - used)
            if len(rounds) < config.rounds
            else []
        )
        if not more:
            break
        rounds.append(
            {
                "round": len(rounds) + 1,
                "kept_covered_before": summarize(grid, counts)["kept_covered"],
                "shards": [t.name for t in more],
                "attempts": sum(len(t.attempt_ids) for t in more),
            }
        )
        extra.extend(more)
    plan = RebalancedPlan(base, extra)
    record = {
        "planned_attempts": spec.generation.attempts,
        "bins": config.bins,
        "tolerance": config.tolerance,
        "max_rounds": config.rounds,
        "max_extra_attempts": budget,
        "rounds": rounds,
        "extra_attempts": sum(len(t.attempt_ids) for t in extra),
    }
    if all(task.name in generation.get("shards", {}) for task in plan):
        counts = count(grid, _within(generation, plan))
        record["coverage"] = summarize(grid, counts)
        record["satisfied"] = bool(
            counts.attempts is not None
            and not any(d.any() for d in deficits(grid, counts, config.tolerance).values())
        )
    return plan, record


def _last_round(plan: RebalancedPlan, extra: list[ShardTask], rounds: list) -> Sequence:
    if not rounds:
        return plan.base
    return extra[len(extra) - len(rounds[-1]["shards"]) :]


def _within(generation: Mapping, plan: Sequence[ShardTask]) -> dict:
    """generation.json's shards that belong to `plan` (not later rounds' ones, when resuming)."""
    names = {plan[i].name for i in range(len(plan))} if len(plan) < 10**6 else None
    shards = generation.get("shards", {})
    return {"shards": {k: v for k, v in shards.items() if names is None or k in names}}


def _next_id(plan: Sequence[ShardTask]) -> int:
    last = plan[len(plan) - 1]
    return last.attempt_ids[-1] + 1


def targeted_params(spec, params, first_demo, where: Sequence[tuple[str, int]], seed: int):
    """`params` with each targeted object's placement ranges narrowed to its cell.

    min_separation still holds: when the cells together leave no separated draw (two cubes
    aimed at one cell), the last targets are dropped until the attempt's own draws (its seed,
    as generate_attempt takes them) find one."""
    from demofactory.generators.mimicgen import sample_placement

    grid = grid_for(spec)
    start_xy = {name: poses[0][:2, 3] for name, poses in first_demo.object_poses.items()}
    for keep in range(len(where), -1, -1):
        objects = dict(params.placement.objects)
        for name, cell in where[:keep]:
            objects[name] = dataclasses.replace(objects[name], **grid.cell_ranges(name, cell))
        placement = dataclasses.replace(params.placement, objects=objects)
        try:
            sample_placement(placement, start_xy, np.random.default_rng(seed))
        except RuntimeError:
            continue
        return dataclasses.replace(params, placement=placement)
    return params
