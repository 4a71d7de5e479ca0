"""How errors and announcements below the front ends name what the user gave, and each front end's words.

The layers below the CLI write one text for every front end. A line may start with the Python
API parameter it is about (`max_macs: ...`, `score auto: ...`, or quoted in a worker's error:
`workers: worker 1: max_params: ...`), and a fix may refer to other parameters and commands by
markers:

- `{out}`: a parameter; `out=` in Python, `--out` at the CLI.
- `{trials=12}`: a parameter with a value; `trials=12` in Python, `--trials 12` at the CLI
  (`{resume=True}` is `--resume`: a switch).
- `{nas latency-table RUN device=D batch=B}` (written by `command`): a whole command;
  `nas.api.latency_table(nas.api.load_run(RUN), device=D, batch=B)` in Python,
  `nas latency-table RUN --device D --batch B` at the CLI.

`render(text, words)` words a text; `PYTHON` (the default of `str(error)`) is the Python API's
words, and the CLI gives its own `Words` built from its argparse parser. `announce` prints a
text on stderr in the words `wording` sets (the CLI's for the length of a command).
"""
from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

# A line that starts with a parameter name, alone (`max_macs: ...`) or qualified (`score auto: ...`).
_LEADING_PARAM = re.compile(r"^([a-z][a-z0-9_]*)(?=:| [^:]*:)")
# A worker's own error quoted by a shared search (`workers: worker 0: max_params: ...`).
_WORKER_PARAM = re.compile(r"(\bworker \d+: )([a-z][a-z0-9_]*)(?=:)")
_COMMAND = re.compile(r"\{nas ([a-z][a-z-]*)((?: [^{}]+)?)\}")
_PARAM_REF = re.compile(r"\{([a-z][a-z0-9_]*)(?:=([^{}\s]+))?\}")
_PLACEHOLDER = re.compile(r"[A-Z][A-Z_]*|-?\d+(\.\d+)?|True|False|None")

# How the Python API does what a command does, where the command's first argument is loaded first.
_API_CALLS = {"train": "nas.api.train(nas.api.load_config({0}){1})",
              "latency-table": "nas.api.latency_table(nas.api.load_run({0}){1})",
              "export": "nas.api.export_subnet(nas.api.load_run({0}){1})",
              "search": "nas.api.search(nas.api.load_run({0}){1})"}


def command(name: str, /, *args: object, **params: object) -> str:
    """The marker of a command suggestion (`command("latency-table", "RUN", device="D")`):
    arguments, then the Python API parameters the command takes."""
    words = [name, *(shlex.quote(str(a)) for a in args), *(f"{k}={shlex.quote(str(v))}" for k, v in params.items())]
    return "{nas " + " ".join(words) + "}"


def python_value(value: str) -> str:
    """A value as Python source: placeholders (`RUN`), numbers and constants as they are, else quoted."""
    return value if _PLACEHOLDER.fullmatch(value) else repr(value)


class Words:
    """The Python API's words: parameters by their names (`arch: ...`, `out=`), commands as calls."""

    def param(self, name: str) -> str:
        """A parameter that starts a line or a quoted error."""
        return name

    def ref(self, name: str, value: str | None) -> str:
        """A parameter (with a value) that a fix refers to."""
        return f"{name}=" if value is None else f"{name}={python_value(value)}"

    def command(self, name: str, args: Sequence[str], params: Mapping[str, str]) -> str:
        """A command to run."""
        keywords = "".join(f", {k}={python_value(v)}" for k, v in params.items())
        values = [python_value(a) for a in args]
        if name in _API_CALLS and values:
            return _API_CALLS[name].format(values[0], "".join(f", {v}" for v in values[1:]) + keywords)
        listed = ", ".join(values) + keywords if values else keywords.removeprefix(", ")
        return f"nas.api.{name.replace('-', '_')}({listed})"


PYTHON = Words()


def render(text: str, words: Words = PYTHON) -> str:
    """`text` (one problem or note a line, with markers) in `words`."""
    def lead(match: re.Match[str]) -> str:
        return words.param(match.group(1))

    def quoted(match: re.Match[str]) -> str:
        return match.group(1) + words.param(match.group(2))

    def run(match: re.Match[str]) -> str:
        tokens = shlex.split(match.group(2))
        args = [t for t in tokens if "=" not in t]
        params = dict(t.split("=", 1) for t in tokens if "=" in t)
        return words.command(match.group(1), args, params)

    def ref(match: re.Match[str]) -> str:
        return words.ref(match.group(1), match.group(2))

    lines = (_WORKER_PARAM.sub(quoted, _LEADING_PARAM.sub(lead, line, count=1)) for line in text.split("\n"))
    return _PARAM_REF.sub(ref, _COMMAND.sub(run, "\n".join(lines)))


def leading_param(line: str) -> str | None:
    """The parameter a problem line starts with (`max_macs` of `max_macs: ...`, `score` of
    `score auto: ...`), or None."""
    match = _LEADING_PARAM.match(line)
    return match.group(1) if match else None


_words: Words = PYTHON


def announce(text: str) -> None:
    """Print `text` on stderr, in the words of the front end."""
    print(render(text, _words), file=sys.stderr)


@contextmanager
def wording(words: Words) -> Iterator[None]:
    """Word every `announce` with `words` inside the block."""
    global _words
    before, _words = _words, words
    try:
        yield
    finally:
        _words = before
