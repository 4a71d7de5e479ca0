"""Squeeze-and-excite as MobileNetV3 uses it (ReLU inside, hard-sigmoid gate), elastic and static.

The reduced width follows the active channels: `make_divisible(ratio * channels, 8)`, which is
how timm sizes it when `se_from_exp` is set.
"""
from __future__ import annotations

import torch
from torch import nn

from search_spaces.ops.conv import ElasticConv2d
from search_spaces.ops.util import make_divisible


def se_reduced_channels(channels: int, ratio: float = 0.25) -> int:
    """Width of the squeeze layer for `channels` input channels."""
    return make_divisible(channels * ratio, 8)


class SqueezeExcite(nn.Module):
    """Static SE block with timm's parameter names (`conv_reduce`, `conv_expand`)."""

    def __init__(self, channels: int, reduced: int):
        super().__init__()
        self.conv_reduce = nn.Conv2d(channels, reduced, 1, bias=True)
        self.act1 = nn.ReLU(inplace=True)
        self.conv_expand = nn.Conv2d(reduced, channels, 1, bias=True)
        self.gate = nn.Hardsigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.conv_expand(self.act1(self.conv_reduce(x.mean((2, 3), keepdim=True))))
        return x * self.gate(scale)


class ElasticSqueezeExcite(nn.Module):
    """SE block whose channels (and hence reduced width) follow the active expansion."""

    def __init__(self, max_channels: int, ratio: float = 0.25):
        super().__init__()
        self.ratio = ratio
        max_reduced = se_reduced_channels(max_channels, ratio)
        self.conv_reduce = ElasticConv2d(max_channels, max_reduced, 1, bias=True)
        self.act1 = nn.ReLU(inplace=True)
        self.conv_expand = ElasticConv2d(max_reduced, max_channels, 1, bias=True)
        self.gate = nn.Hardsigmoid()
        self.configure(max_channels)

    def configure(self, channels: int) -> None:
        """Set the active channels."""
        self.channels = channels
        self.reduced = se_reduced_channels(channels, self.ratio)
        self.conv_reduce.configure(channels, self.reduced)
        self.conv_expand.configure(self.reduced, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.conv_expand(self.act1(self.conv_reduce(x.mean((2, 3), keepdim=True))))
        return x * self.gate(scale)

    def macs(self) -> int:
        """MACs of the two 1x1 convolutions on the pooled 1x1 map."""
        return 2 * self.channels * self.reduced

    def to_static(self) -> SqueezeExcite:
        """A static `SqueezeExcite` holding a copy of the active weights."""
        se = SqueezeExcite(self.channels, self.reduced)
        se.conv_reduce = self.conv_reduce.to_static()
        se.conv_expand = self.conv_expand.to_static()
        return se
