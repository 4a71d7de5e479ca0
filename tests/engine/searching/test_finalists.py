"""`nas search --finalists K`: the K best by the score measured again, and the best of them answered."""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from estimators.base import Estimator, EstimatorContext
from nas import api, cli
from nas.core.arch import Arch, arch_id
from nas.core.registry import ESTIMATORS, Entry, NoOptions
from nas.engine.searching import finalists as stage
from nas.engine.searching.finalists import Finetune, finetune_top1, run_finalists
from nas.engine.searching.request import Source
from tests.support.safety import copy_run


class FavoursMin(Estimator):
    """A planted bias: the fewer MACs, the better (the min subnet scores best)."""

    name = "test-favours-min"

    def scores(self, archs: Sequence[Arch], context: EstimatorContext) -> list[float]:
        return [-float(context.space.macs(a)) for a in archs]


def truth(space, arch) -> float:
    """The toy's true accuracy: the more MACs, the better (the opposite of the planted bias)."""
    return 0.5 + space.macs(arch) / (2 * space.macs(space.max()))


@pytest.fixture
def favours_min(monkeypatch):
    monkeypatch.setitem(ESTIMATORS._entries, FavoursMin.name, Entry(FavoursMin.name, FavoursMin, NoOptions))


@pytest.fixture
def truthful(monkeypatch):
    """The finalists' measure replaced by the toy's truth; the archs it measured, in order."""
    calls: list[str] = []

    def measure(run, arch, settings):
        calls.append(arch_id(arch))
        return {"finalist_top1": truth(run.space, arch)}

    monkeypatch.setattr(stage, "finetune_top1", measure)
    return calls


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _untimed(finalists: dict) -> dict:
    """A finalists record without its wall times, which differ between two runs of the same search."""
    return {**finalists, "finalists": [{k: v for k, v in f.items() if k != "finalist_seconds"}
                                       for f in finalists["finalists"]]}


def _search(run, out, **options):
    # 5% of the way from min to max: 9 archs of the tiny space, all evaluated (fewer than --trials)
    return api.search(run, "random", max_macs="5%", trials=20, out=out, progress=False, score=FavoursMin.name,
                      **options)


def test_a_planted_bias_for_the_min_subnet_is_corrected_by_truthful_finalists(trained, favours_min, truthful,
                                                                             tmp_path, capsys):
    run = api.load_run("tiny", trained)
    biased = _search(run, tmp_path / "biased")
    assert biased.arch_id == arch_id(run.space.min()) and biased.finalists is None
    capsys.readouterr()
    result = _search(run, tmp_path / "corrected", finalists=3)
    records = _lines(tmp_path / "corrected" / "results.jsonl")
    top3 = sorted(records, key=lambda r: (-r["score_value"], r["macs"], r["trial"]))[:3]
    expected = max(top3, key=lambda r: truth(run.space, r["arch"]))
    assert len(records) == 9 and top3[0]["arch_id"] == arch_id(run.space.min())
    assert result.arch_id == expected["arch_id"] != arch_id(run.space.min())
    assert (result.macs, result.score_value) == (expected["macs"], expected["score_value"])
    assert sorted(truthful) == sorted(r["arch_id"] for r in top3)
    saved = json.loads((tmp_path / "corrected" / "finalists.json").read_text())
    assert saved["winner"] == expected["arch_id"] and saved["search_best"] == top3[0]["arch_id"] and saved["changed"]
    for finalist, record in zip(saved["finalists"], top3):     # both measures of every finalist, by rank
        assert (finalist["arch_id"], finalist["score_value"]) == (record["arch_id"], record["score_value"])
        assert finalist["finalist_top1"] == pytest.approx(truth(run.space, record["arch"]))
    assert [f["rank"] for f in saved["finalists"]] == [1, 2, 3]
    summary = json.loads((tmp_path / "corrected" / "summary.json").read_text())
    assert summary["arch_id"] == expected["arch_id"] and summary["finalists"]["winner"] == expected["arch_id"]
    assert api.resolve_arch(run.space, str(tmp_path / "corrected" / "best.yaml")) == expected["arch"]
    assert "min subnet" not in capsys.readouterr().err


def test_the_min_subnet_answer_is_said_in_one_line_with_the_runner_up(trained, favours_min, tmp_path, capsys):
    run = api.load_run("tiny", trained)
    result = _search(run, tmp_path / "s")
    err = capsys.readouterr().err
    records = _lines(tmp_path / "s" / "results.jsonl")
    second = sorted(records, key=lambda r: (-r["score_value"], r["macs"], r["trial"]))[1]
    low = run.space.min()
    lines = [line for line in err.splitlines() if "min subnet" in line]
    assert result.arch_id == arch_id(low) and len(lines) == 1
    assert lines[0].startswith(f"the answer is the min subnet {arch_id(low)} ({FavoursMin.name} score "
                               f"{-run.space.macs(low):.6g}")
    assert f"runner-up {second['arch_id']}: {FavoursMin.name} score {second['score_value']:.6g}, MACs " in lines[0]


def test_finalists_resume_after_a_kill_without_measuring_a_finished_one_again(trained, favours_min, monkeypatch,
                                                                             tmp_path):
    run = api.load_run("tiny", trained)
    measured: list[str] = []

    def measure(run, arch, settings):
        if len(measured) == 2 and kill:
            raise KeyboardInterrupt       # what a SIGINT raises in the middle of the third finalist
        measured.append(arch_id(arch))
        return {"finalist_top1": truth(run.space, arch)}

    monkeypatch.setattr(stage, "finetune_top1", measure)
    kill = False
    whole = _search(run, tmp_path / "whole", finalists=4)
    measured.clear()
    kill = True
    with pytest.raises(KeyboardInterrupt):
        _search(run, tmp_path / "killed", finalists=4)
    assert len(_lines(tmp_path / "killed" / stage.RECORDS)) == 2
    first, kill = list(measured), False
    resumed = _search(run, tmp_path / "killed", finalists=4)
    assert len(measured) == 4 and measured[:2] == first and not set(measured[2:]) & set(first)
    assert len(_lines(tmp_path / "killed" / stage.RECORDS)) == 4
    assert resumed.arch_id == whole.arch_id and _untimed(resumed.finalists) == _untimed(whole.finalists)
    again = _search(run, tmp_path / "killed", finalists=4)     # a finished stage measures nothing
    assert len(measured) == 4 and again.finalists == resumed.finalists   # read back, timings included


@pytest.mark.slow
def test_the_fine_tune_is_a_pure_function_of_the_arch_and_workers_agree(trained, tmp_path):
    """The real measure: the same finalist twice gives the same numbers, measured in this process
    or in two spawned workers; the run's weights are left as they were."""
    runs = copy_run(trained, "tiny", tmp_path)
    run = api.load_run("tiny", runs)
    settings = Finetune(steps=3, seed=1)
    before = {k: v.clone() for k, v in run.strategy.model.state_dict().items()}
    arch = run.space.max()
    first, second = finetune_top1(run, arch, settings), finetune_top1(run, arch, settings)
    assert first == second and 0 <= first["finalist_top1"] <= 1
    assert all((run.strategy.model.state_dict()[k] == v).all() for k, v in before.items())
    records = [{"trial": t, "arch": a, "arch_id": arch_id(a), "macs": run.space.macs(a), "params": 0,
                "score_value": float(-t)} for t, a in enumerate([run.space.max(), run.space.min(), run.space.max()])]
    source = Source(str(run.dir.root), run.checkpoint.name, run.step)
    here = run_finalists(run, records, 3, tmp_path / "here", settings=settings, progress=False)
    spawned = run_finalists(run, records, 3, tmp_path / "spawned", settings=settings, progress=False, workers=2,
                            source=source)
    assert [r["arch_id"] for r in here.finalists] == [arch_id(run.space.max()), arch_id(run.space.min())]
    assert here.finalists[0]["finalist_top1"] == first["finalist_top1"]
    assert [r["finalist_top1"] for r in here.finalists] == [r["finalist_top1"] for r in spawned.finalists]
    assert here.winner["arch_id"] == spawned.winner["arch_id"]


@pytest.mark.parametrize("has_bf16", [True, False])
def test_a_finalist_is_fine_tuned_in_bf16_where_auto_chooses_it_and_says_so(trained, tmp_path, monkeypatch, has_bf16):
    """Finalists are no ground truth: under `train.accelerate: auto` their fine-tune runs the bf16
    rule (here made to hold for the tiny run's network and this CPU), and each record says which."""
    import torch

    from nas.engine import precision

    run = api.load_run("tiny", copy_run(trained, "tiny", tmp_path))
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: has_bf16)
    monkeypatch.setattr(precision, "dense_convolutions_with_bn", lambda model: True)
    autocast, real_autocast = [], torch.autocast
    monkeypatch.setattr(torch, "autocast", lambda *a, **k: autocast.append((a, k)) or real_autocast(*a, **k))
    records = [{"trial": 0, "arch": run.space.min(), "arch_id": arch_id(run.space.min()), "macs": 1, "params": 0,
                "score_value": 0.0}]
    result = run_finalists(run, records, 1, tmp_path / "s", settings=Finetune(steps=2), progress=False)
    assert result.winner["finalist_precision"] == ("bf16" if has_bf16 else "fp32")
    assert _lines(tmp_path / "s" / "finalists.jsonl")[0]["finalist_precision"] == result.winner["finalist_precision"]
    assert autocast == ([(("cpu",), {"dtype": torch.bfloat16})] * 2 if has_bf16 else [])


def test_cli_finalists_and_the_summary_of_a_search_folder(trained, favours_min, truthful, tmp_path, capsys):
    runs = copy_run(trained, "tiny", tmp_path)
    out = tmp_path / "s"
    assert cli.main(["search", "tiny", "--runs-dir", str(runs), "--searcher", "random", "--score", FavoursMin.name,
                     "--max-macs", "5%", "--trials", "20", "--finalists", "2", "--quiet", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "then finalists: the 2 best by the score fine-tuned alone 100 steps each" in printed
    assert cli.main(["summary", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    summary = json.loads((out / "summary.json").read_text())
    budget = summary["budgets"]["macs"]
    assert lines[0].startswith(f"chosen subnet {summary['arch_id']}: MACs ") and " budget (" in lines[0]
    assert f"({100 * summary['macs'] / budget:.0f}%)" in lines[0]
    assert lines[1] == f"chosen by: the score {FavoursMin.name}"
    assert lines[2] == "searched: 9 archs evaluated by random"
    assert lines[3].startswith("then finalists: the 2 best by the score") and "#2 by the score won" in lines[3]
    assert lines[4] == f"arch file: {out / 'best.yaml'}"


def test_summary_of_a_folder_that_is_no_search_is_one_line(tmp_path, capsys):
    assert cli.main(["summary", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"nas summary: error: SEARCH_DIR: {tmp_path} holds no summary.json (not a finished search folder)"


def test_bad_finalists_counts_name_the_flag(trained, tmp_path, capsys):
    runs = copy_run(trained, "tiny", tmp_path)
    assert cli.main(["search", "tiny", "--runs-dir", str(runs), "--finalists", "-1", "--quiet"]) == 2
    assert "--finalists" in capsys.readouterr().err
