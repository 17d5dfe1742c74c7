"""Errors a user can fix. The CLI prints them as one line and exits with code 2."""

from __future__ import annotations


class UserError(Exception):
    """Bad input: a spec, a seed file, an output directory. Printed without a traceback."""


class SpecError(UserError):
    """A scene spec that does not validate, or does not match the simulator.

    `where` names the file, `field` the YAML path (``generation.attempts``,
    ``subtasks[1].ends_when``), `message` what was expected.
    """

    def __init__(self, where: str, field: str, message: str):
        self.where, self.field, self.message = str(where), field, message
        super().__init__(
            f"{self.where}: {field}: {message}" if field else f"{self.where}: {message}"
        )
