"""The lifetime of DataLoader worker processes: a pass over a loader owns its workers and stops
them when it ends, when it is closed or dropped unfinished, or when the process exits.

Workers ignore SIGTERM (see `nas.engine.data.streaming`), so multiprocessing's exit handler,
which terminates then joins a process's children, would wait forever for the workers of a pass
left unfinished but still referenced at exit (a global, or a frame kept by an exception's
traceback). So the workers are stopped first: by a multiprocessing finalizer, which that handler
runs before it terminates anything (the only exit hook a spawned process runs), and, in the main
process, by an exit hook registered after torch's, which runs before both: once torch has seen the
interpreter exit, its worker shutdown does nothing, and which of torch's and multiprocessing's
hooks comes first depends on what the program imported first.
"""
from __future__ import annotations

import atexit
import multiprocessing.util
import weakref
from typing import Any, Callable, Iterator

from torch.utils.data import DataLoader     # registers torch's exit hook before ours below

_pending: weakref.WeakSet = weakref.WeakSet()


def when_gone(owner: object, stop: Callable[..., None], *args: Any) -> Callable[[], None]:
    """Arrange `stop(*args)` once: when `owner` is collected, when the returned function is
    called, or at the process's exit before its worker processes are terminated."""
    finalizer = multiprocessing.util.Finalize(owner, stop, args=args, exitpriority=100)
    _pending.add(finalizer)
    return finalizer


@atexit.register
def _run_pending() -> None:
    for finalizer in list(_pending):
        finalizer()


def stop_workers(iterator: Iterator) -> None:
    """Stop the worker processes of a DataLoader iterator, if it has any (torch offers no public close)."""
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()


class WorkerPass:
    """One pass over `loader`, an iterator whose worker processes stop when the pass is exhausted,
    `close()`d, garbage-collected or left at the process's exit."""

    def __init__(self, loader: DataLoader):
        self._iterator = iter(loader)
        self._stop = when_gone(self, stop_workers, self._iterator)

    def __iter__(self) -> WorkerPass:
        return self

    def __next__(self) -> Any:
        try:
            return next(self._iterator)
        except BaseException:       # exhausted, or a worker failed: either way the pass is over
            self.close()
            raise

    def close(self) -> None:
        """Stop the workers now; the pass yields nothing more."""
        self._stop()
        self._iterator = iter(())
