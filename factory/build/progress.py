"""The live display of `factory run`: one tqdm line on stderr, over attempts.

    generating:  40%|████      | shards 4/10 · attempts 20/50 · successes 9 (45%) · 5.4 ep/min
                                    · ETA 3m20s · workers 2      (one line on the terminal)

Rates and the ETA count only what this run did (shards kept from an earlier run are in
the totals, not in the rates). `format_progress` is the whole text; the bar only shows it.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

from tqdm import tqdm


@dataclass
class ProgressState:
    """Counts behind the display; `*_run` fields are this run's share (for rates)."""

    shards_total: int
    attempts_total: int
    target_successes: int | None = None  # "stop at N successes", if asked
    variants: int = 1  # episodes per successful attempt (appearance.variants_per_trajectory)
    shards_done: int = 0
    attempts: int = 0
    successes: int = 0
    workers: int = 0
    attempts_run: int = 0
    successes_run: int = 0


def eta_seconds(state: ProgressState, elapsed_s: float) -> float | None:
    """Seconds left at this run's pace: attempts left, or successes left when that ends sooner."""
    if state.attempts_run == 0 or elapsed_s <= 0:
        return None
    eta = max(0, state.attempts_total - state.attempts) * elapsed_s / state.attempts_run
    if state.target_successes is not None and state.successes_run > 0:
        left = max(0, state.target_successes - state.successes)
        eta = min(eta, left * elapsed_s / state.successes_run)
    return eta


def format_duration(seconds: float | None) -> str:
    """42s, 3m05s, 2h07m; '?' when unknown."""
    if seconds is None:
        return "?"
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def format_progress(state: ProgressState, elapsed_s: float) -> str:
    """shards, attempts, successes and rate, episodes per minute, ETA, live workers: one line."""
    rate = state.successes / state.attempts if state.attempts else 0.0
    per_min = state.successes_run * state.variants * 60.0 / elapsed_s if elapsed_s > 0 else 0.0
    target = f"/{state.target_successes}" if state.target_successes is not None else ""
    return " · ".join(
        [
            f"shards {state.shards_done}/{state.shards_total}",
            f"attempts {state.attempts}/{state.attempts_total}",
            f"successes {state.successes}{target} ({rate:.0%})",
            f"{per_min:.1f} ep/min",
            f"ETA {format_duration(eta_seconds(state, elapsed_s))}",
            f"workers {state.workers}",
        ]
    )


class RunProgress:
    """tqdm over attempts with `format_progress` as its text; warnings go above the bar."""

    def __init__(self, state: ProgressState, enabled: bool = True, clock=time.monotonic):
        self.state, self.enabled, self._clock = state, enabled, clock
        self._start = clock()
        self._bar = tqdm(
            total=state.attempts_total,
            disable=not enabled,
            file=sys.stderr,
            dynamic_ncols=True,
            mininterval=0.5,
            bar_format="generating: {percentage:3.0f}%|{bar}| {desc}",  # desc: our text
        )

    def resumed(self, shards: int, attempts: int, successes: int) -> None:
        """Count what an earlier run finished (kept shards)."""
        self.state.shards_done += shards
        self.state.attempts += attempts
        self.state.successes += successes
        self._set_text()
        self._bar.update(attempts)

    def attempt(self, shard: int, success: bool) -> None:
        self.state.attempts += 1
        self.state.attempts_run += 1
        self.state.successes += bool(success)
        self.state.successes_run += bool(success)
        self._set_text()
        self._bar.update(1)  # redraws (at most every mininterval)

    def shard_done(self, _result=None) -> None:
        self.state.shards_done += 1
        self._refresh()

    def workers(self, alive: int) -> None:
        self.state.workers = alive
        self._refresh()

    def warn(self, line: str) -> None:
        """A line above the bar (printed even with the bar off)."""
        if self.enabled:
            self._bar.write(f"warning: {line}", file=sys.stderr)
        else:
            print(f"warning: {line}", file=sys.stderr, flush=True)

    def _set_text(self) -> None:
        self._bar.set_description_str(
            format_progress(self.state, self._clock() - self._start), refresh=False
        )

    def _refresh(self) -> None:
        self._set_text()
        self._bar.refresh()

    def __enter__(self) -> RunProgress:
        return self

    def __exit__(self, *exc) -> None:
        self._refresh()
        self._bar.close()
