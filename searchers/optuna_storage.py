"""Optuna storages for shared studies, and the liveness of their running trials.

Storage URLs: any RDB URL Optuna accepts (`sqlite:///search.db`, `postgresql://...`) and
`journal:///abs/path.log` (or `journal://rel/path.log`) for Optuna's journal file storage;
None means a journal file `optuna.journal` in the search directory.

Liveness works the same on every storage (Optuna's own heartbeat exists only for RDB and
only inside `study.optimize`): a running trial carries the user attribute `nas` =
`{"arch_id", "worker"}` plus its worker's process identity (`worker_info`) and a
`nas_heartbeat` (unix time) that a thread refreshes every `HEARTBEAT_INTERVAL` seconds. A
running trial is stale, and is failed, when `nas.core.processes.alive` judges its worker dead
(same host and PID namespace, pid gone or a zombie) or when its heartbeat is older than
`GRACE_PERIOD` seconds (a worker killed on another machine or in another container).

A database server that goes away mid-search (`storage_errors`) stops the search with one line
(`StorageLost`, password masked); its completed trials stay in the database, and the same
command resumes once it is back (the lost worker's running trial is then failed as stale).
"""
from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import optuna
from optuna.storages import BaseStorage, JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError, SQLAlchemyError

from nas.core.errors import SearchError, clip, clip_words
from nas.core.files import record_lock
from nas.core.processes import ProcessIdentity, alive, this_process

GRACE_PERIOD = 60.0
HEARTBEAT_INTERVAL = GRACE_PERIOD / 6
DEFAULT_JOURNAL = "optuna.journal"
_OPEN_ATTEMPTS = 5
_log = logging.getLogger(__name__)


def worker_info(arch_id: str, worker: int) -> dict[str, Any]:
    """The `nas` user attribute of a trial this process runs."""
    return {"arch_id": arch_id, "worker": worker, **this_process().to_dict()}


_PASSWORD = re.compile(r"(//[^/:@]*:)([^/@]*)@")


def mask_url(text: str, url: str | None = None) -> str:
    """`text` with the password of every `scheme://user:password@host` URL (and of `url`) as `***`."""
    if url is not None and (found := _PASSWORD.search(url)) is not None and found.group(2):
        text = text.replace(found.group(2), "***")
    return _PASSWORD.sub(r"\1***@", text)


def check_journal(path: Path) -> None:
    """Refuse, without writing to it, a file that exists but is not an Optuna journal."""
    if path.is_dir():
        raise SearchError(f"storage: {path} is a folder; give a journal file, e.g. journal:///tmp/search.log")
    if not path.is_file() or path.stat().st_size == 0:
        return
    try:
        with open(path, "rb") as f:          # read-only: a file that is not a journal stays untouched
            first = f.readline(1 << 20)
        record = json.loads(first)
    except (OSError, ValueError) as e:
        record = e
    if not isinstance(record, dict) or "op_code" not in record:
        raise SearchError(f"storage: {path} is not an Optuna journal (its first line is not a journal record); "
                          f"give a new file or an existing journal")


def open_storage(url: str | None, out_dir: Path) -> BaseStorage:
    """The Optuna storage of a search (see the module docstring for URLs)."""
    if url is None or url.startswith("journal://"):
        if url is not None and not url[len("journal://"):]:
            raise SearchError("storage: journal:// needs a file path, e.g. journal:///tmp/search.log")
        path = storage_file(url, out_dir)
        check_journal(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            return JournalStorage(JournalFileBackend(str(path)))
        except OSError as e:
            raise SearchError(f"storage: cannot open {path} ({e.strerror})") from e
    engine_kwargs: dict[str, Any] = {"connect_args": {"timeout": 120}} if url.startswith("sqlite") else {}
    for attempt in range(_OPEN_ATTEMPTS):
        try:
            return RDBStorage(url, engine_kwargs=engine_kwargs)
        except (IntegrityError, OperationalError) as e:  # workers starting together race to create the schema
            if attempt == _OPEN_ATTEMPTS - 1:
                raise _cannot_open(url, e) from e
            time.sleep(0.2 * (attempt + 1))
        except Exception as e:  # sqlalchemy and its drivers raise many types for bad URLs
            raise _cannot_open(url, e) from e
    raise AssertionError("unreachable")


def storage_file(url: str | None, out_dir: Path) -> Path | None:
    """The local file holding the storage of `url` (a journal, a SQLite database), or None
    (a database server, or SQLite in memory)."""
    if url is None or url.startswith("journal://"):
        return out_dir / DEFAULT_JOURNAL if url is None else Path(url[len("journal://"):])
    if url.startswith("sqlite"):
        database = make_url(url).database
        return Path(database) if database and database != ":memory:" else None
    return None


@contextlib.contextmanager
def ask_lock(path: Path | None) -> Iterator[None]:
    """Hold the storage file `path` exclusively for the block (None: nothing to hold).

    Optuna hands an enqueued (WAITING) trial to whichever `study.ask` sets it RUNNING, but on
    SQLite (no SELECT ... FOR UPDATE), and more rarely on a journal file, two processes asking
    at once can both do so and evaluate the same trial, and the second to finish it fails
    ("Trial#3 has already finished and can not be updated"). Asking under this
    POSIX record lock (`lockf`, which NFS clients honour too) makes each pop atomic; a
    database server locks the row itself.
    """
    if path is None:
        yield
        return
    lock = path.with_name(f"{path.name}.ask.lock")
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(record_lock(lock))
        except OSError as e:      # only the lock's own errors, not those of the block
            raise SearchError(f"storage: cannot create {lock} ({e.strerror}), the lock of its asks") from e
        yield


def _cannot_open(url: str, error: Exception) -> SearchError:
    if isinstance(error, ImportError):      # the URL's driver, e.g. psycopg for postgresql://
        missing = error.__cause__ if isinstance(error.__cause__, ImportError) else error   # Optuna's wraps it
        return SearchError(f"storage: cannot open {clip(mask_url(url))}: its database driver is missing ({missing}); "
                           f"PostgreSQL's comes with the postgres extra: pip install -e '.[postgres]'")
    return SearchError(f"storage: cannot open {clip(mask_url(url))}: {_reason(error, url)}")


def _reason(error: BaseException, url: str | None) -> str:
    """The driver's own words for a database error (not SQLAlchemy's wrapping), one line, masked."""
    while error.__cause__ is not None and not isinstance(error, SQLAlchemyError):
        error = error.__cause__                      # Optuna's StorageInternalError wraps SQLAlchemy's
    if isinstance(error, DBAPIError) and error.orig is not None:
        error = error.orig
    text = " ".join(str(error).split()) or type(error).__name__
    return clip_words(mask_url(text, url))


class StorageLost(SearchError):
    """The storage failed mid-search (a database server stopped or unreachable): not bad input."""

    exit_code = 1


@contextlib.contextmanager
def storage_errors(url: str | None) -> Iterator[None]:
    """Turn a database error inside the block into `StorageLost`, one line naming `url` (masked)."""
    try:
        yield
    except (SQLAlchemyError, optuna.exceptions.StorageInternalError) as e:
        raise StorageLost(f"storage: lost {clip(mask_url(str(url)))} mid-search: {_reason(e, url)}; the study "
                          f"keeps every completed trial: run the same command again to resume") from e


def is_stale(trial: FrozenTrial, now: float) -> bool:
    """Whether a running trial's worker is gone (see the module docstring); a trial recorded by
    this very process is not running any more either (it is asking now)."""
    info = trial.user_attrs.get("nas")
    worker = ProcessIdentity.from_dict(info) if isinstance(info, dict) else None   # None: an older record
    if worker is not None and (worker == this_process() or not alive(worker)):
        return True
    start = trial.datetime_start.timestamp() if trial.datetime_start else now
    return now - float(trial.user_attrs.get("nas_heartbeat", start)) > GRACE_PERIOD


def fail_stale_trials(study: optuna.Study, keep: int | None = None) -> list[int]:
    """Fail the stale running trials of `study` (except trial number `keep`); their numbers."""
    failed, now = [], time.time()
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if trial.number != keep and is_stale(trial, now):
            try:
                study.tell(trial.number, state=TrialState.FAIL, skip_if_finished=True)
            except optuna.exceptions.UpdateFinishedTrialError:
                continue    # another worker failed it between our read and our write
            failed.append(trial.number)
    return failed


class Heartbeat:
    """A daemon thread refreshing `nas_heartbeat` of the current trial, if any."""

    def __init__(self, interval: float):
        self.lock = threading.Lock()
        self.trial: optuna.Trial | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True, name="nas-heartbeat")
        self._thread.start()

    def beat(self, trial: optuna.Trial | None) -> None:
        """Start beating for `trial` (None: stop); returns once no beat is in flight."""
        with self.lock:
            self.trial = trial  # until the first beat, staleness counts from the trial's start

    def _run(self, interval: float) -> None:
        while not self._stop.wait(interval):
            with self.lock:
                if self.trial is None:
                    continue
                try:
                    self.trial.set_user_attr("nas_heartbeat", time.time())
                except Exception as e:  # a busy storage: the next beat tries again
                    _log.warning("heartbeat of trial %d failed: %s", self.trial.number, _reason(e, None))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
