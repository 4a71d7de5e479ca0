"""Optuna studies shared by worker processes, and a killed search that resumes.

Each worker is a subprocess (`python -m tests.searchers.stub`) with one thread: two torch
processes with two OpenMP threads each slow each other down tenfold on two cores.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import logging
import time
import multiprocessing
import signal
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
from optuna.trial import TrialState
from sqlalchemy.exc import OperationalError

from nas.core.arch import arch_id
from nas.core.errors import SearchError
from nas.core.processes import this_process
from searchers.optuna_storage import (GRACE_PERIOD, Heartbeat, StorageLost, ask_lock, fail_stale_trials, is_stale,
                                      open_storage, storage_errors, storage_file)
from tests.core.test_processes import gone_pid
from tests.support.safety import wait_for
from tests.searchers.stub import (  # noqa: F401
    StubEvaluator,
    finish,
    load_study,
    results,
    search_dir,
    small_space,
    start_worker,
    stub_search,
    target_arch,
)


def _ask_twice(url: str, out_dir: Path, ready, numbers) -> None:
    study = optuna.load_study(study_name="race", storage=open_storage(url, out_dir))
    space = {"x": optuna.distributions.CategoricalDistribution([0, 1, 2, 3])}
    ready.wait()      # both ask at once
    for _ in range(2):
        with ask_lock(storage_file(url, out_dir)):
            numbers.put(study.ask(space).number)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_two_workers_asking_at_once_never_pop_the_same_enqueued_trial(tmp_path, kind):
    """Without the ask lock Optuna 5 hands one WAITING trial to both on SQLite in most rounds
    (and on a journal shared by forked processes); with it each trial goes to one worker."""
    context = multiprocessing.get_context("fork")       # the children use no torch
    for round_ in range(10):
        url = f"sqlite:///{tmp_path}/r{round_}.db" if kind == "sqlite" else f"journal:///{tmp_path}/r{round_}.log"
        study = optuna.create_study(study_name="race", storage=open_storage(url, tmp_path))
        study.enqueue_trial({"x": 1})
        study.enqueue_trial({"x": 2})
        ready, numbers = context.Barrier(2), context.Queue()
        workers = [context.Process(target=_ask_twice, args=(url, tmp_path, ready, numbers)) for _ in range(2)]
        for worker in workers:
            worker.start()
        asked = [numbers.get(timeout=60) for _ in range(4)]
        for worker in workers:
            worker.join(timeout=60)
            assert worker.exitcode == 0
        assert sorted(asked) == [0, 1, 2, 3], asked     # a trial popped twice repeats its number


def test_an_ask_lock_that_cannot_be_created_names_the_storage_argument(tmp_path):
    database = tmp_path / "study.db"
    (tmp_path / "study.db.ask.lock").mkdir()        # the lock's name is taken by a folder
    with pytest.raises(SearchError, match=r"^storage: cannot create .*study\.db\.ask\.lock \(Is a directory\)"):
        with ask_lock(storage_file(f"sqlite:///{database}", tmp_path)):
            pass


@pytest.mark.slow
def test_two_workers_share_one_sqlite_study(search_dir):
    url = f"sqlite:///{search_dir}/study.db"
    common = ["--searcher", "optuna-tpe", "--trials", "10", "--storage", url, "--study", "shared", "--meet", "2"]
    finish([start_worker(search_dir, *common, "--worker", str(k)) for k in (0, 1)])
    study = load_study(url, search_dir, "shared")
    complete = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(complete) == 10
    assert not study.get_trials(states=(TrialState.RUNNING,))
    records = results(search_dir)  # both workers append to the one results.jsonl
    assert sorted(r["trial"] for r in records) == sorted(t.number for t in complete)
    assert len({r["arch_id"] for r in records}) == 10
    assert {t.user_attrs["nas"]["worker"] for t in complete} == {0, 1}


@pytest.mark.slow
def test_killed_search_resumes_without_rerunning_finished_trials(search_dir):
    url = f"journal://{search_dir}/study.log"
    args = ["--searcher", "optuna-nsga2", "--trials", "10", "--storage", url, "--study", "killed", "--hold-after", "3"]
    worker = start_worker(search_dir, *args)
    wait_for((search_dir / "holding").exists, worker, "the fourth evaluation")
    worker.send_signal(signal.SIGKILL)               # inside that evaluation, not inside a storage write
    worker.wait()
    finished = {r["arch_id"] for r in results(search_dir)}
    assert len(finished) == 3
    study = load_study(url, search_dir, "killed")
    orphans = len(study.get_trials(states=(TrialState.RUNNING,)))
    assert orphans == 1                              # the killed worker's trial

    space = small_space()
    evaluate = StubEvaluator(space, target_arch(space))
    result = stub_search(search_dir, "optuna-nsga2", 10, evaluate, storage=url, study="killed")
    assert len(evaluate.calls) == 10 - len(finished) and not finished & set(evaluate.calls)
    assert result.evaluated == 10
    study = load_study(url, search_dir, "killed")
    assert len(study.get_trials(states=(TrialState.COMPLETE,))) == 10
    assert not study.get_trials(states=(TrialState.RUNNING,))
    assert len(study.get_trials(states=(TrialState.FAIL,))) == orphans  # the killed worker's trial
    assert len({r["arch_id"] for r in results(search_dir)}) == 10


def test_a_duplicate_is_seen_while_the_other_worker_has_not_tagged_its_trial(search_dir):
    # Worker A has asked a trial (its parameters are stored) but not yet written its `nas`
    # attribute (a loaded machine can stall it there for seconds); worker B asks the same arch.
    from searchers.base import SearchContext
    from searchers.optuna_searcher import TPEOptions, TPESearcher

    space = small_space()
    url = f"sqlite:///{search_dir}/study.db"
    context = SearchContext(space, 10, 0, 1, ("macs",), {}, search_dir, url, "race", {"searcher": "optuna-tpe"},
                            None, None, None)
    searcher = TPESearcher(context, TPEOptions())
    arch = space.canonical(space.max())
    study = searcher.study
    study.enqueue_trial(dict(arch))
    other = study.ask(searcher.distributions)             # worker A's trial, untagged
    study.enqueue_trial(dict(arch))
    mine = searcher.ask()                                  # worker B draws the same arch
    assert mine == arch and other.number < searcher.trial_number()
    started = time.monotonic()
    assert searcher.duplicate(arch_id(arch)) == other.number
    assert time.monotonic() - started < 1.0                # recognised from its parameters, no waiting
    searcher.close()


def _running(info, heartbeat_age: float | None = None, now: float = 1e9):
    """A running trial as `is_stale` reads it, started 1 s before `now`."""
    attrs = {"nas": info} if heartbeat_age is None else {"nas": info, "nas_heartbeat": now - heartbeat_age}
    return SimpleNamespace(user_attrs=attrs, datetime_start=datetime.fromtimestamp(now - 1, tz=timezone.utc))


def test_a_running_trial_is_stale_when_its_worker_is_judged_dead_or_silent():
    me = this_process()
    gone = dataclasses.replace(me, pid=gone_pid())
    record = {"arch_id": "a", "worker": 0}
    assert is_stale(_running({**record, **gone.to_dict()}), 1e9)                       # pid gone here
    assert is_stale(_running({**record, **me.to_dict()}), 1e9)                         # this process asks now
    elsewhere = {**record, **dataclasses.replace(gone, pidns="1").to_dict()}           # another container
    assert not is_stale(_running(elsewhere, heartbeat_age=GRACE_PERIOD - 1), 1e9)
    assert is_stale(_running(elsewhere, heartbeat_age=GRACE_PERIOD + 1), 1e9)
    older = {**record, "host": f"{me.host}/pid:[{me.pidns}]", "pid": gone.pid}         # a record of an older version
    assert not is_stale(_running(older), 1e9) and is_stale(_running(older, heartbeat_age=GRACE_PERIOD + 1), 1e9)


def test_a_stale_trial_another_worker_fails_first_is_left_to_it():
    """Two workers may both judge a trial stale; the one whose write comes second skips it (Optuna
    raises UpdateFinishedTrialError there) instead of failing its own ask."""
    study = optuna.create_study()
    gone = dataclasses.replace(this_process(), pid=gone_pid())
    stale = study.ask()
    stale.set_user_attr("nas", gone.to_dict())
    storage, write = study._storage, study._storage.set_trial_state_values

    def failed_by_another_first(trial_id, state, values=None):
        write(trial_id, TrialState.FAIL)                      # the other worker's write lands first
        raise optuna.exceptions.UpdateFinishedTrialError("Trial#0 has already finished and can not be updated.")

    storage.set_trial_state_values = failed_by_another_first
    assert fail_stale_trials(study) == []
    assert study.trials[stale.number].state == TrialState.FAIL


def test_a_storage_url_whose_driver_is_missing_names_it_and_the_extra(tmp_path):
    if importlib.util.find_spec("pg8000") is not None:
        pytest.skip("pg8000 is installed here: no missing driver to name")
    with pytest.raises(SearchError, match=r"^storage: cannot open postgresql\+pg8000://bob:\*\*\*@127\.0\.0\.1:1/nas: "
                                          r"its database driver is missing \(No module named 'pg8000'\); .*"
                                          r"pip install -e '\.\[postgres\]'$"):
        open_storage("postgresql+pg8000://bob:hunter2@127.0.0.1:1/nas", tmp_path)


def test_a_database_error_mid_search_is_one_line_in_the_drivers_words_password_masked():
    url = "postgresql://bob:hunter2@db.example/nas"
    driver = RuntimeError("server closed the connection unexpectedly\n\tThis probably means the server terminated")
    with pytest.raises(StorageLost) as raised:
        with storage_errors(url):
            try:
                raise OperationalError("SELECT trials.trial_id FROM trials", {"password": "hunter2"}, driver)
            except OperationalError as e:     # how Optuna's RDB storage reports a failed commit
                raise optuna.exceptions.StorageInternalError("An exception is raised during the commit.") from e
    assert str(raised.value) == ("storage: lost postgresql://bob:***@db.example/nas mid-search: server closed the "
                                 "connection unexpectedly This probably means the server terminated; the study keeps "
                                 "every completed trial: run the same command again to resume")
    assert raised.value.exit_code == 1


def test_a_failed_heartbeat_is_one_warning_line_in_the_drivers_words(caplog):
    class LostTrial:        # a trial whose database went away
        number = 7

        def set_user_attr(self, key, value):
            raise OperationalError("UPDATE trial_user_attributes SET value_json=...", {},
                                   RuntimeError("server closed the connection\n\tunexpectedly"))
    heartbeat = Heartbeat(0.01)
    with caplog.at_level(logging.WARNING, logger="searchers.optuna_storage"):
        heartbeat.beat(LostTrial())
        deadline = time.monotonic() + 60
        while not caplog.records and time.monotonic() < deadline:
            time.sleep(0.01)
        heartbeat.close()
    assert caplog.records[0].getMessage() == "heartbeat of trial 7 failed: server closed the connection unexpectedly"
