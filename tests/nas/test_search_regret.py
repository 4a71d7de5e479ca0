"""benchmarks/search_regret.py on the tiny run with a tiny recipe: its regrets against the cached
standalone trainings, its random archs, its default scores."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from estimators.base import Estimator
from nas import api
from nas.core.arch import arch_id
from nas.core.registry import ESTIMATORS, Entry, NoOptions
from tests.benchmark_scripts import load_benchmark
from tests.nas.safety import copy_run

@pytest.fixture(scope="module")
def regret():
    return load_benchmark("search_regret")


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
