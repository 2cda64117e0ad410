"""Errors a user can act on: each names the offending field and says how to fix it."""

from __future__ import annotations

from collections.abc import Iterable


class TidalError(Exception):
    """Base class of errors shown to users without a traceback."""


class ConfigError(TidalError):
    """An impossible or unknown configuration value.

    ``field`` names the config key (dotted path) and ``fix`` says what would be accepted.
    """

    def __init__(self, field: str, message: str, fix: str = "") -> None:
        self.field = field
        self.fix = fix
        text = f"{field}: {message}"
        if fix:
            text += f" ({fix})"
        super().__init__(text)


class TraceError(TidalError):
    """A malformed trace: names the file, the line (1-based) and the column."""

    def __init__(self, path: str, line: int | None, column: str | None, message: str) -> None:
        where = path
        if line is not None:
            where += f", line {line}"
        if column is not None:
            where += f", column {column!r}"
        super().__init__(f"{where}: {message}")


def unknown_name(field: str, value: str, valid: Iterable[str]) -> ConfigError:
    names = ", ".join(sorted(valid))
    return ConfigError(field, f"unknown value {value!r}", f"valid: {names}")
