"""`factory annotate --replay N`: does each seed demo regenerate itself?

    Resolved spec (its demos annotated)
      ──► per demo d (index i in the spec's seed demos), N attempts from d alone, at its own
          start: no placement offsets, nominal physics, seeds attempt_seed(spec seed, i, k)
      ──► generate_attempt: the generator as `factory run` drives it (the spec's action noise,
          retries, horizon), with d its only source
      ──► per segment, in d's subtask order: how many attempts reached it, and how many of
          those met its end when it was done (the last: the task's success), as `inspect` counts
      ──► DemoReplay; fewer than PASS_SHARE of its replays succeeding FLAGS the demo, naming the
          segment where most of them failed

A demo that cannot regenerate itself, with nothing moved, will not seed others: its segments are
cut where the person was not done (an end predicate that held a step too early), or its motion
needs more than the controller gives. `factory annotate SPEC` shows where each segment ends.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace

from demofactory.generators.mimicgen import AttemptPlan, attempt_seed, generate_attempt
from demofactory.generators.params import PlacementParams
from demofactory.generators.records import AnnotatedDemo, Attempt
from demofactory.seeds.resolve import Resolved

PASS_SHARE = 0.5  # a demo whose own replays succeed less often than this is flagged


@dataclass(frozen=True)
class SegmentTally:
    """One segment of a demo over its replays."""

    position: int  # in the demo's order
    subtask: int  # spec index
    object: str
    ends_when: str  # "success" for the one that ends at the task's success
    reached: int  # attempts that started it (a missed end does not stop an attempt: MimicGen's)
    completed: int  # of those, the ones whose end held after it (the last: the task's success)

    @property
    def failed(self) -> int:
        return self.reached - self.completed


@dataclass(frozen=True)
class DemoReplay:
    """A demo's N replays at its own start."""

    demo: str  # its label, file:demo_N
    length: int
    attempts: int
    successes: int
    segments: tuple[SegmentTally, ...]
    failures: dict[str, int]  # failure kind ("task not done at the end", "horizon") -> count
    wall_s: float

    @property
    def flagged(self) -> bool:
        return self.successes < PASS_SHARE * self.attempts

    @property
    def worst(self) -> SegmentTally | None:
        """The segment where most replays failed (the first of equals), None if none failed."""
        failing = [s for s in self.segments if s.failed]
        return max(failing, key=lambda s: (s.failed, -s.position)) if failing else None

    def to_json(self) -> dict:
        worst = self.worst
        return {
            "demo": self.demo,
            "length": self.length,
            "attempts": self.attempts,
            "successes": self.successes,
            "flagged": self.flagged,
            "worst_segment": worst.position if worst is not None else None,
            "segments": [
                {
                    "segment": s.position,
                    "subtask": s.subtask,
                    "object": s.object,
                    "ends_when": s.ends_when,
                    "reached": s.reached,
                    "completed": s.completed,
                }
                for s in self.segments
            ],
            "failures": self.failures,
            "wall_s": round(self.wall_s, 2),
        }


def replay_demos(
    resolved: Resolved, times: int, on_attempt: Callable[[str, bool], None] | None = None
) -> list[DemoReplay]:
    """Each of the resolved spec's demos replayed `times` times at its own start."""
    params = replace(resolved.params, placement=PlacementParams(objects={}, min_separation=0.0))
    scene = resolved.scene
    scene.set_physics(None)  # nominal: the demo's own world
    out = []
    for index, demo in enumerate(resolved.demos):
        start, attempts = time.perf_counter(), []
        for k in range(times):
            plan = AttemptPlan(k, index, attempt_seed(resolved.spec.seed, index, k))
            attempts.append(generate_attempt(scene, [demo], plan, params))
            if on_attempt is not None:
                on_attempt(demo.demo.label, attempts[-1].success)
        out.append(_tally(resolved, demo, attempts, time.perf_counter() - start))
    return out


def _tally(
    resolved: Resolved, demo: AnnotatedDemo, attempts: list[Attempt], wall_s: float
) -> DemoReplay:
    order = list(demo.order)
    reached = Counter(i for a in attempts for i in a.reached)
    completed = Counter(i for a in attempts for i in a.completed)
    subtasks = resolved.spec.subtasks
    segments = tuple(
        SegmentTally(
            position=p,
            subtask=i,
            object=subtasks[i].object,
            ends_when=subtasks[i].ends_when or "success",
            reached=reached[i],
            completed=completed[i],
        )
        for p, i in enumerate(order)
    )
    failures = Counter(a.reason.split(":", 1)[0] for a in attempts if not a.success)
    return DemoReplay(
        demo=demo.demo.label,
        length=demo.demo.length,
        attempts=len(attempts),
        successes=sum(a.success for a in attempts),
        segments=segments,
        failures=dict(sorted(failures.items())),
        wall_s=wall_s,
    )


def format_replays(replays: list[DemoReplay], times: int) -> str:
    """The text `factory annotate --replay N` prints: per demo its segments, then the verdict."""
    lines = []
    for r in replays:
        lines.append(
            f"{r.demo}  ({r.length} steps)  {r.successes} of {r.attempts} replays at its own "
            f"start succeeded  ({r.wall_s:.1f} s)"
        )
        width = max(len(s.object) for s in r.segments)
        for s in r.segments:
            lines.append(
                f"  segment {s.position}  subtask {s.subtask}  {s.object:<{width}}  "
                f"reached {s.reached:>3}  completed {s.completed:>3}  ends: {s.ends_when}"
            )
        if r.failures:
            kinds = ", ".join(f"{k}: {v}" for k, v in r.failures.items())
            lines.append(f"  failures: {kinds}")
    flagged = [r for r in replays if r.flagged]
    for r in flagged:
        worst = r.worst
        where = (
            f"most fail in segment {worst.position} (subtask {worst.subtask}, {worst.object}, "
            f"ends: {worst.ends_when}): {worst.failed} of the {worst.reached} that reached it"
            if worst is not None
            else "no segment failed its check, yet the task was not done"
        )
        lines.append(
            f"FLAGGED: {r.demo} fails its own replay ({r.successes} of {r.attempts} succeeded, "
            f"fewer than {PASS_SHARE:.0%}); {where}"
        )
    if not flagged:
        lines.append(
            f"ok: every demo regenerates itself ({len(replays)} demo(s), {times} replay(s) each)"
        )
    return "\n".join(lines)
