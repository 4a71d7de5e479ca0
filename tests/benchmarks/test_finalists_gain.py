"""benchmarks/finalists_gain.py: the ground truth it reads and the answers it grades."""
from __future__ import annotations

import json
import random
import statistics

from benchmarks import finalists_gain as bench


def test_the_ground_truth_is_the_mean_of_each_arch_s_seeds(tmp_path):
    for key, seeds in {"a": [0.8, 0.9], "b": [0.7]}.items():
        for k, top1 in enumerate(seeds):
            record = {"arch_id": key, "arch": {"x": key}, "macs": 10 + k, "test_top1": top1}
            (tmp_path / f"{key}-s{k}.json").write_text(json.dumps(record))
    truth = bench.ground_truth(tmp_path)
    assert truth["a"]["truth"] == statistics.fmean([0.8, 0.9]) and truth["b"]["truth"] == 0.7
    assert truth["a"]["arch"] == {"x": "a"}


def test_each_measure_s_answer_is_ranked_among_the_feasible_archs_by_the_truth():
    rng = random.Random(0)
    rows = [{"arch_id": f"a{i}", "macs": i, "truth": rng.random(), "supernet": rng.random(),
             "finetuned": rng.random()} for i in range(101)]
    for pick in bench.budget_picks(rows, (3, 5)):
        crowd = [r for r in rows if r["macs"] <= pick["budget_pct"]]      # MACs 0..100: the percent is the budget
        truths = sorted((r["truth"] for r in crowd), reverse=True)
        assert pick["feasible"] == len(crowd) and pick["best"] == truths[0]
        by_score = max(crowd, key=lambda r: r["supernet"])
        assert pick["supernet"]["arch_id"] == by_score["arch_id"]
        assert pick["supernet"]["rank"] == truths.index(by_score["truth"]) + 1
        top3 = sorted(crowd, key=lambda r: -r["supernet"])[:3]
        winner = max(top3, key=lambda r: r["finetuned"])
        assert pick["finalists_k3"]["arch_id"] == winner["arch_id"]
        assert pick["finalists_k3"]["rank"] == truths.index(winner["truth"]) + 1
