"""benchmarks/default_score.py: the held-out split and the fusions it grades."""
from __future__ import annotations

import random

import pytest

from benchmarks import default_score as bench
from estimators import EstimatorContext, build_estimator
from tests.conftest import make_space


def test_the_split_puts_one_of_each_macs_neighbour_pair_in_each_half_and_is_seeded():
    macs = [float(m) for m in random.Random(0).sample(range(1000), 15)]
    choose, report = bench.split_halves(macs, seed=0)
    assert sorted(choose + report) == list(range(15)) and (len(choose), len(report)) == (8, 7)
    order = sorted(range(15), key=lambda i: macs[i])
    for start in range(0, 14, 2):          # each consecutive pair by MACs is split across the halves
        pair = set(order[start:start + 2])
        assert len(pair & set(choose)) == 1 and len(pair & set(report)) == 1
    assert order[14] in choose
    assert bench.split_halves(macs, seed=0) == (choose, report)
    assert any(bench.split_halves(macs, seed=s) != (choose, report) for s in range(1, 5))


def test_a_fusion_of_cached_scores_is_what_the_fused_estimator_computes():
    space = make_space("cell201", small=True)
    rng = random.Random(2)
    archs = [space.sample(rng) for _ in range(9)]
    context = EstimatorContext(space=space)
    scores = {"macs": [float(space.macs(a)) for a in archs], "params": [float(space.params(a)) for a in archs]}
    rows = [0, 2, 3, 5, 8]
    fused = build_estimator("macs+params").scores([archs[i] for i in rows], context)
    assert bench.fused("macs+params", scores, rows) == pytest.approx(fused, abs=1e-12)
    assert bench.fused("macs", scores, rows) == [scores["macs"][i] for i in rows]


def test_candidates_are_singles_and_macs_with_one_or_two_others():
    specs = bench.candidates(["macs", "params", "naswot", "synflow", "jacov"])
    assert specs[:5] == ["macs", "params", "naswot", "synflow", "jacov"]
    assert set(specs[5:]) == {"macs+naswot", "macs+synflow", "macs+jacov", "macs+naswot+synflow",
                              "macs+naswot+jacov", "macs+synflow+jacov"}


def test_the_choice_reads_only_the_choose_half_and_reports_the_other():
    nan = float("nan")
    table = {"s1": {"rows": {"a": {"choose": (0.5, 0.9), "report": (0.1, 0.2), "all": (0, 0)},
                             "b": {"choose": (0.9, 0.4), "report": (0.9, 0.9), "all": (0, 0)},
                             "c": {"choose": (0.0, 0.8), "report": (0.3, 0.1), "all": (0, 0)}}},
             "s2": {"rows": {"a": {"choose": (0.5, -0.5), "report": (0.0, 0.0), "all": (0, 0)},
                             "b": {"choose": (0.5, 0.1), "report": (0.0, 0.0), "all": (0, 0)},
                             "c": {"choose": (0.5, 0.2), "report": (0.7, nan), "all": (0, 0)},
                             "s2only": {"choose": (0.5, 0.95), "report": (0.0, 0.0), "all": (0, 0)}}}}
    result = bench.choose_defaults(table)
    assert result["per_space"]["s1"] == {"score": "a", "choose_within_bin_tau": 0.9, "report_tau": 0.1,
                                         "report_within_bin_tau": 0.2}
    assert result["per_space"]["s2"]["score"] == "s2only"
    # generic: the best mean CHOOSE within-bin tau over both spaces (c: 0.5, a: 0.2, b: 0.25), an
    # undefined REPORT figure reported as None
    assert result["generic"]["score"] == "c"
    assert result["generic"]["report_within_bin_tau"] == {"s1": 0.1, "s2": None}
