"""Rank statistics against brute-force pair counts on random data with many ties, and scipy."""
from __future__ import annotations

import collections
import itertools
import math
import random

import pytest

from nas.engine.fidelity.rank_stats import (
    average_ranks,
    bin_gaps,
    bootstrap_interval,
    kendall_tau_b,
    macs_terciles,
    spearman_rho,
    top_k_overlap,
    within_bin_tau,
)


def brute_tau_b(x, y):
    concordant = discordant = tied_x = tied_y = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        dx, dy = x[i] - x[j], y[i] - y[j]
        tied_x += dx == 0
        tied_y += dy == 0
        if dx * dy > 0:
            concordant += 1
        elif dx * dy < 0:
            discordant += 1
    pairs = len(x) * (len(x) - 1) // 2
    return (concordant - discordant) / math.sqrt((pairs - tied_x) * (pairs - tied_y))


def brute_rho(x, y):
    def ranks(v):   # 1 + (values below) + (other values equal) / 2
        return [1 + sum(w < value for w in v) + (sum(w == value for w in v) - 1) / 2 for value in v]

    rx, ry = ranks(x), ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    return cov / math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))


def _random_scores(rng, n):
    """Scores on a coarse grid, so ties are frequent in both lists."""
    x = [rng.randint(0, 6) / 10 for _ in range(n)]
    y = [rng.randint(0, 4) / 10 + 0.3 * v for v in x]
    return x, y


@pytest.mark.parametrize("seed", range(20))
def test_tau_b_and_rho_match_brute_force_with_ties(seed):
    rng = random.Random(seed)
    x, y = _random_scores(rng, rng.randint(3, 40))
    if len(set(x)) == 1 or len(set(y)) == 1:
        assert math.isnan(kendall_tau_b(x, y)) and math.isnan(spearman_rho(x, y))
        return
    assert len(set(x)) < len(x)   # the data has ties
    assert kendall_tau_b(x, y) == pytest.approx(brute_tau_b(x, y), abs=1e-12)
    assert spearman_rho(x, y) == pytest.approx(brute_rho(x, y), abs=1e-12)


def test_against_scipy():
    from scipy import stats     # the dev extra installs it

    rng = random.Random(7)
    for _ in range(10):
        x, y = _random_scores(rng, 30)
        assert kendall_tau_b(x, y) == pytest.approx(stats.kendalltau(x, y).statistic, abs=1e-12)
        assert spearman_rho(x, y) == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)


def test_perfect_and_reversed_orders():
    x = [0.1, 0.5, 0.3, 0.9]
    assert kendall_tau_b(x, [2 * v for v in x]) == pytest.approx(1.0)
    assert spearman_rho(x, [-v for v in x]) == pytest.approx(-1.0)
    assert math.isnan(kendall_tau_b([1, 1, 1], [1, 2, 3]))
    assert list(average_ranks([0.2, 0.1, 0.2, 0.5])) == [2.5, 1.0, 2.5, 4.0]
    with pytest.raises(ValueError, match="equally long"):
        kendall_tau_b([1, 2], [1, 2, 3])


def test_equal_infinities_tie_as_equal_values_do():
    """A log-score of an arch without a path is -inf; two such archs tie, they do not poison tau."""
    x = [-math.inf, -math.inf, 0.3, 0.9, 0.5]
    y = [0.1, 0.1, 0.4, 0.8, 0.6]
    finite = [-1e9, -1e9, 0.3, 0.9, 0.5]
    assert kendall_tau_b(x, y) == pytest.approx(brute_tau_b(finite, y)) == pytest.approx(1.0)
    assert spearman_rho(x, y) == pytest.approx(brute_rho(finite, y))


def test_top_k_overlap():
    x = [0.9, 0.8, 0.7, 0.1, 0.2, 0.3, 0.4, 0.5]
    y = [0.9, 0.1, 0.7, 0.2, 0.3, 0.8, 0.4, 0.5]
    assert top_k_overlap(x, y, 2) == 0.5         # {0, 1} vs {0, 5}
    assert top_k_overlap(x, y, 3) == 2 / 3       # {0, 1, 2} vs {0, 5, 2}
    assert top_k_overlap(x, x, 8) == 1.0
    with pytest.raises(ValueError, match="k must be in"):
        top_k_overlap(x, y, 0)


def test_bin_gaps_in_points_over_equal_width_bins():
    macs = [100, 120, 300, 500, 500]
    standalone = [0.90, 0.91, 0.85, 0.92, 0.94]
    supernet = [0.89, 0.90, 0.80, 0.93, 0.90]
    rows = bin_gaps(macs, standalone, supernet, bins=4)   # width 100: [100,200) [200,300) [300,400) [400,500]
    assert [row["archs"] for row in rows] == [2, 0, 1, 2]
    assert rows[0]["gap_mean"] == pytest.approx(1.0) and rows[0]["gap_max"] == pytest.approx(1.0)
    assert rows[1]["gap_mean"] is None and rows[1]["gap_max"] is None
    assert rows[2]["gap_mean"] == pytest.approx(5.0)
    assert rows[3]["gap_mean"] == pytest.approx(1.5) and rows[3]["gap_max"] == pytest.approx(4.0)
    assert rows[0]["macs_low"] == 100 and rows[-1]["macs_high"] == 500


def brute_within_bin_tau(x, y, bins):
    concordant = discordant = untied_x = untied_y = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        if bins[i] != bins[j]:
            continue
        dx, dy = x[i] - x[j], y[i] - y[j]
        untied_x += dx != 0
        untied_y += dy != 0
        concordant += dx * dy > 0
        discordant += dx * dy < 0
    return (concordant - discordant) / math.sqrt(untied_x * untied_y)


@pytest.mark.parametrize("seed", range(10))
def test_within_bin_tau_counts_only_pairs_inside_a_bin(seed):
    rng = random.Random(seed)
    x, y = _random_scores(rng, rng.randint(9, 30))
    macs = [rng.randint(1, 5) * 100 for _ in x]
    bins = macs_terciles(macs)
    assert within_bin_tau(x, y, bins) == pytest.approx(brute_within_bin_tau(x, y, list(bins)), abs=1e-12)
    assert within_bin_tau(x, y, [0] * len(x)) == pytest.approx(kendall_tau_b(x, y), abs=1e-12)


def test_within_bin_tau_ignores_the_order_between_bins():
    # inside each bin y agrees with x; across bins it is reversed: tau (3 - 12) / 15, within-bin 1
    x = [1, 2, 3, 4, 5, 6]
    y = [5.1, 5.2, 3.1, 3.2, 1.1, 1.2]
    assert within_bin_tau(x, y, [0, 0, 1, 1, 2, 2]) == 1.0 and kendall_tau_b(x, y) == pytest.approx(-0.6)
    assert math.isnan(within_bin_tau(x, y, [0, 1, 2, 3, 4, 5]))     # no pair inside a bin


def test_macs_terciles_are_equal_count_bins_by_macs():
    macs = [500, 100, 300, 200, 900, 100, 700, 800, 400, 600]
    labels = macs_terciles(macs)
    assert sorted(collections.Counter(labels).values()) == [3, 3, 4]
    by_macs = [label for _, label in sorted(zip(macs, labels), key=lambda pair: pair[0])]
    assert by_macs == sorted(by_macs) and list(labels[[1, 5]]) == [0, 0] and labels[4] == 2


def test_bootstrap_interval_matches_scipy_percentile_bootstrap():
    from scipy import stats

    rng = random.Random(3)
    x = [rng.random() for _ in range(40)]
    y = [v + rng.gauss(0, 0.3) for v in x]
    low, high = bootstrap_interval(kendall_tau_b, [x, y], seed=0, resamples=4000)
    theirs = stats.bootstrap((x, y), lambda a, b: stats.kendalltau(a, b).statistic, paired=True, vectorized=False,
                             confidence_level=0.9, n_resamples=4000, method="percentile", random_state=1)
    assert low == pytest.approx(theirs.confidence_interval.low, abs=0.03)
    assert high == pytest.approx(theirs.confidence_interval.high, abs=0.03)
    assert low < kendall_tau_b(x, y) < high
    assert bootstrap_interval(kendall_tau_b, [x, y], seed=0, resamples=50) == \
        bootstrap_interval(kendall_tau_b, [x, y], seed=0, resamples=50)
    assert bootstrap_interval(kendall_tau_b, [x, x], seed=5, resamples=50) == (1.0, 1.0)
    assert bootstrap_interval(kendall_tau_b, [[1, 1], [1, 2]], seed=0, resamples=20) == (None, None)
