"""The search stage as a whole (`nas.search`): the request checked before any work, the folder
locked for the whole command, the weights searched recorded, and `nas summary` on folders a
killed or edited search left (issue 47's defects)."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from nas import api, cli
from nas.core.arch import arch_id
from nas.core.errors import ConfigError, RunError, SearchError
from nas.engine.checkpoint import load_checkpoint, save_checkpoint
from nas.engine.searching import finalists as stage
from nas.engine.searching.results import SearchResult
from tests.conftest import make_space
from tests.support.safety import copy_run, one_line_error
from tests.engine.searching.test_finalists import FavoursMin, truth
from tests.engine.searching.test_finalists import favours_min, truthful  # noqa: F401  (fixtures)


def _search(run, out: Path, **options):
    """9 archs of the tiny space within 5% of the way from min to max, all evaluated."""
    return api.search(run, "random", max_macs="5%", trials=20, out=out, progress=False, score=FavoursMin.name,
                      **options)


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _train_further(runs: Path, steps: int = 5) -> None:
    """What `nas train --resume` leaves: last.pt holding a later step."""
    path = runs / "tiny" / "checkpoints" / "last.pt"
    state = load_checkpoint(path)
    save_checkpoint({**state, "step": state["step"] + steps}, path)


def test_a_folder_searched_on_other_weights_is_refused(trained, favours_min, truthful, tmp_path):
    """Defect 1: after `train --resume` (or with `--checkpoint best.pt`) the same folder gave the
    old answer ("0 new"); the folder records the checkpoint and step, and another is refused."""
    runs = copy_run(trained, "tiny", tmp_path)
    run = api.load_run("tiny", runs)
    _search(run, tmp_path / "s", finalists=2)
    settings = json.loads((tmp_path / "s" / "search.json").read_text())["settings"]
    assert (settings["checkpoint"], settings["step"]) == ("last.pt", run.step)
    assert {(r["checkpoint"], r["step"]) for r in _lines(tmp_path / "s" / stage.RECORDS)} == {("last.pt", run.step)}
    best = api.load_run("tiny", runs, checkpoint="best.pt")
    with pytest.raises(SearchError, match=r"checkpoint last.pt there, best.pt now.*another checkpoint is searched"):
        _search(best, tmp_path / "s", finalists=2)
    _train_further(runs)
    further = api.load_run("tiny", runs)
    with pytest.raises(SearchError, match=rf"step {run.step} there, {run.step + 5} now.*the run was trained further"):
        _search(further, tmp_path / "s", finalists=2)
    assert _search(further, tmp_path / "fresh").new == 9


def test_finalists_measured_on_other_weights_are_refused(trained, favours_min, truthful, tmp_path):
    run = api.load_run("tiny", trained)
    _search(run, tmp_path / "s", finalists=2)
    records = _lines(tmp_path / "s" / stage.RECORDS)
    (tmp_path / "s" / stage.RECORDS).write_text("".join(json.dumps({**r, "step": 3}) + "\n" for r in records))
    with pytest.raises(SearchError, match=r"finalists.jsonl:1: measured on other weights \(checkpoint last.pt, "
                                          rf"step 3; this search's: checkpoint last.pt, step {run.step}\)"):
        _search(run, tmp_path / "s", finalists=2)


@pytest.mark.parametrize("edit, problem", [
    ({"finalist_top1": 7.5}, "'finalist_top1' must be a fraction in [0, 1], got 7.5"),
    ({"finalist_top1": "0.9"}, "'finalist_top1' must be a fraction in [0, 1], got \"0.9\""),
    ({"finalist_top1": None}, "'finalist_top1' must be a fraction in [0, 1], got null"),
    ({"measure": "finetune"}, "'measure' must be the measure's settings"),
])
def test_an_edited_finalists_record_is_refused_in_one_line(trained, favours_min, truthful, tmp_path, edit, problem):
    """Defect 6: `finalist_top1: 7.5` "won with 750.00%", a string gave a TypeError."""
    run = api.load_run("tiny", trained)
    _search(run, tmp_path / "s", finalists=2)
    path = tmp_path / "s" / stage.RECORDS
    first, *rest = _lines(path)
    path.write_text("".join(json.dumps(r) + "\n" for r in [{**first, **edit}, *rest]))
    with pytest.raises(SearchError) as error:
        _search(run, tmp_path / "s", finalists=2)
    assert str(error.value).startswith(f"{path}:1: {problem}") and "repair or remove the line" in str(error.value)


def test_a_finalists_record_without_its_measure_is_refused(trained, favours_min, truthful, tmp_path):
    run = api.load_run("tiny", trained)
    _search(run, tmp_path / "s", finalists=2)
    path = tmp_path / "s" / stage.RECORDS
    first, *rest = _lines(path)
    del first["finalist_top1"]
    path.write_text("".join(json.dumps(r) + "\n" for r in [first, *rest]))
    with pytest.raises(SearchError, match=r"finalists.jsonl:1: no 'finalist_top1'; repair or remove the line"):
        _search(run, tmp_path / "s", finalists=2)


@pytest.mark.parametrize("searcher", ["random", "optuna-tpe"])
def test_the_folder_stays_locked_through_the_finalists(trained, favours_min, monkeypatch, tmp_path, searcher):
    """Defect 3: a second identical search was refused during the loop, not during the
    finalists (it fine-tuned them again: 6 records for 3 archs). A shared (Optuna) study is
    searched by several processes at once, but its finalists are measured by one at a time."""
    run = api.load_run("tiny", trained)
    refused: list[str] = []

    def search():
        return api.search(run, searcher, max_macs="5%", trials=9, out=tmp_path / "s", progress=False,
                          score=FavoursMin.name, finalists=3)

    def measure(run, arch, settings):
        if not refused:
            with pytest.raises(RunError) as error:
                search()
            refused.append(str(error.value))
        return {"finalist_top1": truth(run.space, arch)}

    monkeypatch.setattr(stage, "finetune_top1", measure)
    search()
    assert refused and "search" in refused[0] and "process" in refused[0]
    assert len(_lines(tmp_path / "s" / stage.RECORDS)) == 3


def test_summary_after_a_killed_finalists_stage_says_it_is_unfinished(trained, favours_min, monkeypatch, tmp_path,
                                                                     capsys):
    """Defect 4: `nas summary` said "no finalists stage: the score's best is the answer"."""
    run = api.load_run("tiny", trained)

    def killed(run, arch, settings):
        raise KeyboardInterrupt

    _search(run, tmp_path / "s")          # a finished search, then its finalists stage killed
    monkeypatch.setattr(stage, "finetune_top1", killed)
    with pytest.raises(KeyboardInterrupt):
        _search(run, tmp_path / "s", finalists=2)
    text = api.format_search_summary(api.search_summary(tmp_path / "s"))
    assert "no finalists stage" not in text
    assert "unfinished: a finalists stage started after this summary was written did not finish" in text
    with pytest.raises(KeyboardInterrupt):
        _search(run, tmp_path / "k", finalists=2)      # killed in its first finalists stage: no summary at all
    capsys.readouterr()
    assert cli.main(["summary", str(tmp_path / "k")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "the search is unfinished (killed, or still running" in err


@pytest.mark.parametrize("flags, message", [
    (["--finalists", "2", "--finalist-steps", "0"], "--finalist-steps: must be an integer >= 1, got 0"),
    (["--finalist-steps", "5"], "--finalist-steps: needs finalists"),
    (["--finalists", "21"], "--finalists: 21 is more than trials (20)"),
])
def test_finalist_flags_are_checked_before_any_work(trained, favours_min, tmp_path, capsys, flags, message):
    """Defect 5: `--finalist-steps 0` was refused after the whole search had written a
    finished-looking folder; without `--finalists`, or an absurd one, it passed silently."""
    code = cli.main(["search", "tiny", "--runs-dir", str(trained), "--searcher", "random", "--trials", "20",
                     "--score", FavoursMin.name, "--out", str(tmp_path / "s"), "--quiet", *flags])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and message in err
    assert not (tmp_path / "s").exists()


def test_a_refused_score_leaves_no_folder(trained, tmp_path):
    """Defect 15 (first half): `--score macs+calibrated` without a fitted model was refused at
    the first evaluation, after the search folder was made."""
    run = api.load_run("tiny", trained)
    with pytest.raises(ConfigError, match="'calibrated' has no fitted model"):
        api.search(run, "random", trials=3, out=tmp_path / "s", progress=False, score="macs+calibrated")
    assert not (tmp_path / "s").exists()


def test_the_min_subnet_notice_compares_costs(capsys):
    """Defect 10: a cell of skips and `none`s costs what the min subnet costs but has another id."""
    from nas.engine.searching.stage import _say_if_min

    space = make_space("cell201", small=True)
    low = space.canonical(space.min())
    twin = next(a for a in space.enumerate() if tuple(space.costs(a)) == tuple(space.costs(low))
                and arch_id(a) != arch_id(low))
    other = space.canonical(space.max())
    macs, params = space.costs(twin)
    records = [{"trial": 0, "arch": twin, "arch_id": arch_id(twin), "macs": macs, "params": params,
                "score_value": 2.0},
               {"trial": 1, "arch": other, "arch_id": arch_id(other), "macs": space.macs(other),
                "params": space.params(other), "score_value": 1.0}]
    result = SearchResult(twin, arch_id(twin), None, macs, params, None, Path("."), 2, 2, records[0],
                          trials=records, score="macs")
    _say_if_min(SimpleNamespace(space=space), result)
    line = capsys.readouterr().err.strip()
    assert line.startswith(f"the answer is {arch_id(twin)}, which costs what the min subnet {arch_id(low)} costs "
                           "(macs score 2")
    assert f"runner-up {arch_id(other)}: macs score 1" in line


@pytest.mark.parametrize("edit, message", [
    ({"macs": "12K"}, "damaged record: macs: expected int, got 12K"),
    ({"budgets": {"macs": 0}}, "budgets: must be a mapping of positive budgets, got {'macs': 0}"),
    ({"finalists": {}}, "finalists: must be null or a finalists stage"),
    ({"val_top1": 75.0}, "val_top1: must be a fraction in [0, 1], got 75.0"),
])
def test_summary_of_a_damaged_summary_is_one_line(trained, favours_min, tmp_path, capsys, edit, message):
    """Defect 11: a string for MACs, a zero budget, `finalists: {}` gave tracebacks."""
    run = api.load_run("tiny", trained)
    _search(run, tmp_path / "s")
    path = tmp_path / "s" / "summary.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **edit}))
    capsys.readouterr()
    assert cli.main(["summary", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err and "Traceback" not in err


def test_ranked_first_line_is_the_reported_best_when_finalists_change_the_answer(trained, favours_min, truthful,
                                                                                  tmp_path):
    """Defect 14: ranked.jsonl's first line stayed the score's best though the finalists
    answered another arch."""
    run = api.load_run("tiny", trained)
    result = _search(run, tmp_path / "s", finalists=3)
    assert result.finalists["changed"]
    ranked = _lines(tmp_path / "s" / "ranked.jsonl")
    summary = json.loads((tmp_path / "s" / "summary.json").read_text())
    measured = sorted(result.finalists["finalists"], key=lambda r: (-r["finalist_top1"], r["rank"]))
    assert [r["arch_id"] for r in ranked[:3]] == [r["arch_id"] for r in measured]
    assert ranked[0]["arch_id"] == result.arch_id == summary["record"]["arch_id"] == arch_id(
        api.resolve_arch(run.space, str(tmp_path / "s" / "best.yaml")))
    rest = sorted(ranked[3:], key=lambda r: (-r["score_value"], r["macs"], r["trial"]))
    assert ranked[3:] == rest and len(ranked) == result.evaluated


@pytest.mark.slow
def test_optuna_workers_count_their_evaluations_as_new(trained, capsys, tmp_path):
    """Defect 12: `--workers 2` reported "(4 archs evaluated, 0 new)"."""
    code = cli.main(["search", "tiny", "--runs-dir", str(trained), "--searcher", "optuna-tpe", "--trials", "4",
                     "--workers", "2", "--score", "params", "--out", str(tmp_path / "s"), "--quiet"])
    assert code == 0 and "(4 archs evaluated, 4 new)" in capsys.readouterr().out
    code = cli.main(["search", "tiny", "--runs-dir", str(trained), "--searcher", "optuna-tpe", "--trials", "4",
                     "--workers", "2", "--score", "params", "--out", str(tmp_path / "s"), "--quiet"])
    assert code == 0 and "(4 archs evaluated, 0 new)" in capsys.readouterr().out


def test_nas_search_reaches_an_estimator_in_five_calls(trained, monkeypatch, tmp_path):
    """The stage in one sitting: `cmd_search` -> `stage.search` -> `stage.search_request` (the
    search of a built request, which a family's members share) -> `loop.search_loop` ->
    `SearchScore.metrics` -> `Estimator.score` (benchmarks/notes/20-search-stage.md counted four calls before
    `search_request`)."""
    import traceback

    from estimators.base import Estimator
    from nas.core.registry import ESTIMATORS, Entry, NoOptions

    stacks: list[traceback.StackSummary] = []

    class Probe(Estimator):
        name = "test-hops-probe"

        def scores(self, archs, context):
            stacks.append(traceback.extract_stack())
            return [0.0 for _ in archs]

    monkeypatch.setitem(ESTIMATORS._entries, Probe.name, Entry(Probe.name, Probe, NoOptions))
    assert cli.main(["search", "tiny", "--runs-dir", str(trained), "--searcher", "random", "--trials", "1",
                     "--score", Probe.name, "--out", str(tmp_path / "s"), "--quiet"]) == 0
    frames = [(Path(f.filename).name, f.name) for f in stacks[0]]
    path = frames[frames.index(("cli.py", "cmd_search")):-1]
    assert path == [("cli.py", "cmd_search"), ("stage.py", "search"), ("stage.py", "search_request"),
                    ("loop.py", "search_loop"),
                    ("score.py", "metrics"), ("base.py", "score")]


@pytest.mark.parametrize("options, message", [
    ({"max_macs": "1K"}, r"max_macs: 0.001M is below the cheapest subnet \(min: "),
    ({"options": {"population": -1}}, "population"),
    ({"storage": "sqlite:///x.db"}, "storage: only the optuna searchers share a study"),
])
def test_a_refused_search_leaves_no_folder(trained, tmp_path, options, message):
    """The folder is locked for the whole command, so it is made only once every check passed."""
    run = api.load_run("tiny", trained)
    with pytest.raises((ConfigError, SearchError), match=message):
        api.search(run, "evolution", trials=3, out=tmp_path / "s", progress=False, score="params",
                   **{"max_macs": "50%", **options})
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("flag, index", [("--max-macs", 0), ("--max-params", 1)])
def test_a_budget_above_the_max_subnet_is_one_line_and_exit_2_and_equal_to_it_is_searched(trained, tmp_path, capsys,
                                                                                          flag, index):
    """A one-budget search refuses what a family refuses: a budget above the max subnet's cost
    (it admits every arch), naming the flag and that cost; the max subnet's own cost is a budget."""
    run = api.load_run("tiny", trained)
    high = run.space.costs(run.space.max())[index]
    base = ["search", "tiny", "--runs-dir", str(trained), "--searcher", "random", "--trials", "1", "--score", "macs",
            "--quiet"]
    one_line_error(capsys, [*base, flag, str(high + 1), "--out", str(tmp_path / "above")],
                   f"{flag}: ", f"({high + 1:,}) is above the max subnet's",
                   f"({high:,}): it admits every arch, as 100% (the max subnet) does; give at most that")
    assert not (tmp_path / "above").exists()
    assert cli.main([*base, flag, str(high), "--out", str(tmp_path / "equal")]) == 0
    summary = json.loads((tmp_path / "equal" / "summary.json").read_text())
    assert summary["budgets"][("macs", "params")[index]] == high
