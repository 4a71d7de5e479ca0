"""How well one ranking of architectures agrees with another (numpy only).

`x` and `y` are scores of the same archs in the same order (e.g. supernet and standalone test
top-1). Ties are kept, not broken: Kendall's tau-b corrects for them, Spearman's rho ranks tied
values by their average rank. Undefined statistics (fewer than two archs, or a ranking where
every score ties) are NaN; `finite_or_none` turns them into JSON nulls.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from nas.core.bins import MacsBins
from nas.core.ranks import average_ranks, kendall_tau_b, paired_scores as _as_pair

__all__ = ["average_ranks", "bin_gaps", "finite_or_none", "kendall_tau_b", "spearman_rho", "top_k", "top_k_overlap"]


def spearman_rho(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho: the Pearson correlation of the average ranks."""
    a, b = _as_pair(x, y)
    ra, rb = average_ranks(a) - (len(a) + 1) / 2, average_ranks(b) - (len(b) + 1) / 2
    denominator = math.sqrt(float((ra * ra).sum() * (rb * rb).sum()))
    if denominator == 0:
        return math.nan
    return float((ra * rb).sum() / denominator)


def top_k(values: Sequence[float], k: int) -> set[int]:
    """Indices of the `k` highest values; ties at the boundary go to the earlier index."""
    order = sorted(range(len(values)), key=lambda i: (-values[i], i))
    return set(order[:k])


def top_k_overlap(x: Sequence[float], y: Sequence[float], k: int) -> float:
    """Share of the `k` best archs by `x` that are also among the `k` best by `y`."""
    _as_pair(x, y)
    if not 1 <= k <= len(x):
        raise ValueError(f"k must be in [1, {len(x)}], got {k}")
    return len(top_k(list(x), k) & top_k(list(y), k)) / k


def bin_gaps(macs: Sequence[int], standalone: Sequence[float], supernet: Sequence[float],
             bins: int = 5) -> list[dict]:
    """Standalone minus supernet accuracy, in points, per equal-width MACs bin of the archs.

    Returns:
        One dict per bin, lowest MACs first: `{"macs_low", "macs_high", "archs",
        "gap_mean", "gap_max"}` (gaps None for an empty bin).
    """
    edges = MacsBins(min(macs), max(macs), bins)
    width = (edges.high - edges.low) / bins
    gaps: list[list[float]] = [[] for _ in range(bins)]
    for m, alone, shared in zip(macs, standalone, supernet):
        gaps[edges.index(m)].append(100.0 * (alone - shared))
    return [{"macs_low": edges.low + b * width, "macs_high": edges.low + (b + 1) * width, "archs": len(g),
             "gap_mean": float(np.mean(g)) if g else None, "gap_max": float(max(g)) if g else None}
            for b, g in enumerate(gaps)]


def finite_or_none(value: float) -> float | None:
    """`value`, or None when it is NaN or infinite (JSON has no NaN)."""
    return value if math.isfinite(value) else None


# -- agreement within MACs bins, and bootstrap intervals -------------------------------------------
def macs_terciles(macs: Sequence[float], bins: int = 3) -> np.ndarray:
    """The bin (0 = cheapest) of each arch among `bins` equal-count bins of the archs sorted
    by MACs (ties in MACs by position): what a search under a MACs budget must tell apart."""
    order = np.argsort(np.asarray(macs, dtype=float), kind="stable")
    labels = np.empty(len(order), dtype=int)
    for b, members in enumerate(np.array_split(order, bins)):
        labels[members] = b
    return labels


# Fewer pairs than this inside bins (tied in neither score) cannot tell a ranking from chance:
# even all concordant, 4 independent pairs are so 1 time in 16 by chance, more often than the 10%
# a 90% interval allows; a bootstrap over them gives a confident-looking [1, 1] regardless.
MIN_WITHIN_BIN_PAIRS = 5


def _within_bin_signs(x: Sequence[float], y: Sequence[float], bins: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """sign(x_i - x_j) and sign(y_i - y_j) over the pairs i < j of archs in one bin."""
    a, b = _as_pair(x, y)
    labels = np.asarray(bins)
    i, j = np.triu_indices(len(a), k=1)
    inside = labels[i] == labels[j]
    return np.sign(a[i] - a[j])[inside], np.sign(b[i] - b[j])[inside]


def within_bin_pairs(x: Sequence[float], y: Sequence[float], bins: Sequence[int]) -> int:
    """The pairs of archs in one bin that neither `x` nor `y` ties: what a within-bin tau rests on."""
    sx, sy = _within_bin_signs(x, y, bins)
    return int(np.count_nonzero(sx * sy))


def within_bin_tau(x: Sequence[float], y: Sequence[float], bins: Sequence[int]) -> float:
    """Kendall tau-b over only the pairs of archs in one bin: (concordant - discordant) /
    sqrt((n0 - tx) (n0 - ty)), with n0 the pairs inside bins and tx, ty those tied in x, y."""
    sx, sy = _within_bin_signs(x, y, bins)
    denominator = math.sqrt(float(np.count_nonzero(sx)) * float(np.count_nonzero(sy)))
    if denominator == 0:
        return math.nan
    return float((sx * sy).sum() / denominator)


def bootstrap_interval(statistic, columns: Sequence[Sequence[float]], seed: int, resamples: int = 1000,
                       level: float = 0.9) -> tuple[float | None, float | None]:
    """Percentile interval of `statistic(*columns)` over `resamples` resamplings of the archs
    (the rows of `columns`, drawn with replacement from a generator seeded with `seed`);
    resamples where the statistic is undefined are left out; (None, None) when all are."""
    data = [np.asarray(c) for c in columns]
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(resamples):
        rows = rng.integers(0, len(data[0]), len(data[0]))
        value = statistic(*(c[rows] for c in data))
        if math.isfinite(value):
            values.append(value)
    if not values:
        return None, None
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(values, [tail, 100 - tail])
    return float(low), float(high)
