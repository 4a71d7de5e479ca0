"""Rank math shared by fidelity reports and estimators (numpy only): average ranks, Kendall's tau-b.

Ties are kept, not broken: tau-b corrects for them, average ranks give tied values the mean
of their ranks. An undefined tau (fewer than two archs, or every score tied) is NaN.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np


def paired_scores(x: Sequence[float], y: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """`x` and `y` as float arrays; two lists of different lengths are a `ValueError`."""
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"expected two equally long lists of scores, got shapes {a.shape} and {b.shape}")
    return a, b


def _pair_signs(values: np.ndarray) -> np.ndarray:
    """sign(v_i - v_j) for every pair i < j, flattened; equal infinities (e.g. two log-scores of
    archs without a path) tie instead of giving NaN."""
    i, j = np.triu_indices(len(values), k=1)
    return (values[i] > values[j]).astype(float) - (values[i] < values[j])


def _tied_pairs(values: np.ndarray) -> int:
    """Pairs with equal values: sum over tie groups of t (t - 1) / 2."""
    _, counts = np.unique(values, return_counts=True)
    return int((counts * (counts - 1) // 2).sum())


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's tau-b: (concordant - discordant) / sqrt((n0 - tx) (n0 - ty)).

    n0 = n (n - 1) / 2 pairs; tx and ty count the pairs tied in `x` and in `y`.
    """
    a, b = paired_scores(x, y)
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
