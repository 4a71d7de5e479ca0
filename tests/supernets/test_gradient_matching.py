"""Gradient-matching math against independent computations: distances, partitions, cuts."""
from __future__ import annotations

import itertools
import math

import pytest
import torch

from supernets.gradient_matching import best_partition, distance_matrix, intra_distance, partitions


def _gradients(n: int, seed: int = 0) -> list[list[torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    shapes = [(4, 3, 3, 3), (4,), (10, 4)]
    return [[torch.randn(shape, generator=generator) for shape in shapes] for _ in range(n)]


@pytest.mark.parametrize("metric", ["cos", "per_filter_cos", "mse"])
def test_matrix_is_symmetric_with_zero_diagonal(metric):
    matrix = distance_matrix(_gradients(5), metric)
    assert torch.equal(matrix, matrix.T) and torch.equal(matrix.diagonal(), torch.zeros(5, dtype=matrix.dtype))
    if metric != "mse":
        assert matrix.min() >= 0 and matrix.max() <= 2


def test_extreme_cosine_distances_are_0_and_2():
    g = _gradients(1)[0]
    matrix = distance_matrix([g, [2 * t for t in g], [-t for t in g]], "cos")
    assert matrix[0, 1] == pytest.approx(0, abs=1e-6) and matrix[0, 2] == pytest.approx(2, abs=1e-6)


def test_metrics_against_independent_formulas():
    a, b = _gradients(2)
    flat_a, flat_b = torch.cat([t.flatten() for t in a]).double(), torch.cat([t.flatten() for t in b]).double()
    cos = distance_matrix([a, b], "cos")[0, 1].item()
    assert cos == pytest.approx(1 - torch.nn.functional.cosine_similarity(flat_a, flat_b, 0).item(), abs=1e-6)
    assert distance_matrix([a, b], "mse")[0, 1].item() == pytest.approx(((flat_a - flat_b) ** 2).mean().item())
    rows = [1 - torch.nn.functional.cosine_similarity(x.flatten(1).double(), y.flatten(1).double(), 1)
            for x, y in zip(a, b) if x.dim() > 1]          # the (4,) bias-like gradient is left out
    expected = torch.cat(rows).mean().item()
    assert distance_matrix([a, b], "per_filter_cos")[0, 1].item() == pytest.approx(expected, abs=1e-6)


def test_identical_gradients_give_zero_distances_and_cut():
    g = _gradients(1)[0]
    matrix = distance_matrix([g, [t.clone() for t in g], [t.clone() for t in g], [t.clone() for t in g]])
    assert matrix.abs().max() < 1e-6
    _, cut = best_partition(matrix, 2)
    assert cut == pytest.approx(0, abs=1e-5)


@pytest.mark.parametrize("n, groups", [(2, 2), (3, 2), (4, 2), (5, 2), (5, 3), (6, 2)])
def test_partitions_are_the_set_partitions(n, groups):
    found = list(partitions(n, groups))
    signed = sum((-1) ** i * math.comb(groups, i) * (groups - i) ** n for i in range(groups + 1))
    stirling = signed // math.factorial(groups)     # Stirling number of the second kind
    assert len(found) == len(set(found)) == stirling
    for partition in found:
        assert sorted(i for group in partition for i in group) == list(range(n)) and len(partition) == groups


def _brute_force(matrix: torch.Tensor, groups: int) -> tuple[float, float]:
    """(least intra-group distance, its cut) over every labelling that uses all groups."""
    n = matrix.shape[0]
    total = sum(matrix[i, j].item() for i in range(n) for j in range(i + 1, n))
    best = min(sum(matrix[i, j].item() for i in range(n) for j in range(i + 1, n) if labels[i] == labels[j])
               for labels in itertools.product(range(groups), repeat=n) if len(set(labels)) == groups)
    return best, total - best


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("n, groups", [(3, 2), (5, 2), (5, 3)])
def test_best_partition_minimises_intra_group_distance(seed, n, groups):
    raw = torch.rand(n, n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 2
    matrix = (raw + raw.T) / 2
    matrix.fill_diagonal_(0)
    partition, cut = best_partition(matrix, groups)
    intra, expected_cut = _brute_force(matrix, groups)
    assert intra_distance(matrix, partition) == pytest.approx(intra)
    assert cut == pytest.approx(expected_cut)


def test_clear_clusters_are_found():
    # choices 0, 2 agree and 1, 3, 4 agree; the two clusters disagree
    close, far = 0.1, 1.5
    matrix = torch.full((5, 5), far, dtype=torch.float64)
    for group in ((0, 2), (1, 3, 4)):
        for i, j in itertools.permutations(group, 2):
            matrix[i, j] = close
    matrix.fill_diagonal_(0)
    partition, cut = best_partition(matrix, 2)
    assert partition == ((0, 2), (1, 3, 4)) and cut == pytest.approx(6 * far)
