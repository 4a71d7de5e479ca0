"""Prefix masks: a width-like choice as a (soft) mask over the units of its widest value.

Choice j of a width-like decision with sizes `s_0 < s_1 < ...` keeps the first `s_j` units of
`total` on: `prefix_masks(sizes, total)[j] = [1] * s_j + [0] * (total - s_j)`. The masks are
monotone (`m_j <= m_{j+1}`) and the widest is all ones when `s_last == total`. Given choice
weights `p` (a relaxed one-hot), `soft_prefix_mask(p, sizes, total) = sum_j p_j m_j` is what
multiplies the activations, so a loss differentiates w.r.t. `p`; for a one-hot `p` it is
exactly the hard mask of the chosen value. The same rule gates blocks by a depth choice
(block i runs with weight `sum_{d > i} p_d`).
"""
from __future__ import annotations

from typing import Sequence

import torch


def prefix_masks(sizes: Sequence[int], total: int) -> torch.Tensor:
    """`[len(sizes), total]`: row j has its first `sizes[j]` entries 1, the rest 0."""
    if any(s < 0 or s > total for s in sizes):
        raise ValueError(f"prefix sizes {list(sizes)} must lie in [0, {total}]")
    return (torch.arange(total)[None, :] < torch.tensor(list(sizes))[:, None]).float()


def soft_prefix_mask(weights: torch.Tensor, sizes: Sequence[int], total: int) -> torch.Tensor:
    """`sum_j weights[j] * prefix_masks(sizes, total)[j]`: a `[total]` mask, differentiable in `weights`."""
    return weights @ prefix_masks(sizes, total).to(weights.device, weights.dtype)
