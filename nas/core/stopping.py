"""SIGTERM as one line: inside `sigterm_raises(stopped)`, SIGTERM raises `Interrupted` (exit 143)
saying the signal's name and `stopped` (what was kept, and that a rerun resumes), as `nas train`
says, instead of killing the process silently. The caller's cleanup runs on the way out."""
from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

from nas.core.errors import Interrupted

__all__ = ["sigterm_raises"]


@contextlib.contextmanager
def sigterm_raises(stopped: str) -> Iterator[None]:
    """Inside the block (in the main thread; elsewhere nothing changes), SIGTERM raises
    `Interrupted` saying `SIGTERM: <stopped>`."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        raise Interrupted(f"{signal.Signals(signum).name}: {stopped}", signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
