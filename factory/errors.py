"""Errors a user can fix. The CLI prints them as one line and exits with code 2.

`factory` raises `UserError` (and `SpecError`); the libraries it drives import nothing of
`factory` and raise their own: the dataset format's `DatasetError` (exports: `ExportError`),
the cluster's `ClusterError`, the generators' `GeneratorError` (the texture bank's
`TextureBankError`). `USER_FACING_ERRORS` lists the roots; `demofactory.cli.main.main` catches them
all in one place and nothing converts one into another on the way.
"""

from __future__ import annotations

from demofactory.cluster.errors import ClusterError
from demofactory.generators.errors import GeneratorError
from demofactory.shards.format import DatasetError


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


class DatasetWriteError(UserError):
    """The driver could not write a dataset file (disk full, read-only): one line, naming it."""


# Every error a user can fix, whichever layer raised it: one `error:` line, exit 2.
USER_FACING_ERRORS: tuple[type[Exception], ...] = (
    UserError,
    DatasetError,
    ClusterError,
    GeneratorError,
)
