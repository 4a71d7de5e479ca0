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


def _pair_signs(values: np.ndarray) -> np.ndarray:
    """sign(v_i - v_j) for every pair i < j, flattened."""
    i, j = np.triu_indices(len(values), k=1)
    return np.sign(values[i] - values[j])


def _tied_pairs(values: np.ndarray) -> int:
    """Pairs with equal values: sum over tie groups of t (t - 1) / 2."""
    _, counts = np.unique(values, return_counts=True)
    return int((counts * (counts - 1) // 2).sum())


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's tau-b: (concordant - discordant) / sqrt((n0 - tx) (n0 - ty)).

    n0 = n (n - 1) / 2 pairs; tx and ty count the pairs tied in `x` and in `y`.
    """
    a, b = _as_pair(x, y)
    pairs = len(a) * (len(a) - 1) // 2
    denominator = math.sqrt((pairs - _tied_pairs(a)) * (pairs - _tied_pairs(b)))
    if denominator == 0:
        return math.nan
    return float((_pair_signs(a) * _pair_signs(b)).sum() / denominator)


def average_ranks(values: Sequence[float]) -> np.ndarray:
    """Ranks 1..n of `values` (ascending); tied values share the mean of their ranks."""
    v = np.asarray(values, dtype=float)
    order = np.argsort(v, kind="stable")
    ranks = np.empty(len(v))
    ranks[order] = np.arange(1, len(v) + 1)
    _, inverse = np.unique(v, return_inverse=True)
    sums = np.bincount(inverse, weights=ranks)
    counts = np.bincount(inverse)
    return sums[inverse] / counts[inverse]


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


def _as_pair(x: Sequence[float], y: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"expected two equally long lists of scores, got shapes {a.shape} and {b.shape}")
    return a, b
