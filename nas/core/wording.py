"""Announcements the layers below the CLI print on stderr while they work, worded by the front end.

Engine code names the parameters of the Python API (`score auto: ...`); the CLI words them with
its flags (`--score auto: ...`) by setting `wording` for the length of a command, as it does
for the errors it catches.
"""
from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_wording: Callable[[str], str] = str


def announce(text: str) -> None:
    """Print `text` on stderr, as the front end words it."""
    print(_wording(text), file=sys.stderr)


@contextmanager
def wording(words: Callable[[str], str]) -> Iterator[None]:
    """Word every `announce` with `words` inside the block."""
    global _wording
    before, _wording = _wording, words
    try:
        yield
    finally:
        _wording = before
