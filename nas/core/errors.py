"""Exceptions of `nas`: every user-facing failure derives from `NasError`.

The CLI prints a `NasError` as one line per problem (at most three) and exits with its
`exit_code` (2: bad input). An `OSError` that reaches the CLI (a disk that filled up while
writing, an I/O error) is printed as one line naming its path and exits 1: paths the user
gives are checked first and reported as `NasError`s naming the parameter (the CLI: its flag).
Anything else is an internal failure (exit code 1, with a traceback).
"""
from __future__ import annotations

from nas.core.wording import PYTHON, Words, render

MAX_ECHO = 80


def clip(value: object, limit: int = MAX_ECHO) -> str:
    """`repr`-like echo of a user value, cut to `limit` characters."""
    text = value if isinstance(value, str) else repr(value)
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def plural(count: int, noun: str) -> str:
    """`1 tensor`, `3 tensors`."""
    return f"{count} {noun}{'s' if count != 1 else ''}"


def clip_words(text: str, limit: int = 160) -> str:
    """The first line of `text`, cut at a word boundary to at most `limit` characters ("...")."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    if len(line) <= limit:
        return line
    cut = line[: limit - 3].rstrip()
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space].rstrip(" ,;:")
    return cut + "..."


def _int_problem(flag: str, value: object, minimum: int, why: str = "") -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        return f"{flag}: must be an integer >= {minimum}{why}, got {clip(value)}"
    return None


def check_int(flag: str, value: object, minimum: int, why: str = "") -> None:
    """Raise `ConfigError` naming `flag` unless `value` is an integer >= `minimum`."""
    problem = _int_problem(flag, value, minimum, why)
    if problem is not None:
        raise ConfigError(problem)


def int_problems(minimum: int, **values: object) -> list[str]:
    """`check_int`'s message for each `key=value` that is not an integer >= `minimum`, for checks
    that collect every problem of a section before raising."""
    return [problem for key, value in values.items() if (problem := _int_problem(key, value, minimum)) is not None]


def compose(param: str | None, problem: str, fix: str | None) -> str:
    """`param: problem; fix`, without the parts that are None."""
    return (f"{param}: " if param else "") + problem + (f"; {fix}" if fix else "")


class NasError(Exception):
    """Base class of all errors `nas` reports to users: the Python API parameter it is about
    (`param`, or named at the start of `problem`), the problem, and how to fix it (`fix`). Their
    `{name}` and `command` markers are worded by each front end (`nas.core.wording`): `str()`
    gives the Python API's words, the CLI prints `render(its_words)`."""

    exit_code = 2
    label = "error"     # what the CLI prints before the message

    def __init__(self, problem: str = "", *, param: str | None = None, fix: str | None = None):
        super().__init__(problem)
        self.problem, self.param, self.fix = problem, param, fix

    def lines(self) -> list[str]:
        """The problems as one line each, before a front end words them."""
        return [compose(self.param, self.problem, self.fix)]

    def render(self, words: Words = PYTHON) -> str:
        """The problems, one a line, in `words`."""
        return "\n".join(render(line, words) for line in self.lines())

    def __str__(self) -> str:
        return self.render()


class ConfigError(NasError):
    """Bad configuration: one or more problems, each `FILE: key.path: problem`."""

    def __init__(self, problems: list[str] | str, *, param: str | None = None, fix: str | None = None):
        given = [problems] if isinstance(problems, str) else list(problems)
        self.problems = [compose(param, problem, fix) for problem in given]
        super().__init__("\n".join(self.problems))
        self.problem, self.param, self.fix = "\n".join(given), param, fix

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


class RecordError(NasError):
    """A damaged record that a command wrote (a JSON file in a run, search or family folder; names the file)."""


class PathError(NasError):
    """A folder or file the user named that cannot be written or read as asked (names the parameter)."""


class SearchError(NasError):
    """A search that cannot proceed (unsatisfiable budget, exhausted retries)."""


class TrainingDiverged(NasError):
    """A non-finite loss or weights stopped training; the last good checkpoint is kept."""

    exit_code = 1


class Interrupted(NasError):
    """SIGINT or SIGTERM stopped a run after it saved its state; exit code 128 + signal number."""

    label = "stopped"

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.exit_code = 128 + signum
