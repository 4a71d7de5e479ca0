"""SIGTERM during an export: one line saying that a rerun resumes, exit 143 (as `nas train` says)."""
from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

from nas.core.errors import Interrupted

# What an export stopped by SIGTERM says after the signal's name.
STOPPED = ("the export stopped before its files were written (an earlier export in that folder is left as it "
           "was); run the same nas export again: a fine-tune resumes from its last saved state")


@contextlib.contextmanager
def stopped_by_sigterm(stopped: str = STOPPED) -> Iterator[None]:
    """Inside the block (in the main thread), SIGTERM raises `Interrupted` saying `stopped`
    (default `STOPPED`: the fine-tune's saved state and an earlier export stay, a temporary folder
    is cleaned up; a family search says what it keeps)."""
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
