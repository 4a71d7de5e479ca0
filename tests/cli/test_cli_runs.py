"""Bad input on every run-level CLI verb: one line naming the culprit, exit 2, no traceback."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nas import api, cli
from nas.core import yaml_io
from nas.core.config import load_config
from nas.engine.checkpoint import load_checkpoint
from tests.support.safety import wait_for
from tests.support.tiny import tiny_config


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    runs = tmp_path_factory.mktemp("runs")
    api.train(load_config(tiny_config(steps=8)), name="tiny", runs_dir=runs, progress=False, device="cpu")
    return runs


def _one_line_error(capsys, argv, *needles):
    code = cli.main([*argv, "--device", "cpu"])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


@pytest.mark.parametrize("verb", ["eval", "export"])
def test_missing_run_directory(capsys, tmp_path, verb):
    _one_line_error(capsys, [verb, "nope", "--arch", "max", "--runs-dir", str(tmp_path)], "RUN: no run at nope")


@pytest.mark.parametrize("verb", ["eval", "export"])
def test_run_without_checkpoint(capsys, tmp_path, verb):
    run = tmp_path / "fresh"
    run.mkdir()
    (run / "config.yaml").write_text(yaml_io.dumps(tiny_config()))
    _one_line_error(capsys, [verb, str(run), "--arch", "max"], "has no checkpoint last.pt yet")


@pytest.mark.parametrize("verb", ["eval", "export"])
def test_arch_file_that_does_not_validate(capsys, trained, tmp_path, verb):
    bad = tmp_path / "arch.yaml"
    arch = dict(api.load_run("tiny", trained, device="cpu").space.max(), **{"stage1.width": 20})
    bad.write_text(yaml_io.dumps({"arch": arch}))
    _one_line_error(capsys, [verb, "tiny", "--runs-dir", str(trained), "--arch", str(bad)],
                    "stage1.width: 20 is not allowed; choose one of [16, 24]")
    _one_line_error(capsys, [verb, "tiny", "--runs-dir", str(trained), "--arch", "maxx"],
                    "--arch: maxx: no such file (give max, min or a YAML/JSON arch file)")


def test_unknown_split(capsys, trained):
    _one_line_error(capsys, ["eval", "tiny", "--runs-dir", str(trained), "--arch", "max", "--split", "train"],
                    "argument --split: invalid choice: 'train'")


def test_train_refuses_an_existing_name_and_a_contradicting_resume(capsys, trained, tmp_path):
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml_io.dumps(tiny_config(steps=8)))
    _one_line_error(capsys, ["train", str(config), "--name", "tiny", "--runs-dir", str(trained)],
                    "already exists; continue it with --resume")
    _one_line_error(capsys, ["train", str(config), "--name", "tiny", "--runs-dir", str(trained), "--resume",
                             "--set", "train.seed=3"], "--set train.seed: contradicts")
    _one_line_error(capsys, ["train", str(config), "--name", "other", "--runs-dir", str(trained), "--resume"],
                    "--resume: no run at")
    # resuming a finished run is a no-op that succeeds
    assert cli.main(["train", str(config), "--name", "tiny", "--runs-dir", str(trained), "--resume", "--quiet",
                     "--device", "cpu"]) == 0


@pytest.mark.slow
def test_sigterm_saves_a_checkpoint_then_exits_143(tmp_path):
    """SIGINT takes the same path and exits 130 (tests/engine/training/test_training.py stops a run with it)."""
    signum, code = signal.SIGTERM, 143
    config = tmp_path / "long.yaml"
    config.write_text(yaml_io.dumps(tiny_config(steps=100000)))
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "nas", "train", str(config), "--runs-dir", str(tmp_path),
                             "--quiet", "--device", "cpu"], stderr=subprocess.PIPE, text=True, env=env,
                            cwd=Path(__file__).resolve().parents[2])
    checkpoint = tmp_path / "long" / "checkpoints" / "last.pt"
    wait_for(checkpoint.exists, proc, "the first checkpoint")    # training is under way: the event, not a clock
    proc.send_signal(signum)
    _, err = proc.communicate()
    assert proc.returncode == code, err
    name = signal.Signals(signum).name
    assert f"nas train: stopped: {name} at step " in err and "--resume" in err
    step = int(err.split(f"{name} at step ")[1].split(",")[0])
    assert load_checkpoint(checkpoint)["step"] == step > 0      # written before the exit


@pytest.mark.slow
def test_two_local_workers_share_one_sqlite_study(capsys, trained, tmp_path):
    import json

    storage = f"sqlite:///{tmp_path / 'study.db'}"
    argv = ["search", "tiny", "--runs-dir", str(trained), "--searcher", "optuna-tpe", "--trials", "6",
            "--workers", "2", "--storage", storage, "--study", "shared", "--out", str(tmp_path / "s"), "--json",
            "--quiet", "--device", "cpu"]
    code = cli.main(argv)
    printed = capsys.readouterr()
    assert code == 0, printed.err
    result = json.loads(printed.out)
    lines = [json.loads(line) for line in (tmp_path / "s" / "results.jsonl").read_text().splitlines()]
    assert result["evaluated"] == 6 == len(lines)
    assert len({line["arch_id"] for line in lines}) == 6 and len({line["trial"] for line in lines}) == 6
    import optuna
    study = optuna.load_study(study_name="shared", storage=storage)
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(complete) == 6 and {t.user_attrs["nas"]["worker"] for t in complete} <= {0, 1}
    # Whether both workers finish trials depends on when each starts: tests/searchers/test_optuna_workers.py
    # makes them meet before their first evaluation and checks that both contribute.
    _one_line_error(capsys, ["search", "tiny", "--runs-dir", str(trained), "--searcher", "evolution",
                             "--workers", "2", "--trials", "4"], "--workers: searcher 'evolution'")


@pytest.mark.slow
def test_a_failing_worker_is_reported_by_index(capsys, trained, tmp_path, monkeypatch):
    # A score registered in this process only (every argument is checked before the workers
    # start): the spawned workers, which load the registries afresh, fail alike on it.
    from estimators.params import Params
    from nas.core.registry import ESTIMATORS, Entry, NoOptions

    monkeypatch.setitem(ESTIMATORS._entries, "test-here-only", Entry("test-here-only", Params, NoOptions))
    _one_line_error(capsys, ["search", "tiny", "--runs-dir", str(trained), "--searcher", "optuna-tpe",
                             "--workers", "2", "--trials", "4", "--score", "test-here-only", "--quiet",
                             "--out", str(tmp_path / "s")], "--workers: worker 0: --score: ",
                    "; worker 1: --score: ", "unknown estimator 'test-here-only'")


def _stopped_search(out: Path, argv: list[str], trials: int) -> str:
    """Start `nas search` (`argv`, `trials`) in a real process, send it SIGTERM once its first
    evaluations are written; its stderr, once it has exited 143 with the one line that
    `nas train` and `nas export` print (what is kept, how to resume)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "nas", *argv, "--trials", str(trials)], stderr=subprocess.PIPE,
                            text=True, env=env, cwd=Path(__file__).resolve().parents[2], start_new_session=True)
    results = out / "results.jsonl"
    wait_for(lambda: results.is_file() and results.read_text().count("\n") >= 2, proc, "two evaluations")
    proc.send_signal(signal.SIGTERM)      # to the command's process only, not to its workers
    _, err = proc.communicate()
    assert proc.returncode == 143 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.strip() == (f"nas search: stopped: SIGTERM: the search stopped; every arch evaluated is kept in {out}; "
                           "run the same nas search again to resume it")
    return err


@pytest.mark.slow
def test_sigterm_during_a_one_budget_search_is_one_line_exit_143_and_the_rerun_resumes(trained, tmp_path):
    out = tmp_path / "s"
    argv = ["search", "tiny", "--runs-dir", str(trained), "--searcher", "random", "--score", "supernet",
            "--max-macs", "80%", "--out", str(out), "--quiet", "--device", "cpu"]
    _stopped_search(out, argv, 200)
    kept = (out / "results.jsonl").read_text().splitlines()
    assert 2 <= len(kept) < 200 and not (out / "summary.json").exists()
    assert cli.main([*argv, "--trials", str(len(kept) + 1)]) == 0      # resumes: one more, the kept ones replayed
    resumed = (out / "results.jsonl").read_text().splitlines()
    assert resumed[:len(kept)] == kept and len(resumed) == len(kept) + 1


@pytest.mark.slow
def test_sigterm_during_a_search_with_workers_stops_them_at_once(trained, tmp_path):
    """With --workers the command's process waited for its workers to finish every trial, then
    said `workers: worker 0: SIGTERM ...`, exit 2."""
    out = tmp_path / "s"
    _stopped_search(out, ["search", "tiny", "--runs-dir", str(trained), "--searcher", "optuna-tpe", "--workers", "2",
                          "--score", "supernet", "--out", str(out), "--quiet", "--device", "cpu"], 200)
    kept = (out / "results.jsonl").read_text()
    time.sleep(1)
    assert (out / "results.jsonl").read_text() == kept and kept.count("\n") < 200      # no worker goes on
