"""Errors a user can fix in what the generators were given (a surface, a texture-bank model).

The generators import nothing of `factory`: these classes are their own. `demofactory.errors`
lists them among the user-facing errors, which the CLI prints as one line (exit 2).
"""

from __future__ import annotations


class GeneratorError(Exception):
    """A generator's input that the user can fix. Printed by the CLI without a traceback."""


class GeneratorFieldError(GeneratorError):
    """A parameter that does not fit the model or the machine, named by its spec path.

    `where` names the file (or what was configured), `field` the YAML path
    (``appearance.textures.surfaces[2]``), `message` what was expected.
    """

    def __init__(self, where: str, field: str, message: str):
        self.where, self.field, self.message = str(where), field, message
        super().__init__(
            f"{self.where}: {field}: {message}" if field else f"{self.where}: {message}"
        )


class TextureBankError(GeneratorError):
    """The texture bank cannot be made: no writable cache, no such device."""


class TextureModelError(GeneratorFieldError, TextureBankError):
    """The texture bank's model cannot be loaded (names the spec field and how to provide it)."""
