"""Exclusive advisory locks on folders, so two processes never write one run or one search.

`folder_lock(folder, what)` takes `fcntl.flock` on `folder/.lock` and writes its PID there; a
second process gets a one-line `RunError` naming the holder's PID. The kernel drops the lock
when its process ends, however it ends (exit, exception, signal, SIGKILL), so a stale `.lock`
file never blocks anyone; the file is left in place (removing it would race with a process
that just opened it).
"""
from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from nas.core.errors import RunError

LOCK_FILE = ".lock"


def _holder(fd: int) -> str:
    """The PID written by the process holding the lock, as text ('' if it has not written it yet)."""
    try:
        return os.pread(fd, 32, 0).decode(errors="replace").strip()
    except OSError:
        return ""


@contextmanager
def folder_lock(folder: str | Path, what: str) -> Iterator[Path]:
    """Hold an exclusive lock on `folder` (created if missing) for the block; yields the lock file.

    Args:
        folder: The folder to lock (a run, a search).
        what: How the error names it, e.g. "run" or "search".

    Raises:
        RunError: Another process holds the lock (the message names its PID).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _holder(fd)
            holder = f"process {pid}" if pid.isdigit() else "another process"
            raise RunError(f"{folder}: this {what} is in use by {holder} (lock {path}); wait for it to finish "
                           f"or stop it") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            yield path
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
