"""A within-bin tau resting on too few pairs gets no confident interval: the verdict does not call
it a win beyond the intervals, and `--score auto` flags a choice made on it as weak."""
from __future__ import annotations

import json

from nas.engine.fidelity.rank_stats import MIN_WITHIN_BIN_PAIRS
from nas.engine.fidelity.report import estimator_summary
from nas.engine.searching.score import choose_score


def _records(standalone: list[float], supernet: list[float]) -> list[dict]:
    """Archs of MACs 1..n (scored by `macs` as their MACs) with these accuracies."""
    return [{"arch_id": f"a{i}", "macs": i + 1, "standalone_test_top1": alone,
             "estimators": {"supernet": shared, "macs": i + 1}}
            for i, (alone, shared) in enumerate(zip(standalone, supernet))]


def test_a_within_bin_tau_of_one_pair_is_no_verdict_and_a_weak_auto_choice(tmp_path):
    # 4 archs in 3 equal-count MACs bins: [a0, a1], [a2], [a3]: one pair inside a bin, which the
    # supernet orders right (a0 above a1) and MACs wrong
    records = _records([0.6, 0.5, 0.7, 0.8], [0.2, 0.1, 0.3, 0.4])
    summary = estimator_summary(records, ["supernet", "macs"], seed=0)
    shared, macs = summary["estimators"]["supernet"], summary["estimators"]["macs"]
    assert (shared["within_bin_tau"], macs["within_bin_tau"]) == (1.0, -1.0)
    assert shared["within_bin_pairs"] == macs["within_bin_pairs"] == 1 < MIN_WITHIN_BIN_PAIRS
    assert shared["within_bin_tau_ci90"] == macs["within_bin_tau_ci90"] == [-1.0, 1.0]
    assert "beats" in summary["verdict"] and "within the 90% intervals ([-1.00, 1.00]" in summary["verdict"]
    folder = tmp_path / "fidelity" / "n4"
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps(summary))
    choice = choose_score("auto", tmp_path)
    assert choice.name == "supernet" and "includes 0" in choice.reason and "the choice is weak" in choice.reason


def test_a_within_bin_tau_of_enough_pairs_keeps_its_bootstrap_interval(tmp_path):
    n = 12      # 3 bins of 4 archs: 18 pairs inside bins, all ordered right by the supernet, wrong by MACs
    standalone = [0.5 - 0.01 * (i % 4) for i in range(n)]
    records = _records(standalone, [s - 0.3 for s in standalone])
    summary = estimator_summary(records, ["supernet", "macs"], seed=0)
    shared = summary["estimators"]["supernet"]
    assert shared["within_bin_pairs"] == 18 and shared["within_bin_tau_ci90"] == [1.0, 1.0]
    assert "beyond both 90% intervals" in summary["verdict"]
    folder = tmp_path / "fidelity" / "n12"
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps(summary))
    assert "weak" not in choose_score("auto", tmp_path).reason
