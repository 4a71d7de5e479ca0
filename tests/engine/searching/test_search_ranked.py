"""A population score's files agree: results.jsonl logs what each trial was told (`score_told`,
never a `score_value` to sort by), ranked.jsonl holds the final scores, best first, and its
first line is the reported best."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import rankdata

from nas import api
from nas.core.arch import read_arch_file
from nas.core.registry import ESTIMATORS, Entry, NoOptions
from tests.engine.searching.test_search_score import ParamRanks


@pytest.fixture
def param_ranks(monkeypatch):
    monkeypatch.setitem(ESTIMATORS._entries, ParamRanks.name, Entry(ParamRanks.name, ParamRanks, NoOptions))


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _without_time(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "eval_seconds"} for r in records]


def test_ranked_jsonl_sorted_gives_the_reported_best_where_the_told_ranks_would_not(trained, tmp_path, param_ranks):
    run = api.load_run("tiny", trained)
    for seed in range(10):      # the first seed whose told ranks would name another arch than the final ones
        found = api.search(run, "random", trials=7, seed=seed, out=tmp_path / f"s{seed}", progress=False,
                           score="test-param-ranks")
        lines = _lines(tmp_path / f"s{seed}" / "results.jsonl")
        told_best = min(lines, key=lambda r: (-r["score_told"], r["macs"], r["trial"]))
        if told_best["arch_id"] != found.arch_id:
            break
    assert told_best["arch_id"] != found.arch_id, "no seed of 10 tells a rank that differs from the final one"
    tmp_path = tmp_path / f"s{seed}"
    params = [run.space.params(r["arch"]) for r in lines]
    assert all("score_value" not in r for r in lines)
    assert [r["score_told"] for r in lines] == [float(sum(p < params[i] for p in params[:i])) for i in range(7)]

    ranked = _lines(tmp_path / "ranked.jsonl")
    final = {r["arch_id"]: float(sum(p < mine for p in params)) for r, mine in zip(lines, params)}
    assert sorted(r["arch_id"] for r in ranked) == sorted(final)
    assert all(r["score_value"] == final[r["arch_id"]] for r in ranked)
    assert ranked == sorted(ranked, key=lambda r: (-r["score_value"], r["macs"], r["trial"]))   # the documented order
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert ranked[0]["arch_id"] == found.arch_id == summary["record"]["arch_id"] == summary["arch_id"]
    assert read_arch_file(tmp_path / "best.yaml") == ranked[0]["arch"]
    pareto = json.loads((tmp_path / "pareto.json").read_text())
    assert all(point["score_value"] == final[point["arch_id"]] for point in pareto["fronts"]["macs"])
    told = {r["arch_id"]: r["score_told"] for r in lines}
    assert all(r["score_told"] == told[r["arch_id"]] for r in ranked)


def test_a_resumed_population_search_replays_what_was_told(trained, tmp_path, param_ranks):
    run = api.load_run("tiny", trained)
    api.search(run, "random", trials=4, seed=2, out=tmp_path / "resumed", progress=False, score="test-param-ranks")
    first = _lines(tmp_path / "resumed" / "results.jsonl")
    resumed = api.search(run, "random", trials=7, seed=2, out=tmp_path / "resumed", progress=False,
                         score="test-param-ranks")
    whole = api.search(run, "random", trials=7, seed=2, out=tmp_path / "whole", progress=False,
                       score="test-param-ranks")
    lines = _lines(tmp_path / "resumed" / "results.jsonl")
    assert lines[:4] == first and resumed.new == 3                 # appended to, never rewritten
    assert _without_time(lines) == _without_time(_lines(tmp_path / "whole" / "results.jsonl"))
    assert _without_time(_lines(tmp_path / "resumed" / "ranked.jsonl")) == \
           _without_time(_lines(tmp_path / "whole" / "ranked.jsonl"))
    assert resumed.arch_id == whole.arch_id


def test_a_fusion_logs_each_component_and_ranks_all_archs_at_the_end(trained, tmp_path):
    run = api.load_run("tiny", trained)
    found = api.search(run, "random", trials=6, seed=3, out=tmp_path, progress=False, score="params+2*macs")
    lines = _lines(tmp_path / "results.jsonl")
    assert all(r["score"] == "2*macs+params" and "score_value" not in r for r in lines)
    macs = [float(run.space.macs(r["arch"])) for r in lines]
    params = [float(run.space.params(r["arch"])) for r in lines]
    assert [r["score_macs"] for r in lines] == macs and [r["score_params"] for r in lines] == params

    def fused(upto: int) -> np.ndarray:     # 2 * normalised rank by MACs + 1 * by params, over 3
        ranks = [(rankdata(values[:upto]) - 1) / max(upto - 1, 1) if upto > 1 else np.ones(1)
                 for values in (macs, params)]
        return (2 * ranks[0] + ranks[1]) / 3

    assert [r["score_told"] for r in lines] == pytest.approx([fused(i + 1)[i] for i in range(6)])
    ranked = _lines(tmp_path / "ranked.jsonl")
    by_trial = {r["trial"]: r["score_value"] for r in ranked}
    assert [by_trial[r["trial"]] for r in lines] == pytest.approx(list(fused(6)))
    assert ranked[0]["arch_id"] == found.arch_id and found.score_value == ranked[0]["score_value"]


def test_a_plain_score_ranks_its_results_as_logged(trained, tmp_path):
    run = api.load_run("tiny", trained)
    found = api.search(run, "random", trials=5, seed=4, out=tmp_path, progress=False, score="params")
    lines = _lines(tmp_path / "results.jsonl")
    ranked = _lines(tmp_path / "ranked.jsonl")
    assert ranked == sorted(lines, key=lambda r: (-r["score_value"], r["macs"], r["trial"]))
    assert ranked[0]["arch_id"] == found.arch_id and "score_told" not in ranked[0]
