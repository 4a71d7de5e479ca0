"""Optuna studies shared by worker processes, and a killed search that resumes.

Each worker is a subprocess (`python -m tests.searchers.stub`) with one thread: two torch
processes with two OpenMP threads each slow each other down tenfold on two cores.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
from optuna.trial import TrialState

from nas.engine.search_runner import Constraints, run_search
from searchers.optuna_storage import open_storage
from tests.searchers.stub import (  # noqa: F401
    MAX_MACS,
    StubEvaluator,
    search_dir,
    small_space,
    target_arch,
)

ROOT = Path(__file__).resolve().parents[2]


def _worker(out_dir: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "tests.searchers.stub", "--out", str(out_dir), *args],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _study(url: str, out_dir: Path, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=open_storage(url, out_dir))


def _records(out_dir: Path) -> list[dict]:
    path = out_dir / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def test_two_workers_share_one_sqlite_study(search_dir):
    url = f"sqlite:///{search_dir}/study.db"
    common = ["--searcher", "optuna-tpe", "--trials", "10", "--storage", url, "--study", "shared", "--sleep", "0.3"]
    workers = [_worker(search_dir, *common, "--worker", str(k)) for k in (0, 1)]
    for worker in workers:
        _, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err[-2000:]
    study = _study(url, search_dir, "shared")
    complete = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(complete) == 10
    assert not study.get_trials(states=(TrialState.RUNNING,))
    records = _records(search_dir)  # both workers append to the one results.jsonl
    assert sorted(r["trial"] for r in records) == sorted(t.number for t in complete)
    assert len({r["arch_id"] for r in records}) == 10
    assert {t.user_attrs["nas"]["worker"] for t in complete} == {0, 1}


def test_killed_search_resumes_without_rerunning_finished_trials(search_dir):
    url = f"journal://{search_dir}/study.log"
    args = ["--searcher", "optuna-nsga2", "--trials", "10", "--storage", url, "--study", "killed", "--sleep", "0.4"]
    worker = _worker(search_dir, *args)
    deadline = time.monotonic() + 90
    while len(_records(search_dir)) < 3 and time.monotonic() < deadline and worker.poll() is None:
        time.sleep(0.05)
    time.sleep(0.2)  # inside the next evaluation's sleep, not inside a storage write
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=30)
    finished = {r["arch_id"] for r in _records(search_dir)}
    assert 3 <= len(finished) < 10
    study = _study(url, search_dir, "killed")
    orphans = len(study.get_trials(states=(TrialState.RUNNING,)))  # 1 unless killed between two trials
    assert orphans <= 1

    space = small_space()
    evaluate = StubEvaluator(space, target_arch(space))
    result = run_search(space, evaluate, searcher="optuna-nsga2", constraints=Constraints(max_macs=MAX_MACS),
                        trials=10, seed=0, out_dir=search_dir, storage=url, study="killed",
                        progress=False, tensorboard=False)
    assert len(evaluate.calls) == 10 - len(finished) and not finished & set(evaluate.calls)
    assert result.evaluated == 10
    study = _study(url, search_dir, "killed")
    assert len(study.get_trials(states=(TrialState.COMPLETE,))) == 10
    assert not study.get_trials(states=(TrialState.RUNNING,))
    assert len(study.get_trials(states=(TrialState.FAIL,))) == orphans  # the killed worker's trial
    assert len({r["arch_id"] for r in _records(search_dir)}) == 10
