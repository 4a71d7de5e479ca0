"""Channel sorting before a width is made elastic (Once-for-All's `re_organize_middle_weights`).

Elastic widths keep a prefix of the channels, so before a phase opens smaller widths the
channels are permuted most important first. A channel's importance is the L1 norm of the
weights that read it: the column of each consumer convolution along its input axis (OFA sums
`|point_linear.weight|` over output channels and the kernel). Everything indexed by the
channel (the producers' output rows, their batch norms' parameters and running statistics, the
consumers' input columns, a squeeze-excite's gate) moves with it, so the full network computes
the same function before and after (only floating-point summation order differs).

OFA's order, reproduced here:
- the expanded (middle) channels of each inverted residual, by the projection's (`conv_pwl`)
  columns; with `tier` > 0 (its second expand phase, E{6,4,3}) channels stay inside the tiers the
  previous phase trained (the first `widths[1]` channels remain the first ones, and so on), sorted
  within each, as OFA's penalty of 1e5 per tier does;
- inside the squeeze-excite of a block, its reduced channels by `conv_expand`'s columns.

`fashion_mnist_mbv3`'s elastic stage widths (which OFA's MobileNetV3 does not have) sort the
residual stream of a stage by the same measure over every convolution that reads it: the
expand convolutions of the stage's later blocks and of the next stage's first block, or the
head's feature-mix convolution. Stages joined by a shortcut at full width share one order.

These functions operate on the blocks from outside, reading their `conv_pw`, `bn1`, `conv_dw`,
`bn2`, `se`, `conv_pwl`, `bn3` attributes; every weight must be a plain `SharedTensor`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import nn

from search_spaces.ops.source import SharedTensor


def learned_tensor(op: nn.Module, attribute: str = "weight") -> torch.Tensor:
    """The learned full-size tensor of an elastic op's weight (or bias) source."""
    source = getattr(op, attribute)
    if isinstance(source, nn.Parameter):
        return source
    if not isinstance(source, SharedTensor):
        raise TypeError(f"channel sorting needs shared weights, {type(op).__name__}.{attribute} is "
                        f"{type(source).__name__}")
    return source.tensor


@torch.no_grad()
def permute_in_place(tensor: torch.Tensor, dim: int, order: torch.Tensor) -> None:
    """Reorder `tensor` along `dim` in place (the parameter object, and so the optimiser's
    reference to it, stays the same)."""
    tensor.copy_(tensor.index_select(dim, order.to(tensor.device)))


def _permute_bn(bn: nn.BatchNorm2d, order: torch.Tensor) -> None:
    for tensor in (bn.weight, bn.bias, bn.running_mean, bn.running_var):
        if tensor is not None:
            permute_in_place(tensor, 0, order)


def input_importance(*weights: torch.Tensor) -> torch.Tensor:
    """L1 norm per input channel (dim 1) of convolution weights, summed over the weights."""
    return sum(w.detach().abs().sum(dim=(0, 2, 3)) for w in weights)


def importance_order(importance: torch.Tensor, tier_starts: Sequence[int] = ()) -> torch.Tensor:
    """Channel indices most important first, without moving a channel out of its tier.

    `tier_starts` (increasing) split the channels into tiers `[0, s0)`, `[s0, s1)`, ...; the
    order lists tier by tier, each sorted by descending importance (OFA's 1e5 penalties).
    """
    by_importance = torch.argsort(importance, descending=True, stable=True)
    tier = torch.zeros_like(importance, dtype=torch.long)
    for start in tier_starts:
        tier[start:] += 1
    return by_importance[torch.argsort(tier[by_importance], stable=True)]


def sort_block_middle(block: nn.Module, widths: Sequence[int] = (), tier: int = 0) -> torch.Tensor:
    """Sort an inverted residual's expanded channels (and its SE's reduced channels) in place.

    `widths`: the expanded widths the phase opens, largest first (OFA's `target_width_list`);
    `tier`: OFA's `expand_ratio_stage` (0: one plain sort; k > 0: the channels keep the tiers
    of `widths[1:k + 1]`). Returns the order applied to the expanded channels.
    """
    pwl = learned_tensor(block.conv_pwl)
    order = importance_order(input_importance(pwl), sorted(widths[1:tier + 1]) if tier > 0 else ())
    permute_in_place(pwl, 1, order)
    permute_in_place(learned_tensor(block.conv_dw), 0, order)
    _permute_bn(block.bn2, order)
    if block.se is not None:
        expand, reduce = block.se.conv_expand, block.se.conv_reduce
        permute_in_place(learned_tensor(expand), 0, order)
        permute_in_place(learned_tensor(expand, "bias"), 0, order)
        permute_in_place(learned_tensor(reduce), 1, order)
        se_order = importance_order(input_importance(learned_tensor(expand)))
        permute_in_place(learned_tensor(expand), 1, se_order)
        permute_in_place(learned_tensor(reduce), 0, se_order)
        permute_in_place(learned_tensor(reduce, "bias"), 0, se_order)
    permute_in_place(learned_tensor(block.conv_pw), 0, order)
    _permute_bn(block.bn1, order)
    return order


def expanded_widths(block: nn.Module, expand_ratios: Sequence[float]) -> list[int]:
    """The expanded widths of `expand_ratios` at the block's widest input, largest first (as
    the block computes them)."""
    from search_spaces.ops.util import make_divisible

    max_in = block.conv_pw.max_in
    return sorted({make_divisible(max_in * e, 8) for e in expand_ratios}, reverse=True)


def sort_middle_channels(supernet: nn.Module, expand_ratios: dict[tuple[int, int], Sequence[float]],
                         tier: int) -> int:
    """`sort_block_middle` on every block of a MobileNetV3 supernet named in `expand_ratios`
    ((stage, block) -> the expand ratios the phase opens there); returns the blocks sorted."""
    for (i, j), ratios in expand_ratios.items():
        block = supernet.blocks[i][j]
        sort_block_middle(block, expanded_widths(block, ratios), tier)
    return len(expand_ratios)


@dataclass(frozen=True)
class Stream:
    """A residual stream: the stages whose outputs share channel indices (joined by shortcuts
    at full width), the ops writing it (convolution rows + batch norm) and the convolutions
    reading it (input columns)."""

    stages: tuple[int, ...]
    producers: tuple[tuple[nn.Module, nn.BatchNorm2d], ...]
    consumers: tuple[nn.Module, ...]


def _full_width_shortcut(block: nn.Module) -> bool:
    return block.stride == 1 and block.conv_pw.max_in == block.conv_pwl.max_out


def residual_streams(supernet: nn.Module) -> list[Stream]:
    """The residual streams of a MobileNetV3 supernet, stage by stage (the stem's output joins
    stage 0's stream when stage 0's first block keeps a shortcut at full width)."""
    stages = list(supernet.blocks[:-1])
    head = supernet.blocks[-1][0].conv
    groups: list[list[int]] = []
    for i, stage in enumerate(stages):
        if groups and _full_width_shortcut(stage[0]):
            groups[-1].append(i)
        else:
            groups.append([i])
    streams = []
    for group in groups:
        producers = [(block.conv_pwl, block.bn3) for i in group for block in stages[i]]
        consumers = [block.conv_pw for i in group for block in stages[i][1:]]
        if group[0] == 0 and _full_width_shortcut(stages[0][0]):
            producers.insert(0, (supernet.conv_stem, supernet.bn1))
            consumers.insert(0, stages[0][0].conv_pw)
        consumers += [b.conv_pw for i in group[1:] for b in stages[i][:1]]
        last = group[-1]
        consumers.append(stages[last + 1][0].conv_pw if last + 1 < len(stages) else head)
        streams.append(Stream(tuple(group), tuple(producers), tuple(consumers)))
    return streams


def sort_stream(stream: Stream) -> torch.Tensor:
    """Sort a residual stream's channels by the L1 norm of the columns reading them; returns the order."""
    order = importance_order(input_importance(*(learned_tensor(conv) for conv in stream.consumers)))
    for conv, bn in stream.producers:
        permute_in_place(learned_tensor(conv), 0, order)
        _permute_bn(bn, order)
    for conv in stream.consumers:
        permute_in_place(learned_tensor(conv), 1, order)
    return order


def sort_stage_widths(supernet: nn.Module, stages: Sequence[int]) -> list[tuple[int, ...]]:
    """Sort the residual streams holding any of `stages` (the stages whose width the phase
    opens); returns the stages of each stream sorted."""
    sorted_streams = []
    for stream in residual_streams(supernet):
        if set(stream.stages) & set(stages):
            sort_stream(stream)
            sorted_streams.append(stream.stages)
    return sorted_streams
