"""Gradient matching: how much the choices of one key disagree about the shared weights.

For one key, each of its choices gives a gradient of the loss with respect to the parameters
the choices share (the key's own operations left out). `distance_matrix` turns those
gradients into a symmetric matrix of disagreements; `best_partition` groups the choices so
that the disagreement inside the groups is least, and its cut (the disagreement between
groups) tells how much splitting the supernet on this key would help.

Metrics, for gradients g_i and g_j (lists of per-parameter tensors):
- `cos`: 1 - cos(g_i, g_j) of the flattened, concatenated gradients (in [0, 2]);
- `per_filter_cos`: the mean over every output filter of every weight of two or more
  dimensions of 1 - cos of that filter's gradients (biases and normalisation parameters are
  left out; in [0, 2]);
- `mse`: the mean squared difference of the flattened gradients.
"""
from __future__ import annotations

from typing import Iterator, Literal, Sequence

import torch

Metric = Literal["cos", "per_filter_cos", "mse"]
EPS = 1e-6   # in the cosine's denominator: a zero gradient is orthogonal to everything


def _cosine_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """1 - cos along the last dimension (row by row for matrices)."""
    cos = (a * b).sum(-1) / (a.norm(dim=-1) * b.norm(dim=-1) + EPS)
    return (1 - cos).clamp(0.0, 2.0)


def _pair_distance(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor], metric: Metric) -> torch.Tensor:
    if metric == "per_filter_cos":
        rows = [_cosine_distance(x.flatten(1).double(), y.flatten(1).double()) for x, y in zip(a, b) if x.dim() > 1]
        return torch.cat(rows).mean() if rows else torch.zeros((), dtype=torch.float64)
    flat_a = torch.cat([x.flatten() for x in a]).double()
    flat_b = torch.cat([x.flatten() for x in b]).double()
    if metric == "cos":
        return _cosine_distance(flat_a, flat_b)
    if metric == "mse":
        return (flat_a - flat_b).pow(2).mean()
    raise ValueError(f"unknown metric {metric!r}; choose cos, per_filter_cos or mse")


def distance_matrix(gradients: Sequence[Sequence[torch.Tensor]], metric: Metric = "cos") -> torch.Tensor:
    """Pairwise distances (float64 on the CPU, symmetric, zero diagonal) between the choices' gradients.

    Args:
        gradients: One list of per-parameter gradients per choice, the parameters in the same
            order for every choice.
        metric: `cos`, `per_filter_cos` or `mse` (see the module docstring).
    """
    n = len(gradients)
    matrix = torch.zeros(n, n, dtype=torch.float64)
    for i in range(n):
        for j in range(i + 1, n):
            matrix[i, j] = matrix[j, i] = float(_pair_distance(gradients[i], gradients[j], metric))
    return matrix


def partitions(n: int, groups: int) -> Iterator[tuple[tuple[int, ...], ...]]:
    """Every partition of `range(n)` into exactly `groups` non-empty groups, once each.

    Groups are ordered by their smallest element and each group's elements ascend.
    """
    def extend(i: int, blocks: list[list[int]]) -> Iterator[tuple[tuple[int, ...], ...]]:
        if n - i < groups - len(blocks):
            return
        if i == n:
            yield tuple(tuple(block) for block in blocks)
            return
        for block in blocks:
            block.append(i)
            yield from extend(i + 1, blocks)
            block.pop()
        if len(blocks) < groups:
            blocks.append([i])
            yield from extend(i + 1, blocks)
            blocks.pop()

    if not 1 <= groups <= n:
        return iter(())
    return extend(0, [])


def intra_distance(matrix: torch.Tensor, partition: Sequence[Sequence[int]]) -> float:
    """Sum of the distances between the members of each group (each pair once)."""
    return float(sum(matrix[i, j] for group in partition for a, i in enumerate(group) for j in group[a + 1:]))


def best_partition(matrix: torch.Tensor, groups: int = 2) -> tuple[tuple[tuple[int, ...], ...], float]:
    """The partition into `groups` groups with the least intra-group distance, and its cut.

    The cut is the total pairwise distance minus the intra-group distance. Ties go to the
    first partition in `partitions` order.
    """
    n = matrix.shape[0]
    if not 2 <= groups <= n:
        raise ValueError(f"cannot split {n} choices into {groups} groups")
    total = float(matrix.triu(1).sum())
    best = min(partitions(n, groups), key=lambda partition: intra_distance(matrix, partition))
    return best, total - intra_distance(matrix, best)
