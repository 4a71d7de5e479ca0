"""Who holds a lock, claim or running trial, and whether that process is still alive.

Every lock, claim and storage check records a `ProcessIdentity` (`this_process()`) and judges
a recorded one with `alive`. A pid only means something inside the PID namespace that
issued it, on the machine (boot) that runs it, so an identity carries its `place`: the host
name, the kernel's boot id and the inode of the PID namespace. Containers that share a host
name differ in their namespace; two machines in the initial namespace differ in boot id.
The process start time (clock ticks since boot) tells a reused pid from its first owner.

On disk an identity is one line of `key=value` words (`pid=12 host=h boot=... pidns=... start=...`),
or a dict with those keys in a JSON record; a record written before these fields existed
parses to None, and its holder is judged by other means (its heartbeat).

`worker_pool` starts the spawned worker processes of every pool (search workers, finalists,
ground-truth trainings): one torch thread each, gone with their parent.
"""
from __future__ import annotations

import contextlib
import functools
import os
import socket
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Mapping

from nas.core.errors import Interrupted

if TYPE_CHECKING:
    # imported on use only: it imports multiprocessing.util, whose exit handler, registered before
    # torch's, would run after torch has flagged the exit, when a streamed source's DataLoader
    # workers no longer stop (torch skips their shutdown then) and the exit waits for them forever
    from concurrent.futures import ProcessPoolExecutor

_PLACE_KEYS = ("host", "boot", "pidns")
_DEAD_STATES = ("Z", "X")     # zombie, dead: exited, only waiting to be reaped


@dataclass(frozen=True)
class ProcessIdentity:
    """A process as another process can later find it: its pid where it lives, and when it started.

    Attributes:
        pid: The process id inside its PID namespace.
        host: The host name.
        boot: The kernel's boot id ('' where the system has none).
        pidns: The inode of the process's PID namespace ('' where unknown).
        start: Start time in clock ticks since boot, or None where unknown.
    """

    pid: int
    host: str
    boot: str
    pidns: str
    start: int | None = None

    @property
    def place(self) -> tuple[str, str, str]:
        """(host, boot, pidns): processes of one place see each other's pids."""
        return self.host, self.boot, self.pidns

    def to_text(self) -> str:
        """One line of `key=value` words (host names hold no spaces)."""
        start = "" if self.start is None else self.start
        return f"pid={self.pid} host={self.host} boot={self.boot} pidns={self.pidns} start={start}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProcessIdentity | None:
        """The identity a record holds, or None when it lacks a field (an older format)."""
        pid, start = data.get("pid"), data.get("start")
        if not _is_pid(pid) or not all(isinstance(data.get(key), str) for key in _PLACE_KEYS):
            return None
        start = start if _is_pid(start) else None
        return cls(pid, data["host"], data["boot"], data["pidns"], start)

    @classmethod
    def from_text(cls, text: str) -> ProcessIdentity | None:
        """The identity in `key=value` words (other words are ignored), or None when one is missing."""
        fields = dict(word.split("=", 1) for word in text.split() if "=" in word)
        pid, start = fields.get("pid", ""), fields.get("start", "")
        if not pid.isdigit():
            return None
        return cls.from_dict({**fields, "pid": int(pid), "start": int(start) if start.isdigit() else None})


def _is_pid(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


@functools.cache
def _place() -> tuple[str, str, str]:
    try:
        namespace = os.readlink("/proc/self/ns/pid")          # "pid:[4026531836]"
    except OSError:
        namespace = ""
    return socket.gethostname(), _read("/proc/sys/kernel/random/boot_id"), "".join(filter(str.isdigit, namespace))


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time) of `pid` from /proc, or None when it cannot be read."""
    text = _read(f"/proc/{pid}/stat")
    fields = text.rsplit(")", 1)[-1].split() if text else []     # the name in (...) may hold spaces
    if len(fields) < 20 or not fields[19].isdigit():
        return None
    return fields[0], int(fields[19])


def this_process() -> ProcessIdentity:
    """The identity of the calling process (read afresh: a forked child has its own)."""
    pid = os.getpid()
    stat = _stat(pid)
    return ProcessIdentity(pid, *_place(), start=stat[1] if stat else None)


def pid_alive(pid: int, start: int | None = None) -> bool:
    """Whether process `pid` of this PID namespace runs: it exists, is no zombie (exited, not
    yet reaped) and, when `start` is given, started then (a reused pid is another process)."""
    stat = _stat(pid)
    if stat is not None:
        state, started = stat
        return state not in _DEAD_STATES and (start is None or started == start)
    try:            # no /proc (or it hides the pid): only existence can be asked
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def alive(identity: ProcessIdentity) -> bool:
    """Whether the process `identity` names may still run.

    A process of this place (same host, boot and PID namespace) is judged: dead when its pid
    is gone, a zombie, or now another process (start time differs). A process of another
    place cannot be judged from here (its pid means nothing in this namespace) and counts as
    alive: the caller falls back on a heartbeat or a timeout.
    """
    if identity.place != _place():
        return True
    return pid_alive(identity.pid, identity.start)


def exit_with_parent(parent: int, poll_s: float = 0.5) -> None:
    """Make the calling process (a spawned worker) exit as soon as its parent `parent` has died.

    A pool's worker outlives a parent killed by a signal it does not handle (SIGKILL, or
    SIGTERM in a process without a handler), and would go on using a core, or sit idle,
    holding its claims. A dead parent's children are handed to another process, so a daemon
    thread watches `os.getppid()` and ends this process (exit code 1) once it is no longer
    `parent`. The parent passes its own pid (`worker_pool` does): read here, after a parent
    that died during the worker's start-up, it would be the new parent's, watched for good.
    """
    import threading
    import time

    if os.getppid() != parent:
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def worker_pool(workers: int, initializer: Callable[..., None] | None = None,
                initargs: tuple[Any, ...] = ()) -> ProcessPoolExecutor:
    """A pool of `workers` spawned processes of one torch thread each (N processes share the
    cores), which exit when this process dies (`exit_with_parent`), then run `initializer(*initargs)`.

    Its resource tracker goes with them: it ends once no process holds its pipe. A script that
    uses it needs an `if __name__ == "__main__":` guard (spawn imports the main module).
    """
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), initializer=_start_worker,
                               initargs=(os.getpid(), initializer, initargs))


def terminate_workers(pool: Any) -> None:
    """Terminate the processes of a `worker_pool` at once (on SIGTERM or Ctrl-C: their work is
    what a rerun resumes), so that leaving its block does not wait for them."""
    # private in Python < 3.14 (which adds terminate_workers): the pool's processes
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        process.terminate()


@contextlib.contextmanager
def stopped_on_interrupt(pool: Any) -> Iterator[None]:
    """Inside the block, SIGTERM's `Interrupted` or Ctrl-C terminates the pool's processes
    (`terminate_workers`) on its way out: leaving the pool's own block waits for its work."""
    try:
        yield
    except (Interrupted, KeyboardInterrupt):
        terminate_workers(pool)
        raise


def _start_worker(parent: int, initializer: Callable[..., None] | None, initargs: tuple[Any, ...]) -> None:
    exit_with_parent(parent)
    import threading

    import torch
    from tqdm.std import tqdm

    # tqdm's default lock is a multiprocessing one, this process's own (it guards nothing across
    # spawned processes): a worker terminated on SIGTERM left it to the resource tracker, which
    # warned of a leaked semaphore below the one line the command prints
    tqdm.set_lock(threading.RLock())

    torch.set_num_threads(1)
    if initializer is not None:
        initializer(*initargs)
