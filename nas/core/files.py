"""Atomic writes: a temporary file (or folder) beside the target, then one rename.

A reader (or a process killed mid-write) sees the old file or the new one, never half of
one. Temporary names carry the process id because several search workers share a folder.
`check_writable` is the check before long work: can the folder be written, is there room.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterator

from nas.core.errors import PathError
from nas.core.processes import pid_alive

MIN_FREE_BYTES = 16 << 20     # room every writing command asks for beyond its own estimate


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def with_path(error: OSError, path: Path) -> OSError:
    """`error` naming `path` (writes through a file object raise OSErrors without a file name)."""
    if error.filename is not None:
        return error
    return type(error)(error.errno, error.strerror or str(error), str(path))


@contextmanager
def record_lock(path: str | Path) -> Iterator[None]:
    """Hold the lock file `path` (created if missing) exclusively for the block: a POSIX record
    lock (`lockf`, which NFS clients share through the server). It excludes processes, not the
    threads of one process.

    Raises:
        OSError: `path` cannot be created.
    """
    with open(path, "a") as f:
        fcntl.lockf(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.lockf(f, fcntl.LOCK_UN)


def temporary_path(path: Path) -> Path:
    """Where `atomic_file` writes `path` first: its own per process and thread, so two threads
    writing one file at once never share (and delete) each other's temporary file."""
    return path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")


@contextmanager
def atomic_file(path: str | Path, mode: str = "w", durable: bool = False) -> Iterator[IO[Any]]:
    """Open a temporary file that replaces `path` when the block ends without an error.

    `durable` also fsyncs the file and its directory, so the new content survives a power
    loss (checkpoints); on an error the temporary file is removed and `path` is untouched.
    """
    path = Path(path)
    tmp = temporary_path(path)
    try:
        with open(tmp, mode) as f:
            yield f
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        raise with_path(e, path) from e
    finally:
        if tmp.exists():
            tmp.unlink()
    if durable:
        _fsync_dir(path.parent)


def write_text(path: str | Path, text: str) -> Path:
    """Replace `path` with `text` atomically."""
    with atomic_file(path) as f:
        f.write(text)
    return Path(path)


def write_json(path: str | Path, data: Any, indent: int | None = 2) -> Path:
    """Replace `path` with `data` as JSON (newline-terminated) atomically."""
    return write_text(path, json.dumps(data, indent=indent) + "\n")


# -- folders ------------------------------------------------------------------------------
@contextmanager
def _signals_blocked() -> Iterator[None]:
    """SIGINT/SIGTERM wait until the block ends (the two renames of a folder swap)."""
    signals = {signal.SIGINT, signal.SIGTERM}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _leftovers(path: Path, suffix: str) -> list[Path]:
    """`.NAME.<pid>.<suffix>` folders beside `path` left by processes that are gone."""
    if not path.parent.is_dir():
        return []
    prefix, end, found = f".{path.name}.", f".{suffix}", []
    for candidate in path.parent.iterdir():
        name = candidate.name
        pid = name[len(prefix): -len(end)] if name.startswith(prefix) and name.endswith(end) else ""
        if pid.isdigit() and not pid_alive(int(pid)):
            found.append(candidate)
    return found


def recover_dir(path: str | Path) -> None:
    """Undo what a process killed inside `atomic_dir` left: put a moved-aside folder back
    (killed between the two renames) and remove unfinished temporary folders."""
    path = Path(path)
    for old in _leftovers(path, "old"):
        if not path.exists():
            os.rename(old, path)
        else:
            shutil.rmtree(old, ignore_errors=True)
    for tmp in _leftovers(path, "tmp"):
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Fill a temporary folder beside `path`; it replaces `path` when the block ends without an error.

    The files are fsynced, then the old folder (if any) is moved aside, the new one renamed
    into place and the old one removed; SIGINT/SIGTERM are held during the two renames. A
    process killed at any point leaves the old folder or the complete new one at `path`
    (`recover_dir`, run first, puts back a folder a SIGKILL left moved aside).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    recover_dir(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    old = path.with_name(f".{path.name}.{os.getpid()}.old")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        for child in tmp.iterdir():
            if child.is_file():
                with open(child, "rb") as f:
                    os.fsync(f.fileno())
        _fsync_dir(tmp)
        with _signals_blocked():
            if path.exists():
                os.rename(path, old)
            os.rename(tmp, path)
        _fsync_dir(path.parent)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def not_text(error: UnicodeDecodeError) -> str:
    """How an error line says a file meant as text is not: `not a UTF-8 text file (byte 0xff at offset 0)`."""
    return f"not a UTF-8 text file (byte {error.object[error.start]:#04x} at offset {error.start})"


def format_bytes(count: float) -> str:
    """`1.5 GiB`, `12 MiB`, `800 B`."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.3g} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


def check_writable(folder: str | Path, flag: str, need_bytes: int = 0) -> Path:
    """Raise `PathError` naming `flag` unless files can be written in `folder` (created later if
    missing) and its file system has `need_bytes` + `MIN_FREE_BYTES` free; returns `folder`."""
    folder = Path(folder)
    existing = folder
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        raise PathError(f"{flag}: {existing} is a file, not a folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=".nas-probe-", dir=existing)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise PathError(f"{flag}: cannot write in {existing} ({e.strerror})") from e
    free = shutil.disk_usage(existing).free
    need = need_bytes + MIN_FREE_BYTES
    if free < need:
        raise PathError(f"{flag}: {existing} has {format_bytes(free)} free, {format_bytes(need)} needed; "
                        f"free some space or choose another folder")
    return folder
