"""AttentiveNAS/AlphaNet building blocks: swish, the projection shortcut, and their MBConv block.

Their block differs from MobileNetV3's (`mbconv.py`) in three ways: the activation may be
swish (`x * sigmoid(x)`); every block has a shortcut, an identity where the stride is 1 and
the width unchanged, otherwise a 2x2 average pool (stride 2) then a 1x1 projection without
batch norm or bias where the channels differ; and a stage whose only expand ratio is 1 has no
expansion conv (the depthwise conv reads the block's input).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from search_spaces.ops.conv import ElasticConv2d, ElasticDepthwiseConv2d
from search_spaces.ops.norm import ElasticBatchNorm2d
from search_spaces.ops.se import ElasticSqueezeExcite
from search_spaces.ops.util import make_divisible

ACTIVATIONS = {"relu": nn.ReLU, "hswish": nn.Hardswish, "swish": nn.SiLU}


def make_activation(name: str) -> nn.Module:
    """`relu`, `hswish` or `swish` (x * sigmoid(x)) as a module."""
    return ACTIVATIONS[name](inplace=True)


def expanded_channels(in_channels: int, expand_ratio: float) -> int:
    """Width of the expanded (depthwise) part of a block: `in * ratio`, rounded, then to a multiple of 8."""
    return make_divisible(round(in_channels * expand_ratio), 8)


def pool_shortcut(x: torch.Tensor, stride: int) -> torch.Tensor:
    """The shortcut's 2x2 average pool (stride 2); an odd side is padded by 1, padding counted
    in the mean, so the output has the side of the block's stride-2 depthwise conv."""
    if stride == 1:
        return x
    return F.avg_pool2d(x, stride, padding=x.shape[-1] % 2)


class ConvNormAct(nn.Module):
    """Static conv, batch norm, activation."""

    def __init__(self, conv: nn.Conv2d, bn: nn.BatchNorm2d, activation: str):
        super().__init__()
        self.conv, self.bn, self.act = conv, bn, make_activation(activation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(x)))


class ElasticConvNormAct(nn.Module):
    """Conv, batch norm, activation with elastic in/out channels (fixed kernel)."""

    def __init__(self, max_in: int, max_out: int, kernel_size: int, stride: int, activation: str):
        super().__init__()
        self.conv = ElasticConv2d(max_in, max_out, kernel_size, stride)
        self.bn = ElasticBatchNorm2d(max_out)
        self.act = make_activation(activation)
        self.activation = activation

    def configure(self, in_channels: int, out_channels: int) -> None:
        """Set the active widths."""
        self.conv.configure(in_channels, out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(x)))

    def to_static(self) -> ConvNormAct:
        return ConvNormAct(self.conv.to_static(), self.bn.to_static(self.conv.out_channels), self.activation)


class Shortcut(nn.Module):
    """Static shortcut: average pool where the stride is 2, 1x1 projection where widths differ."""

    def __init__(self, stride: int, projection: nn.Conv2d | None):
        super().__init__()
        self.stride, self.projection = stride, projection

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = pool_shortcut(x, self.stride)
        return x if self.projection is None else self.projection(x)


class AttentiveBlock(nn.Module):
    """Static block: [1x1 expand, BN, act], depthwise kxk, BN, act, [SE], 1x1 project, BN; plus the shortcut."""

    def __init__(self, expand: ConvNormAct | None, conv_dw: nn.Conv2d, bn_dw: nn.BatchNorm2d, activation: str,
                 se: nn.Module, conv_pwl: nn.Conv2d, bn_pwl: nn.BatchNorm2d, shortcut: Shortcut):
        super().__init__()
        self.expand = expand if expand is not None else nn.Identity()
        self.conv_dw, self.bn_dw, self.act_dw = conv_dw, bn_dw, make_activation(activation)
        self.se, self.conv_pwl, self.bn_pwl = se, conv_pwl, bn_pwl
        self.shortcut = shortcut

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.se(self.act_dw(self.bn_dw(self.conv_dw(self.expand(x)))))
        return self.bn_pwl(self.conv_pwl(out)) + self.shortcut(x)


class ElasticAttentiveBlock(nn.Module):
    """`AttentiveBlock` with elastic in/out width, expand ratio and kernel size.

    `expands=False` builds no expansion conv (a stage whose only expand ratio is 1). The 1x1
    projection exists where some arch changes the block's width (`has_projection`); it runs
    only when the active in and out widths differ.
    """

    def __init__(self, max_in: int, max_out: int, max_expand: float, max_kernel: int, stride: int,
                 use_se: bool, activation: str, expands: bool, has_projection: bool):
        super().__init__()
        max_mid = round(max_in * max_expand)
        self.stride, self.activation = stride, activation
        self.expand = ElasticConvNormAct(max_in, max_mid, 1, 1, activation) if expands else None
        self.conv_dw = ElasticDepthwiseConv2d(max_mid, max_kernel, stride)
        self.bn_dw = ElasticBatchNorm2d(max_mid)
        self.act_dw = make_activation(activation)
        self.se = ElasticSqueezeExcite(max_mid) if use_se else None
        self.conv_pwl = ElasticConv2d(max_mid, max_out, 1)
        self.bn_pwl = ElasticBatchNorm2d(max_out)
        self.projection = ElasticConv2d(max_in, max_out, 1) if has_projection else None
        self.configure(max_in, max_out, max_expand if expands else 1, max_kernel)

    def configure(self, in_channels: int, out_channels: int, expand_ratio: float, kernel_size: int) -> None:
        """Set the active widths, expand ratio and kernel size."""
        mid = expanded_channels(in_channels, expand_ratio) if self.expand is not None else in_channels
        if self.expand is not None:
            self.expand.configure(in_channels, mid)
        self.conv_dw.configure(mid, kernel_size)
        if self.se is not None:
            self.se.configure(mid)
        self.conv_pwl.configure(mid, out_channels)
        self.uses_projection = in_channels != out_channels
        if self.uses_projection:
            if self.projection is None:
                raise ValueError(f"block of width {out_channels} has no projection from width {in_channels}")
            self.projection.configure(in_channels, out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.expand(x) if self.expand is not None else x
        out = self.act_dw(self.bn_dw(self.conv_dw(out)))
        if self.se is not None:
            out = self.se(out)
        out = self.bn_pwl(self.conv_pwl(out))
        shortcut = pool_shortcut(x, self.stride)
        return out + (self.projection(shortcut) if self.uses_projection else shortcut)

    def to_static(self) -> AttentiveBlock:
        """A static `AttentiveBlock` with copies of the active weights and statistics."""
        mid, out = self.conv_dw.channels, self.conv_pwl.out_channels
        return AttentiveBlock(
            self.expand.to_static() if self.expand is not None else None, self.conv_dw.to_static(),
            self.bn_dw.to_static(mid), self.activation,
            self.se.to_static() if self.se is not None else nn.Identity(), self.conv_pwl.to_static(),
            self.bn_pwl.to_static(out), Shortcut(self.stride, self.projection.to_static() if self.uses_projection else None))
