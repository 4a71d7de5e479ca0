"""Search workers on one study in a real PostgreSQL server (`tests.support.postgres`).

The workers are the stub search workers of the journal-storage tests (`tests.searchers.stub`):
subprocesses of one thread each where a worker must run beside others or be killed, else this
process (a fresh Python pays some 5 s of imports); the error tests run `nas search` itself on
the suite's tiny trained run.
"""
from __future__ import annotations

import signal

import optuna
import pytest
from optuna.trial import TrialState

from nas import cli
from nas.core.arch import arch_id
from nas.core.processes import ProcessIdentity, alive
from nas.engine.searching.score import SearchScore
from searchers import optuna_storage
from tests.searchers.stub import (  # noqa: F401
    StubEvaluator,
    finish,
    load_study,
    meet,
    results,
    search_dir,
    small_space,
    start_worker,
    stub_search,
    target_arch,
)
from tests.support.postgres import PASSWORD, postgres  # noqa: F401
from tests.support.safety import one_line_error, wait_for

pytestmark = pytest.mark.slow


def _trials(study: optuna.Study, state: TrialState) -> list[optuna.trial.FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(state,))


def _check_complete(study: optuna.Study, out_dir, trials: int) -> list[optuna.trial.FrozenTrial]:
    """Exactly `trials` COMPLETE trials, none RUNNING, each the one record of results.jsonl with
    the stub's value for its arch; returns them."""
    complete = _trials(study, TrialState.COMPLETE)
    assert len(complete) == trials and not _trials(study, TrialState.RUNNING)
    records = results(out_dir)
    assert sorted(r["trial"] for r in records) == sorted(t.number for t in complete)
    assert len({r["arch_id"] for r in records}) == trials
    space = small_space()
    stub = StubEvaluator(space, target_arch(space))
    for trial in complete:
        arch = space.canonical(trial.params)
        assert trial.user_attrs["nas"]["arch_id"] == arch_id(arch)
        assert trial.values[0] == pytest.approx(stub(arch)["val_top1"])
    return complete


def test_three_tpe_workers_share_one_study(postgres, search_dir):
    url = postgres.url()
    common = ["--searcher", "optuna-tpe", "--trials", "12", "--storage", url, "--study", "tpe-three", "--meet", "3"]
    others = [start_worker(search_dir, *common, "--worker", str(k)) for k in (0, 1)]
    space = small_space()
    meeting = StubEvaluator(space, target_arch(space), before=lambda calls: calls or meet(search_dir, 2, 3))
    stub_search(search_dir, "optuna-tpe", 12, meeting, storage=url, study="tpe-three", worker=2)
    finish(others)
    complete = _check_complete(load_study(url, search_dir, "tpe-three"), search_dir, 12)
    assert {t.user_attrs["nas"]["worker"] for t in complete} == {0, 1, 2}


def test_nsga2_workers_with_one_killed_mid_evaluation_end_with_exactly_n_trials(postgres, search_dir):
    """The killed worker's trial is failed by the PID check (same host), by whichever worker looks first."""
    url = postgres.url()
    common = ["--searcher", "optuna-nsga2", "--trials", "12", "--storage", url, "--study", "nsga2-killed",
              "--meet", "3"]
    others = [start_worker(search_dir, *common, "--worker", str(k)) for k in (0, 1)]
    victim = start_worker(search_dir, *common, "--worker", "2", "--hold-after", "2")
    wait_for((search_dir / "holding").exists, victim, "the victim's third evaluation")
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    stub_search(search_dir, "optuna-nsga2", 12, storage=url, study="nsga2-killed", worker=2)    # started again
    finish(others)

    study = load_study(url, search_dir, "nsga2-killed")
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE"]       # top-1 and MACs
    complete = _check_complete(study, search_dir, 12)
    space = small_space()
    assert all(t.values[1] == space.macs(space.canonical(t.params)) for t in complete)
    failed = _trials(study, TrialState.FAIL)
    assert [t.user_attrs["nas"]["pid"] for t in failed] == [victim.pid]
    assert {t.user_attrs["nas"]["worker"] for t in complete} == {0, 1, 2}


def test_a_silent_worker_elsewhere_is_failed_by_its_heartbeat_after_the_grace_period(postgres, search_dir,
                                                                                     monkeypatch):
    """A worker on another machine cannot be judged by its pid: its trial is failed once its
    heartbeat is older than the grace period (3 s here, beats every 0.5 s)."""
    url, grace = postgres.url(), 3.0
    monkeypatch.setattr(optuna_storage, "GRACE_PERIOD", grace)      # this process resumes the search
    args = ["--searcher", "optuna-tpe", "--trials", "6", "--storage", url, "--study", "silent",
            "--grace-period", str(grace)]
    victim = start_worker(search_dir, *args, "--hold-after", "2")
    wait_for((search_dir / "holding").exists, victim, "the victim's third evaluation")
    storage = optuna_storage.open_storage(url, search_dir)
    study = optuna.load_study(study_name="silent", storage=storage)

    def beating() -> bool:
        running = _trials(study, TrialState.RUNNING)
        return bool(running) and "nas_heartbeat" in running[0].user_attrs
    wait_for(beating, victim, "a heartbeat of the held trial")
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    (held,) = _trials(study, TrialState.RUNNING)
    elsewhere = {**held.user_attrs["nas"], "host": "another-machine"}    # as a worker elsewhere records it
    storage.set_trial_user_attr(held._trial_id, "nas", elsewhere)
    assert alive(ProcessIdentity.from_dict(elsewhere))                    # its pid means nothing here

    stub_search(search_dir, "optuna-tpe", 6, storage=url, study="silent")
    study = load_study(url, search_dir, "silent")
    _check_complete(study, search_dir, 6)
    (failed,) = _trials(study, TrialState.FAIL)
    assert failed.number == held.number
    last_beat = failed.user_attrs["nas_heartbeat"]
    assert failed.datetime_complete.timestamp() - last_beat >= grace


def test_postgres_and_a_journal_file_give_the_same_search_for_one_seed(postgres, search_dir):
    on_postgres, on_journal = search_dir / "postgres", search_dir / "journal"
    for out, url in ((on_postgres, postgres.url()), (on_journal, f"journal://{on_journal}/study.log")):
        stub_search(out, "optuna-tpe", 8, seed=3, storage=url, study="same-seed")
    picked = [[(r["trial"], r["arch_id"], r["val_top1"]) for r in sorted(results(folder), key=lambda r: r["trial"])]
              for folder in (on_postgres, on_journal)]
    assert len(picked[0]) == 8 and picked[0] == picked[1]


def _search(trained, out, url: str, trials: int) -> list[str]:
    return ["search", "tiny", "--runs-dir", str(trained), "--searcher", "optuna-tpe", "--score", "macs",
            "--trials", str(trials), "--storage", url, "--study", out.name, "--out", str(out), "--quiet"]


def test_a_wrong_password_is_one_masked_line_and_keeps_the_study(postgres, trained, tmp_path, capsys):
    out = tmp_path / "wrong-password"
    assert cli.main(_search(trained, out, postgres.url(), 2)) == 0
    capsys.readouterr()
    kept = results(out)
    err = one_line_error(capsys, _search(trained, out, postgres.url("not-the-password"), 4),
                         f"--storage: cannot open postgresql://nas:***@127.0.0.1:{postgres.port}/postgres",
                         'password authentication failed for user "nas"')
    assert "not-the-password" not in err
    assert results(out) == kept and len(_trials(load_study(postgres.url(), out, out.name), TrialState.COMPLETE)) == 2


def test_a_server_stopped_mid_search_is_one_line_and_loses_no_completed_trial(postgres, trained, tmp_path, capsys,
                                                                               monkeypatch):
    out, url = tmp_path / "stopped", postgres.url()
    metrics, calls = SearchScore.metrics, []

    def stop_at_third(self, arch):
        if len(calls) == 2:
            postgres.stop()
        calls.append(arch_id(arch))
        return metrics(self, arch)
    monkeypatch.setattr(SearchScore, "metrics", stop_at_third)
    try:
        err = one_line_error(capsys, _search(trained, out, url, 5),
                             f"--storage: lost postgresql://nas:***@127.0.0.1:{postgres.port}/postgres mid-search",
                             "run the same command again to resume", code=1)
    finally:
        if not postgres.running():
            postgres.start()
    assert PASSWORD not in err
    kept = results(out)
    assert [r["arch_id"] for r in kept] == calls[:2]
    assert len(_trials(load_study(url, out, out.name), TrialState.COMPLETE)) == 2

    monkeypatch.setattr(SearchScore, "metrics", metrics)
    assert cli.main(_search(trained, out, url, 5)) == 0
    study = load_study(url, out, out.name)
    assert len(_trials(study, TrialState.COMPLETE)) == 5
    assert len(_trials(study, TrialState.FAIL)) == 1 and not _trials(study, TrialState.RUNNING)  # the lost trial
    assert results(out)[:2] == kept and len({r["arch_id"] for r in results(out)}) == 5
