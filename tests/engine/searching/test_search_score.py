"""`nas search --score NAME|auto`: what ranks the candidates, what the records say, how auto chooses."""
from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch

from estimators import build_estimator
from estimators.base import Estimator, EstimatorContext
from nas import api, cli
from nas.core.arch import Arch, arch_id
from nas.core.errors import SearchError
from nas.core.registry import ESTIMATORS, Entry, NoOptions
from nas.engine.searching.costs import Constraints
from nas.engine.searching.loop import run_search
from nas.engine.searching.request import SearchRequest, anchor_archs
from tests.support.safety import copy_run, folder_digests, one_line_error

SEEN: dict[str, EstimatorContext] = {}


class ParamRanks(Estimator):
    """A population score: each arch's rank (0 = fewest) by parameters among the archs scored together."""

    name, population = "test-param-ranks", True

    def scores(self, archs: Sequence[Arch], context: EstimatorContext) -> list[float]:
        counts = [context.space.params(a) for a in archs]
        return [float(sum(c < mine for c in counts)) for mine in counts]


class SupernetPlusRank(Estimator):
    """A population fusion that includes the supernet: rank by top-1 plus rank by MACs."""

    name, population, needs = "test-fusion", True, frozenset({"supernet_top1"})

    def scores(self, archs: Sequence[Arch], context: EstimatorContext) -> list[float]:
        top1 = [context.supernet_top1(a) for a in archs]
        macs = [context.space.macs(a) for a in archs]
        return [float(sum(t < top1[i] for t in top1) + sum(m < macs[i] for m in macs)) for i in range(len(archs))]


class FirstPixel(Estimator):
    """Reads the context's batches (and keeps the context to inspect it)."""

    name, needs = "test-batches", frozenset({"batches"})

    def scores(self, archs: Sequence[Arch], context: EstimatorContext) -> list[float]:
        SEEN["context"] = context
        return [float(context.batches[0][0][0, 0, 0, 0]) + context.space.macs(a) for a in archs]


@pytest.fixture
def estimators(monkeypatch):
    """The test estimators, registered for one test only."""
    for cls in (ParamRanks, SupernetPlusRank, FirstPixel):
        monkeypatch.setitem(ESTIMATORS._entries, cls.name, Entry(cls.name, cls, NoOptions))


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_supernet_score_is_the_search_of_validation_top1_bit_for_bit(trained, tmp_path):
    run = api.load_run("tiny", trained)
    found = api.search(run, "evolution", max_macs="60%", trials=8, seed=3, out=tmp_path / "new", progress=False,
                       score="supernet")

    def before(arch):      # what `nas search` evaluated before scores existed
        result = run.evaluator.evaluate(arch, "val")
        return {"val_top1": result.top1, "val_top5": result.top5}

    budget = json.loads((found.dir / "summary.json").read_text())["budgets"]["macs"]
    old = run_search(run.space, before, SearchRequest("evolution", tmp_path / "old", None, 8, 3, progress=False,
                                                      constraints=Constraints(max_macs=budget),
                                                      first=anchor_archs(run)))
    new_lines, old_lines = _lines(tmp_path / "new" / "results.jsonl"), _lines(tmp_path / "old" / "results.jsonl")
    assert [{k: v for k, v in r.items() if k != "eval_seconds"} for r in new_lines] == \
           [{k: v for k, v in r.items() if k != "eval_seconds"} for r in old_lines]
    assert all(r["score"] == "supernet" and r["score_value"] == r["val_top1"] for r in new_lines)
    assert (found.best, found.val_top1) == (old.best, old.val_top1) and found.score_value == found.val_top1
    assert json.loads((tmp_path / "new" / "summary.json").read_text())["score"] == "supernet"


def test_a_search_by_the_supernet_evaluates_the_anchors_within_budget_first_and_others_do_not(trained, tmp_path):
    run = api.load_run("tiny", trained)
    low, high = (run.space.canonical(run.space.min()), run.space.canonical(run.space.max()))
    assert [arch_id(a) for a in anchor_archs(run)] == [arch_id(high), arch_id(low)]     # the sandwich rule's
    within = api.search(run, "random", max_macs="60%", trials=3, seed=5, out=tmp_path / "60", progress=False,
                        score="supernet")
    first = [r["arch_id"] for r in _lines(within.dir / "results.jsonl")]
    assert first[0] == arch_id(low) and arch_id(high) not in first     # the max breaks a 60% budget
    unconstrained = api.search(run, "random", trials=3, seed=5, out=tmp_path / "all", progress=False,
                               score="supernet")
    assert [r["arch_id"] for r in _lines(unconstrained.dir / "results.jsonl")][:2] == [arch_id(high), arch_id(low)]
    by_macs = api.search(run, "random", max_macs="60%", trials=3, seed=5, out=tmp_path / "macs", progress=False,
                         score="macs")
    assert [r["arch_id"] for r in _lines(by_macs.dir / "results.jsonl")][0] != arch_id(low)
    resumed = api.search(run, "random", max_macs="60%", trials=5, seed=5, out=tmp_path / "60", progress=False,
                         score="supernet")        # a resume queues nothing already evaluated
    ids = [r["arch_id"] for r in _lines(resumed.dir / "results.jsonl")]
    assert ids[:3] == first and len(set(ids)) == 5


def test_macs_score_ranks_by_macs_without_evaluating_the_supernet(trained, tmp_path, capsys):
    runs = copy_run(trained, "tiny", tmp_path)
    run = api.load_run("tiny", runs)
    assert cli.main(["search", "tiny", "--runs-dir", str(runs), "--score", "macs", "--max-macs", "50%",
                     "--trials", "6", "--json", "--quiet"]) == 0
    out, err = capsys.readouterr()
    printed = json.loads(out)
    folder = Path(printed["dir"])
    assert folder.name == "evolution-" + folder.name.split("-")[1] + "-score-macs-s0" and err == ""
    lines = _lines(folder / "results.jsonl")
    assert len(lines) == 6 and all("val_top1" not in r and r["score"] == "macs" for r in lines)
    assert [r["score_value"] for r in lines] == [float(run.space.macs(r["arch"])) for r in lines]
    best = max(lines, key=lambda r: (r["score_value"], -r["trial"]))
    assert printed["arch_id"] == best["arch_id"] and printed["score"] == "macs" and "val_top1" not in printed
    assert printed["score_value"] == best["score_value"]
    assert json.loads((folder / "search.json").read_text())["settings"]["score"] == "macs"
    pareto = json.loads((folder / "pareto.json").read_text())
    assert pareto["score"] == "macs" and pareto["fronts"]["macs"][-1]["score_value"] == best["score_value"]
    # a supernet search of the same budget is another folder: it does not resume this one
    assert cli.main(["search", "tiny", "--runs-dir", str(runs), "--score", "supernet", "--max-macs", "50%",
                     "--trials", "2", "--json", "--quiet"]) == 0
    other = json.loads(capsys.readouterr().out)
    assert other["dir"] != printed["dir"] and "score-" not in Path(other["dir"]).name
    # ... and naming this folder with another score is refused
    one_line_error(capsys, ["search", "tiny", "--runs-dir", str(runs), "--score", "params", "--max-macs", "50%",
                            "--trials", "6", "--out", str(folder), "--quiet"], "(score macs there, params now)")


def test_a_wrong_score_name_is_one_line_with_a_did_you_mean(trained, capsys):
    before = folder_digests(trained)
    one_line_error(capsys, ["search", "tiny", "--runs-dir", str(trained), "--score", "macz", "--trials", "2",
                            "--quiet"], "--score: unknown estimator 'macz' (did you mean 'macs'?)")
    assert folder_digests(trained) == before


def test_auto_without_a_fidelity_summary_uses_the_space_s_default_and_says_so(trained, tmp_path, capsys):
    from nas.engine.searching.score import DEFAULT_SCORES

    run = api.load_run("tiny", trained)
    assert run.space.name == "mobilenetv3" and DEFAULT_SCORES["mobilenetv3"].spec == "naswot"
    # a fine-tuned export: auto predicts accuracy after training (with inherited weights it is the supernet)
    assert cli.main(["search", "tiny", "--runs-dir", str(trained), "--trials", "2", "--out", str(tmp_path / "s"),
                     "--json", "--quiet", "--ships", "finetuned"]) == 0
    out, err = capsys.readouterr()
    printed = json.loads(out)
    assert printed["score"] == "naswot"
    # one short line on stderr; the evidence in the JSON (and summary.json)
    assert err.strip() == "--score auto: naswot, the mobilenetv3 default (no fidelity summary of this run)"
    assert printed["score_line"] == "score auto: naswot, the mobilenetv3 default (no fidelity summary of this run)"
    assert printed["score_reason"] == (
        f"score auto: naswot (no fidelity summary in {trained / 'tiny' / 'fidelity'}; the default "
        "for mobilenetv3, chosen on half of the committed ground truth of fashion_mnist_mbv3, "
        "graded on the other half (no candidate, MACs included, ranked that half better than "
        "chance); benchmarks/default_score.py, benchmarks/notes/17-default-path.md gives the held-out figures "
        "and their date; this run's mobilenetv3 space has other choices than that "
        f"one (fingerprint {run.space.fingerprint()}); `nas fidelity` measures the estimators on "
        "this run)")
    saved = json.loads((tmp_path / "s" / "summary.json").read_text())
    assert (saved["score_line"], saved["score_reason"]) == (printed["score_line"], printed["score_reason"])
    context = EstimatorContext(run.space, run.data.sample_batches("train", 2, 64, 0))
    for record in _lines(tmp_path / "s" / "results.jsonl"):
        assert record["score"] == "naswot" and "val_top1" not in record
        assert record["score_value"] == pytest.approx(build_estimator("naswot").score(record["arch"], context))


def test_the_default_of_a_shipped_space_and_of_a_space_without_ground_truth():
    from nas.engine.searching.score import default_score

    shipped = api.build_space(api.load_config("fashion_mnist_cell201"))
    spec, why = default_score(shipped)
    assert spec == "jacov+macs" and why == ("the default for cell201, chosen on half of the committed ground truth of "
                                            "fashion_mnist_cell201, graded on the other half (MACs alone ranked that "
                                            "half better within MACs bins); benchmarks/default_score.py, "
                                            "benchmarks/notes/17-default-path.md gives the held-out figures and their date; "
                                            "NAS-Bench-201's CIFAR-10 accuracies chose it too (on NASLib's 725 "
                                            "archs, graded on 1,000 others; benchmarks/nb201_proxies.py, "
                                            "benchmarks/notes/21-nb201-yardstick.md)")
    vit = api.build_space(api.load_config("fashion_mnist_vit"))
    spec, why = default_score(vit)
    assert spec == "macs+naswot+synflow" and "supernet" not in spec
    assert why == ("the default for a space without a committed ground truth (the best mean over the shipped "
                   "spaces), chosen on half of the committed ground truth of the shipped spaces, graded on the "
                   "other half; benchmarks/default_score.py, benchmarks/notes/17-default-path.md gives the held-out figures "
                   "and their date")


def test_auto_s_line_is_short_and_the_evidence_is_asked_for(trained, tmp_path, capsys):
    """`nas summary` says the score and its one reason in one short line; `--json` keeps the evidence."""
    from nas.engine.searching.score import choose_score

    vit = api.build_space(api.load_config("fashion_mnist_vit"))
    choice = choose_score("auto", tmp_path, vit)
    assert choice.line == "score auto: macs+naswot+synflow, the generic default (no fidelity summary of this run)"
    assert choice.line.split(", ")[0] in choice.reason and len(choice.reason) > 250
    assert cli.main(["search", "tiny", "--runs-dir", str(trained), "--trials", "2", "--out", str(tmp_path / "s"),
                     "--quiet", "--ships", "finetuned"]) == 0
    capsys.readouterr()
    assert cli.main(["summary", str(tmp_path / "s")]) == 0
    chosen = [line for line in capsys.readouterr().out.splitlines() if line.startswith("chosen by: ")]
    assert chosen == ["chosen by: score auto: naswot, the mobilenetv3 default (no fidelity summary of this run)"]
    assert cli.main(["summary", str(tmp_path / "s"), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["score_line"] == chosen[0].removeprefix("chosen by: ")
    assert "benchmarks/notes/17-default-path.md" in printed["score_reason"] and "fashion_mnist_mbv3" in printed["score_reason"]
    # a summary from before score_line existed: the score, and where its reason is
    saved = tmp_path / "s" / "summary.json"
    saved.write_text(json.dumps({key: value for key, value in json.loads(saved.read_text()).items()
                                 if key != "score_line"}))
    assert cli.main(["summary", str(tmp_path / "s")]) == 0
    assert "chosen by: score auto: naswot (why: score_reason in summary.json)\n" in capsys.readouterr().out


def test_every_default_score_is_spelt_as_searches_record_it():
    from estimators import canonical_spec
    from nas.engine.searching.score import DEFAULT_SCORES, GENERIC_DEFAULT

    for default in (*DEFAULT_SCORES.values(), GENERIC_DEFAULT):
        assert canonical_spec(default.spec) == default.spec


def _summary(folder: Path, taus: dict[str, float], mtime: float) -> Path:
    folder.mkdir(parents=True)
    path = folder / "summary.json"
    path.write_text(json.dumps({"kendall_tau": 0.5, "estimators": {
        name: {"kendall_tau": 0.1, "kendall_tau_ci90": [0, 0.2], "within_bin_tau": tau,
               "within_bin_tau_ci90": [tau - 0.1, tau + 0.1], "top_k_overlap": 0.5} for name, tau in taus.items()}}))
    os.utime(path, (mtime, mtime))
    return path


def test_auto_picks_the_best_within_bin_tau_of_the_latest_fidelity_summary(trained, tmp_path, capsys):
    runs = copy_run(trained, "tiny", tmp_path / "runs")
    fidelity = runs / "tiny" / "fidelity"
    _summary(fidelity / "newer", {"supernet": 0.2, "params": 0.35, "macs": 0.1}, 2_000_000_000)
    _summary(fidelity / "older", {"supernet": 0.2, "macs": 0.9}, 1_000_000_000)   # newer name order, older file
    assert cli.main(["search", "tiny", "--runs-dir", str(runs), "--trials", "3", "--json", "--quiet", "--ships", "finetuned"]) == 0
    out, err = capsys.readouterr()
    assert err.strip() == "--score auto: params, the best within-bin tau in nas fidelity (0.350)"
    printed = json.loads(out)
    assert printed["score_reason"] == (f"score auto: params (within-bin Kendall tau 0.350 in "
                                       f"{fidelity / 'newer' / 'summary.json'}; supernet 0.200, macs 0.100)")
    assert printed["score"] == "params" and Path(printed["dir"]).name == "evolution-score-params-s0"
    run = api.load_run("tiny", runs)
    assert all(r["score_value"] == run.space.params(r["arch"]) for r in _lines(Path(printed["dir"]) / "results.jsonl"))


def test_a_population_score_is_told_ranks_so_far_and_the_best_is_ranked_among_all(trained, tmp_path, estimators):
    run = api.load_run("tiny", trained)
    found = api.search(run, "random", trials=7, seed=1, out=tmp_path, progress=False, score="test-param-ranks")
    lines = _lines(tmp_path / "results.jsonl")
    params = [run.space.params(r["arch"]) for r in lines]
    assert [r["score_told"] for r in lines] == [float(sum(p < params[i] for p in params[:i]))
                                                for i in range(len(lines))]
    assert all("val_top1" not in r for r in lines)
    top = max(params)
    assert run.space.params(found.best) == top and found.score_value == float(sum(p < top for p in params))
    assert [r["score_value"] for r in found.trials] == [float(sum(p < mine for p in params)) for mine in params]


def test_a_fusion_with_the_supernet_keeps_val_top1_in_every_record(trained, tmp_path, estimators):
    run = api.load_run("tiny", trained)
    api.search(run, "random", trials=4, out=tmp_path, progress=False, score="test-fusion")
    for record in _lines(tmp_path / "results.jsonl"):
        assert record["val_top1"] == run.evaluator.evaluate(record["arch"], "val").top1
        assert record["score"] == "test-fusion"


def test_estimators_read_fixed_seeded_training_batches_and_the_run(trained, tmp_path, estimators):
    run = api.load_run("tiny", trained)
    found = api.search(run, "random", trials=2, out=tmp_path, progress=False, score="test-batches")
    context = SEEN["context"]
    expected = run.data.sample_batches("train", 2, 64, 0)
    assert len(context.batches) == 2 and context.run_dir == run.dir.root and context.space is run.space
    for (images, labels), (want_images, want_labels) in zip(context.batches, expected):
        assert images.shape[0] == 64 and torch.equal(images, want_images) and torch.equal(labels, want_labels)
    assert found.score_value == float(expected[0][0][0, 0, 0, 0]) + run.space.macs(found.best)


def test_a_search_folder_from_before_scores_resumes_as_supernet(trained, tmp_path):
    run = api.load_run("tiny", trained)
    api.search(run, "random", trials=2, out=tmp_path, progress=False, score="supernet")
    settings = json.loads((tmp_path / "search.json").read_text())
    del settings["settings"]["score"]
    (tmp_path / "search.json").write_text(json.dumps(settings))
    old = [{k: v for k, v in r.items() if k not in ("score", "score_value")} for r in _lines(tmp_path / "results.jsonl")]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old))
    found = api.search(run, "random", trials=3, out=tmp_path, progress=False, score="supernet")
    assert found.evaluated == 3 and found.new == 1
    with pytest.raises(SearchError, match=r"\(score supernet there, macs now\)"):
        api.search(run, "random", trials=4, out=tmp_path, progress=False, score="macs")


def test_auto_says_when_its_choice_is_indistinguishable_from_chance(tmp_path):
    from nas.engine.searching.score import choose_score

    path = _summary(tmp_path / "fidelity" / "flat", {"supernet": 0.02, "naswot": 0.08}, 1_000_000_000)
    choice = choose_score("auto", tmp_path)
    assert choice.name == "naswot"
    assert choice.reason == (f"score auto: naswot (within-bin Kendall tau 0.080 in {path}; supernet 0.020); its "
                             "90% interval [-0.02, 0.18] includes 0: this ground truth cannot tell it from chance "
                             "within MACs bins, so the choice is weak (a ground truth of more archs would "
                             "settle it)")
    assert choice.line == "score auto: naswot, the best within-bin tau in nas fidelity (0.080; weak: its 90% interval " \
                          "includes 0)"
    path.write_text(json.dumps({"within_bin_tau": 0.3, "within_bin_tau_ci90": [0.1, 0.5], "estimators": {}}))
    assert choose_score("auto", tmp_path).reason.endswith("in " + str(path) + ")")   # the top-level supernet: clear


def test_auto_reads_only_summaries_that_compare_estimators(tmp_path):
    from nas.engine.searching.score import choose_score

    _summary(tmp_path / "fidelity" / "a", {"macs": 0.3, "supernet": 0.3, "naswot": 0.3}, 1_000_000_000)
    assert choose_score("auto", tmp_path).name == "supernet"           # a tie goes to the supernet
    old = tmp_path / "fidelity" / "b" / "summary.json"
    old.parent.mkdir()
    old.write_text(json.dumps({"kendall_tau": 0.4}))                  # written before estimators existed
    choice = choose_score("auto", tmp_path)
    assert choice.name == "supernet" and choice.reason == f"score auto: supernet ({old} reports no within-bin tau " \
                                                          "of any estimator)"
    assert choice.line == "score auto: supernet (the fidelity summary reports no within-bin tau)"
    old.write_text("{not json")
    with pytest.raises(SearchError, match=f"score auto: {old}: cannot read the fidelity summary"):
        choose_score("auto", tmp_path)
    assert choose_score("params", tmp_path).reason is None and choose_score("params", tmp_path).line is None


def test_auto_ignores_a_fidelity_summary_of_another_space_and_says_so(tmp_path):
    from nas.engine.searching.score import choose_score
    from tests.conftest import make_space

    space = make_space("cell201", small=True)
    own = _summary(tmp_path / "fidelity" / "own", {"supernet": 0.1, "macs": 0.4}, 1_000_000_000)
    for folder, marks, said in [("other", {"space": "vit"}, "it measured space vit, this run's is cell201"),
                                ("edited", {"space": "cell201", "space_fingerprint": "0123456789ab"},
                                 f"it measured space fingerprint 0123456789ab, this run's is {space.fingerprint()}")]:
        path = _summary(tmp_path / "fidelity" / folder, {"supernet": 0.1, "params": 0.9}, 2_000_000_000)
        path.write_text(json.dumps({**json.loads(path.read_text()), **marks}))
        os.utime(path, (2_000_000_000, 2_000_000_000))
        choice = choose_score("auto", tmp_path, space)
        assert choice.name == "macs"         # the older summary of this space, not the newer one of another
        assert choice.reason == f"score auto: macs (within-bin Kendall tau 0.400 in {own}; supernet 0.100; " \
                                f"ignored {path}: {said})"
        path.unlink()
    marked = json.loads(own.read_text())
    own.write_text(json.dumps({**marked, "space": "cell201", "space_fingerprint": space.fingerprint()}))
    assert choose_score("auto", tmp_path, space).name == "macs"
    own.write_text(json.dumps({**marked, "space": "mobilenetv3"}))
    choice = choose_score("auto", tmp_path, space)
    assert "ignored " + str(own) in choice.reason and choice.name != "macs"
    said = "on this space the supernet serves the weights, not the ranking"     # NAS-Bench-201 on CIFAR-10
    assert choice.line == f"score auto: {choice.name}, the cell201 default (no fidelity summary of this space; {said})"
    assert f"{said}: trained on CIFAR-10, PA&DA's supernet ranked NAS-Bench-201's networks at Kendall 0.23-0.36" \
        in choice.reason


@pytest.mark.parametrize("tau", [1.5, -1.01, float("nan"), float("inf"), "0.3", True])
def test_auto_refuses_a_within_bin_tau_that_is_no_tau_naming_the_summary(tmp_path, tau):
    from nas.engine.searching.score import choose_score

    path = _summary(tmp_path / "fidelity" / "bad", {"supernet": 0.1, "naswot": 0.2}, 1_000_000_000)
    summary = json.loads(path.read_text())
    summary["estimators"]["naswot"]["within_bin_tau"] = tau
    path.write_text(json.dumps(summary))
    with pytest.raises(SearchError) as raised:
        choose_score("auto", tmp_path)
    assert str(raised.value) == (f"score auto: {path}: the within-bin tau of 'naswot' must be a number in [-1, 1] "
                                 f"or null, got {json.dumps(tau)}; the fidelity summary is damaged: run nas "
                                 "fidelity again or name a score with score=")
    summary["estimators"]["naswot"]["within_bin_tau"] = None        # undefined (only ties): skipped, as before
    path.write_text(json.dumps(summary))
    assert choose_score("auto", tmp_path).name == "supernet"


def test_an_unknown_estimator_of_a_summary_is_the_summary_s_problem_not_the_score_s(trained, tmp_path, capsys):
    runs = copy_run(trained, "tiny", tmp_path / "runs")
    path = _summary(runs / "tiny" / "fidelity" / "a", {"supernet": 0.1, "macz": 0.5}, 1_000_000_000)
    err = one_line_error(capsys, ["search", "tiny", "--runs-dir", str(runs), "--trials", "2", "--quiet", "--ships", "finetuned"],
                         f"--score auto: {path}: the fidelity summary names an estimator unknown here "
                         "(unknown estimator 'macz' (did you mean 'macs'?); available: ",
                         "); name a score with --score or run nas fidelity again")
    assert "--score: unknown estimator" not in err
