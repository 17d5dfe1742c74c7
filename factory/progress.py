"""A live progress bar for attempts: successes and success rate as they happen."""

from __future__ import annotations

import sys

from tqdm import tqdm


class AttemptProgress:
    """tqdm over attempts, with successes and the success rate in the postfix."""

    def __init__(self, total: int, enabled: bool = True):
        self.attempts = self.successes = 0
        self._bar = tqdm(
            total=total, unit="attempt", desc="generating", disable=not enabled,
            file=sys.stderr, dynamic_ncols=True, smoothing=0.1,
        )

    def advance_done(self, attempts: int, successes: int) -> None:
        """Count attempts finished in an earlier run (resume)."""
        if attempts:
            self.attempts += attempts
            self.successes += successes
            self._bar.update(attempts)
            self._refresh()

    def attempt(self, success: bool) -> None:
        self.attempts += 1
        self.successes += bool(success)
        self._bar.update(1)
        self._refresh()

    def _refresh(self) -> None:
        rate = self.successes / self.attempts if self.attempts else 0.0
        self._bar.set_postfix_str(f"successes={self.successes} rate={rate:.0%}", refresh=False)

    def __enter__(self) -> AttemptProgress:
        return self

    def __exit__(self, *exc) -> None:
        self._bar.close()
