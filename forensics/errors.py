"""One exception family for everything a user can get wrong.

Every message says what went wrong, where (``file:line`` when there is one) and what to do.
The CLI prints ``str(error)`` on one line and exits non-zero; no traceback for these.
"""

from __future__ import annotations


class ForensicsError(Exception):
    """Base class of every error the toolkit raises on purpose.

    Example:
        >>> raise ForensicsError("bad input", where="gw.ndjson:12", hint="fix the line")
        Traceback (most recent call last):
        ...
        forensics.errors.ForensicsError: gw.ndjson:12: bad input (fix the line)
    """

    def __init__(self, message: str, *, where: str | None = None, hint: str | None = None) -> None:
        self.message = message
        self.where = where
        self.hint = hint
        super().__init__(self.__str__())

    def __str__(self) -> str:
        text = f"{self.where}: {self.message}" if self.where else self.message
        if self.hint:
            text += f" ({self.hint})"
        return text


class InputError(ForensicsError):
    """A source file or path cannot be read as asked (missing, unknown format, bad field)."""


class FormatDetectionError(InputError):
    """No preset (or more than one) matches a file's content."""


class MissingFieldError(InputError):
    """A field the chosen preset or mapping needs is absent from a file."""


class MappingError(InputError):
    """A TOML mapping file is invalid."""


class CaseError(ForensicsError):
    """The case database is missing, locked, or lacks the data a query needs."""


class QueryError(ForensicsError):
    """A query file is missing or its parameters do not match the call."""


class ParameterError(ForensicsError):
    """A user-supplied option value is invalid (bad time, unknown node, bad number)."""
