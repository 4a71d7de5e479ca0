"""Exclusive advisory locks on folders, so two processes never write one run or one search; and
claims on pieces of work (`Claims`), so processes on one or several machines split them.

`folder_lock(folder, what)` takes `fcntl.flock` on `folder/.lock` and writes its process
identity there (`nas.core.processes`); a second process gets a one-line `RunError` naming the
holder's PID (and its host when it runs elsewhere). The kernel drops the lock
when its process ends, however it ends (exit, exception, signal, SIGKILL), so a stale `.lock`
file never blocks anyone. The file is left in place, unless `remove` asks its holder to delete
it (and its folder, when that exists only to be locked) before releasing it: a process that
opened it just before then finds, once it holds the lock, that the path no longer names that
file, and locks the path anew.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from nas.core.errors import RunError
from nas.core.processes import ProcessIdentity, alive, this_process

LOCK_FILE = ".lock"


def _holder(fd: int) -> str:
    """How the error names the process holding the lock, from what it wrote (a lock file of an
    older version holds its bare PID; an empty one was not written yet)."""
    try:
        text = os.pread(fd, 4096, 0).decode(errors="replace").strip()
    except OSError:
        text = ""
    identity = ProcessIdentity.from_text(text)
    if identity is not None:
        here = this_process()
        return f"process {identity.pid}" + ("" if identity.place == here.place else f" on {identity.host}")
    return f"process {text}" if text.isdigit() else "another process"


@contextmanager
def folder_lock(folder: str | Path, what: str, remove: bool = False) -> Iterator[Path]:
    """Hold an exclusive lock on `folder` (created if missing) for the block; yields the lock file.

    Args:
        folder: The folder to lock (a run, a search).
        what: How the error names it, e.g. "run" or "search".
        remove: Delete the lock file, and the folder if then empty, before releasing the lock (a
            folder that exists only to be locked). Safe: a process that locks a file already
            unlinked sees that the path no longer names it and opens the path again.

    Raises:
        RunError: Another process holds the lock (the message names its PID).
    """
    folder = Path(folder)
    path = folder / LOCK_FILE
    while True:
        folder.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:       # the folder was removed by its holder meanwhile
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise RunError(f"{folder}: this {what} is in use by {holder} (lock {path}); wait for it to finish "
                           f"or stop it") from None
        if _still_named(fd, path):
            break
        os.close(fd)        # its holder removed it meanwhile: lock the path's new file
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{this_process().to_text()}\n".encode(), 0)
        try:
            yield path
        finally:
            if remove:
                path.unlink(missing_ok=True)
                with contextlib.suppress(OSError):      # not empty, or already gone
                    folder.rmdir()
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _still_named(fd: int, path: Path) -> bool:
    """Whether `path` still names the file open as `fd` (not unlinked or replaced since)."""
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False


# -- claims: one process at a time per piece of work, across machines --------------------------
HEARTBEAT_S = 30.0      # a holder refreshes the mtime of its claim files this often
STALE_S = 180.0         # a claim whose file did not change for this long (by the observer's clock) is stale


_GONE = object()        # what `_stale_content` says of a claim file that vanished


class Claims:
    """Claim files of pieces of work shared by processes on one or several machines.

    `try_take(path)` creates `path` with `O_CREAT | O_EXCL` (atomic on local file systems and
    on NFS v3+) holding the holder's identity and a token (`pid=.. host=.. boot=.. pidns=..
    start=.. token=..`); while a claim is held, a daemon thread refreshes its mtime every
    `heartbeat_s`. A claim is stale, and taken over, when `nas.core.processes.alive` judges its
    holder dead (same host and PID namespace, pid gone or a zombie; a claim file of an older
    format is not judged so), or when its content and mtime did not change for `stale_s` of
    the observer's own monotonic clock (so no two machines' clocks are compared). A takeover
    renames the stale file aside before removing it, so two processes that both judged it
    stale cannot both remove a fresh claim; at worst (a claim created in the instant between
    a look and the rename) one piece of work is done twice, never lost. The files are
    advisory: they decide who does the work, the work's results are written atomically anyway.
    """

    def __init__(self, heartbeat_s: float = HEARTBEAT_S, stale_s: float = STALE_S):
        self.heartbeat_s, self.stale_s = heartbeat_s, stale_s
        self.token = f"{this_process().to_text()} token={uuid.uuid4().hex}"
        self._held: set[Path] = set()
        self._seen: dict[Path, tuple[bytes, int, float]] = {}    # path -> (content, mtime_ns, first seen)
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "Claims":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def try_take(self, path: str | Path) -> bool:
        """Claim `path` unless another live holder has it; True when this process holds it now."""
        path = Path(path)
        if self._create(path):
            return True
        stale = self._stale_content(path)
        if stale is _GONE:
            return self._create(path)
        if stale is None or not self._remove_stale(path, stale):
            return False
        return self._create(path)

    def release(self, path: str | Path) -> None:
        """Give up the claim on `path` (removing its file when it is still this process's)."""
        path = Path(path)
        with self._mutex:
            self._held.discard(path)
        if _read(path) == self._content():
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def close(self) -> None:
        """Release every claim and stop the heartbeat."""
        self._stop.set()
        for path in list(self._held):
            self.release(path)

    def _content(self) -> bytes:
        return f"{self.token}\n".encode()

    def _create(self, path: Path) -> bool:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        try:
            os.write(fd, self._content())
            os.fsync(fd)
        finally:
            os.close(fd)
        with self._mutex:
            self._held.add(path)
        self._seen.pop(path, None)
        self._start_heartbeat()
        return True

    def _stale_content(self, path: Path) -> Any:
        """The content of `path` when its claim is stale, else None (also when it vanished)."""
        try:
            mtime = path.stat().st_mtime_ns
        except FileNotFoundError:
            return _GONE           # released meanwhile: nothing to take over
        content = _read(path)
        if content is None:
            return _GONE if not path.exists() else None
        holder = ProcessIdentity.from_text(content.decode(errors="replace"))
        if holder is not None and not alive(holder):
            return content
        now = time.monotonic()
        seen = self._seen.get(path)
        if seen is None or seen[:2] != (content, mtime):
            self._seen[path] = (content, mtime, now)
            return None
        return content if now - seen[2] >= self.stale_s else None

    def _remove_stale(self, path: Path, stale: bytes) -> bool:
        """Remove the stale claim `path` (still holding `stale`); False when someone else got there first."""
        aside = path.with_name(f"{path.name}.{uuid.uuid4().hex}.stale")
        try:
            os.rename(path, aside)
        except FileNotFoundError:
            return True
        if _read(aside) != stale:       # a fresh claim was created after the look: put it back
            with contextlib.suppress(FileExistsError):
                os.link(aside, path)
            aside.unlink()
            return False
        aside.unlink()
        self._seen.pop(path, None)
        return True

    def _start_heartbeat(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._beat, name="claims-heartbeat", daemon=True)
            self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            with self._mutex:
                held = list(self._held)
            for path in held:
                with contextlib.suppress(OSError):      # taken over meanwhile: the work may run twice
                    os.utime(path)


def _read(path: Path) -> bytes | None:
    """The bytes of `path`, or None when it cannot be read (gone, or a transient NFS error)."""
    try:
        return path.read_bytes()
    except OSError:
        return None
