"""benchmarks/search_regret.py on the tiny run with a tiny recipe: its regrets against the cached
standalone trainings, its random archs, its default scores."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from benchmarks import search_regret
from estimators.base import Estimator
from nas import api
from nas.core.arch import arch_id
from nas.core.registry import ESTIMATORS, Entry, NoOptions
from tests.support.safety import copy_run

@pytest.fixture(scope="module")
def regret():
    return search_regret


@pytest.mark.slow
def test_each_score_is_compared_with_random_archs_trained_the_same_way(regret, trained, tmp_path, capsys):
    runs = copy_run(trained, "tiny", tmp_path / "runs")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("train:\n  epochs: 1\ndata:\n  train_size: 128\n")
    argv = ["tiny", "--runs-dir", str(runs), "--budget", "50%", "--scores", "macs,supernet", "--trials", "3",
            "--random", "3", "--seeds", "2", "--recipe", str(recipe), "--ground-truth", str(tmp_path / "gt"),
            "--quiet"]
    report = regret.main(argv)
    out = capsys.readouterr().out.splitlines()
    assert json.loads(out[-1]) == json.loads(json.dumps(report))
    assert any(line.startswith("macs ") for line in out) and any(line.startswith("supernet ") for line in out)

    folder = Path(report["ground_truth"])
    assert folder.parent.parent == tmp_path / "gt"

    def mean(key: str) -> float:       # from the cache files the trainings wrote
        return statistics.fmean(json.loads((folder / f"{key}-s{k}.json").read_text())["test_top1"] for k in (0, 1))

    randoms = [r["arch_id"] for r in report["random"]]
    assert len(set(randoms)) == 3 and all(r["macs"] <= report["max_macs"] for r in report["random"])
    best, median = max(map(mean, randoms)), statistics.median(map(mean, randoms))
    assert report["random_best"] == pytest.approx(best) and report["random_median"] == pytest.approx(median)
    space = api.load_run("tiny", runs).space
    for name, row in report["scores"].items():
        assert row["score"] == name and row["macs"] == space.macs(row["arch"]) <= report["max_macs"]
        assert row["standalone_mean"] == pytest.approx(mean(row["arch_id"]))
        assert row["regret_vs_best_random"] == pytest.approx(100 * (best - mean(row["arch_id"])), abs=1e-3)
        assert row["regret_vs_median_random"] == pytest.approx(100 * (median - mean(row["arch_id"])), abs=1e-3)
        lines = [json.loads(line) for line in (Path(row["search_dir"]) / "results.jsonl").read_text().splitlines()]
        assert len(lines) == 3 and row["score_value"] == max(line["score_value"] for line in lines)
    assert report["scores"]["supernet"]["val_top1"] == report["scores"]["supernet"]["score_value"]
    assert report["scores"]["macs"]["val_top1"] is None
    distinct = set(randoms) | {row["arch_id"] for row in report["scores"].values()}
    assert report["trainings_now"] == 2 * len(distinct)
    again = regret.main(argv)          # searches resume, trainings come from the cache
    assert again["trainings_now"] == 0 and again["scores"] == report["scores"]


def test_random_archs_are_distinct_feasible_and_a_function_of_the_seed(regret, trained):
    space = api.load_run("tiny", trained).space
    budget = (space.macs(space.min()) + space.macs(space.max())) / 2
    first = regret.random_archs(space, budget, 5, seed=1)
    assert first == regret.random_archs(space, budget, 5, seed=1) != regret.random_archs(space, budget, 5, seed=2)
    assert len({arch_id(a) for a in first}) == 5 and all(space.macs(a) <= budget for a in first)
    assert all(space.canonical(a) == a for a in first)


def test_default_scores_are_the_baselines_every_cheap_proxy_and_auto(regret, monkeypatch):
    class Proxy(Estimator):
        needs = frozenset({"batches"})

        def scores(self, archs, context):
            return [0.0] * len(archs)

    class Fusion(Proxy):
        population = True

    class Slow(Proxy):
        cheap = False

    class Calibrated(Proxy):
        needs = frozenset({"run_dir"})

    for name, cls in (("zz-proxy", Proxy), ("aa-proxy", Proxy), ("fusion", Fusion), ("slow", Slow),
                      ("calibrated-test", Calibrated)):
        monkeypatch.setitem(ESTIMATORS._entries, name, Entry(name, cls, NoOptions))
    scores = regret.default_scores()
    assert scores[:3] == ["supernet", "macs", "params"] and scores[-1] == "auto"
    assert [s for s in scores if s in ("zz-proxy", "aa-proxy", "fusion", "slow", "calibrated-test")] == \
           ["aa-proxy", "zz-proxy"]


def test_bad_counts_are_refused_naming_the_flag(regret, capsys):
    with pytest.raises(SystemExit):
        regret.parse_args(["run", "--budget", "50%", "--random", "0"])
    assert "--random: must be >= 1, got 0" in capsys.readouterr().err


@pytest.mark.slow
def test_crowd_mode_ranks_each_answer_among_the_cached_crowd_and_trains_only_new_answers(regret, trained, tmp_path,
                                                                                          capsys):
    runs = copy_run(trained, "tiny", tmp_path / "runs")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("train:\n  epochs: 1\ndata:\n  train_size: 128\n")
    common = ["tiny", "--runs-dir", str(runs), "--recipe", str(recipe), "--quiet"]
    first = regret.main([*common, "--budget", "50%", "--scores", "macs", "--trials", "2", "--random", "4",
                         "--ground-truth", str(tmp_path / "gt")])
    # the crowd: the four random archs only (the answer of the first search is left out of it)
    source = Path(first["ground_truth"])
    crowd_folder = tmp_path / "crowd" / source.relative_to(tmp_path / "gt")
    crowd_folder.mkdir(parents=True)
    members = [r["arch_id"] for r in first["random"]]
    for key in members:
        for k in (0, 1):
            name = f"{key}-s{k}.json"
            (crowd_folder / name).write_text((source / name).read_text())
    capsys.readouterr()
    argv = [*common, "--crowd", str(tmp_path / "crowd"), "--budget", "50%,100%", "--search-seeds", "0,1",
            "--scores", "macs,params", "--finalists", "2", "--finalist-steps", "2", "--trials", "3",
            "--ground-truth", str(tmp_path / "new")]
    report = regret.main(argv)
    out = capsys.readouterr().out.splitlines()
    assert json.loads(out[-1]) == json.loads(json.dumps(report))
    assert report["crowd_size"] == 4 and report["crowd_feasible"] == {"50%": 4, "100%": 4}

    def seeds(key: str) -> list[float]:          # from the files: the crowd's, else the new trainings'
        folder = crowd_folder if key in members else Path(report["ground_truth"])
        return [json.loads((folder / f"{key}-s{k}.json").read_text())["test_top1"] for k in (0, 1)]

    crowd_means = {key: statistics.fmean(seeds(key)) for key in members}
    cells = report["cells"]
    assert [(c["budget"], c["search_seed"], c["method"]) for c in cells] == [
        (b, s, m) for b in ("50%", "100%") for s in (0, 1) for m in ("macs", "macs+finalists2", "params",
                                                                      "params+finalists2")]
    for cell in cells:
        mean = statistics.fmean(seeds(cell["arch_id"]))
        others = [v for key, v in crowd_means.items() if key != cell["arch_id"]]
        assert cell["standalone_mean"] == pytest.approx(mean)
        assert cell["rank"] == 1 + sum(v > mean for v in others) and cell["of"] == len(others) + 1
        assert cell["percentile"] == pytest.approx(sum(v < mean for v in others) / len(others))
        assert cell["crowd_best"] == max(crowd_means.values())
        assert cell["crowd_median"] == pytest.approx(statistics.median(crowd_means.values()))
        assert cell["in_crowd"] == (cell["arch_id"] in members) and cell["macs"] <= cell["max_macs"]
        assert cell["score"] == cell["method"].split("+")[0]
        trials = [json.loads(line) for line in (Path(cell["search_dir"]) / "results.jsonl").read_text().splitlines()]
        assert cell["eval_s"] == pytest.approx(sum(t["eval_seconds"] for t in trials), abs=0.06)
        assert (cell["finalists_s"] > 0) == ("+" in cell["method"])
    finalists = [c for c in cells if c["method"].endswith("+finalists2")]
    # the finalists resume the plain search's folder: same trials, then the stage
    assert [c["search_dir"] for c in finalists] == [c["search_dir"] for c in cells if "+" not in c["method"]]
    assert all(json.loads((Path(c["search_dir"]) / "summary.json").read_text())["finalists"] for c in finalists)
    new = {c["arch_id"] for c in cells if c["arch_id"] not in members}
    assert report["trainings_now"] == 2 * len(new)
    for method, targets in report["targets"].items():
        mine = [c for c in cells if c["method"] == method]
        assert targets["cells"] == 4
        assert targets["at_or_above_median"] == sum(c["standalone_mean"] >= c["crowd_median"] for c in mine)
        assert targets["mean_percentile"] == pytest.approx(statistics.fmean(c["percentile"] for c in mine))
    assert any(line.startswith("macs+finalists2: at or above the crowd median in ") for line in out)
    # searches resume; only the macs rows' answers outside the crowd are trained, one seed each, into a fresh cache
    only = regret.main([*argv[:-1], str(tmp_path / "only-macs"), "--train-methods", "macs", "--seeds", "1"])
    macs_answers = {c["arch_id"] for c in cells if c["method"] == "macs"}
    assert [c["trained"] for c in only["cells"]] == [c["arch_id"] in macs_answers | set(members) for c in cells]
    assert only["trainings_now"] == len(macs_answers - set(members))
    assert only["targets"]["params"]["untrained"] == sum(not c["trained"] for c in only["cells"]
                                                         if c["method"] == "params")
    for one, two in zip(only["cells"], cells):
        if one["trained"] and not one["in_crowd"]:       # seed 0 as in the two-seed cache, no sd
            assert one["standalone_seeds"] == two["standalone_seeds"][:1] and one["standalone_sd"] is None
        elif one["in_crowd"]:
            assert one["standalone_seeds"] == two["standalone_seeds"] and one["rank"] == two["rank"]
    assert any("(1 seed)" in line for line in capsys.readouterr().out.splitlines()) == bool(macs_answers - set(members))


def test_crowd_flags_need_a_crowd(regret, capsys):
    with pytest.raises(SystemExit):
        regret.parse_args(["run", "--budget", "50%", "--finalists", "2"])
    assert "--search-seeds and --finalists need --crowd" in capsys.readouterr().err
