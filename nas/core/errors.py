"""Exceptions of `nas`: every user-facing failure derives from `NasError`.

The CLI prints a `NasError` as one line per problem (at most three) and exits with its
`exit_code` (2: bad input). Anything else is an internal failure (exit code 1).
"""
from __future__ import annotations

MAX_ECHO = 80


def clip(value: object, limit: int = MAX_ECHO) -> str:
    """`repr`-like echo of a user value, cut to `limit` characters."""
    text = value if isinstance(value, str) else repr(value)
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_int(flag: str, value: object, minimum: int, why: str = "") -> None:
    """Raise `ConfigError` naming `flag` unless `value` is an integer >= `minimum`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{flag}: must be an integer >= {minimum}{why}, got {clip(value)}")


class NasError(Exception):
    """Base class of all errors `nas` reports to users."""

    exit_code = 2

    def lines(self) -> list[str]:
        """The problems as one line each, as the CLI prints them."""
        return [str(self)]


class ConfigError(NasError):
    """Bad configuration: one or more problems, each `FILE: key.path: problem`."""

    def __init__(self, problems: list[str] | str):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))

    def lines(self) -> list[str]:
        return self.problems


class ArchError(NasError):
    """An architecture that does not belong to its space (names the key and allowed values)."""


class RegistryError(NasError):
    """An unknown or duplicate registered name."""


class CheckpointError(NasError):
    """A missing, truncated or incompatible checkpoint (names the file)."""


class DataError(NasError):
    """A missing or malformed dataset (says how to get it)."""


class RunError(NasError):
    """A run directory that does not exist or cannot be used as asked."""


class SearchError(NasError):
    """A search that cannot proceed (unsatisfiable budget, exhausted retries)."""


class TrainingDiverged(NasError):
    """A non-finite loss stopped training; the last good checkpoint is kept."""

    exit_code = 1
