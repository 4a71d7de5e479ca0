"""MobileNetV3 building blocks: the elastic inverted residual and its static counterparts.

Static blocks use timm's parameter names (`conv_pw`, `bn1`, `conv_dw`, `bn2`, `se`,
`conv_pwl`, `bn3`; `conv`, `bn1` for conv-BN-act), so an export's state dict loads into timm's
`MobileNetV3` with `strict=True`.
"""
from __future__ import annotations

import torch
from torch import nn

from search_spaces.ops.conv import ElasticConv2d, ElasticDepthwiseConv2d
from search_spaces.ops.norm import ElasticBatchNorm2d
from search_spaces.ops.se import ElasticSqueezeExcite
from search_spaces.ops.util import make_divisible

ACTIVATIONS = {"relu": nn.ReLU, "hswish": nn.Hardswish}


def make_activation(name: str) -> nn.Module:
    """`relu` or `hswish` as a module."""
    return ACTIVATIONS[name](inplace=True)


class InvertedResidual(nn.Module):
    """Static MobileNetV3 block: 1x1 expand, depthwise kxk, optional SE, 1x1 project."""

    def __init__(self, conv_pw: nn.Conv2d, bn1: nn.BatchNorm2d, conv_dw: nn.Conv2d,
                 bn2: nn.BatchNorm2d, se: nn.Module, conv_pwl: nn.Conv2d, bn3: nn.BatchNorm2d,
                 activation: str, has_skip: bool):
        super().__init__()
        self.conv_pw, self.bn1, self.act1 = conv_pw, bn1, make_activation(activation)
        self.conv_dw, self.bn2, self.act2 = conv_dw, bn2, make_activation(activation)
        self.se, self.conv_pwl, self.bn3 = se, conv_pwl, bn3
        self.has_skip = has_skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.act1(self.bn1(self.conv_pw(x)))
        out = self.se(self.act2(self.bn2(self.conv_dw(out))))
        out = self.bn3(self.conv_pwl(out))
        return out + x if self.has_skip else out


class ConvBnAct(nn.Module):
    """Static conv, batch norm, activation."""

    def __init__(self, conv: nn.Conv2d, bn1: nn.BatchNorm2d, activation: str):
        super().__init__()
        self.conv, self.bn1, self.act = conv, bn1, make_activation(activation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn1(self.conv(x)))


class ElasticConvBnAct(nn.Module):
    """Conv-BN-activation with elastic channels and kernel size."""

    def __init__(self, max_in: int, max_out: int, max_kernel: int, stride: int, activation: str):
        super().__init__()
        self.conv = ElasticConv2d(max_in, max_out, max_kernel, stride)
        self.bn1 = ElasticBatchNorm2d(max_out)
        self.act = make_activation(activation)
        self.activation = activation

    def configure(self, in_channels: int, out_channels: int, kernel_size: int | None = None) -> None:
        """Set the active shape."""
        self.conv.configure(in_channels, out_channels, kernel_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn1(self.conv(x)))

    def to_static(self) -> ConvBnAct:
        return ConvBnAct(self.conv.to_static(), self.bn1.to_static(self.conv.out_channels), self.activation)


class ElasticInvertedResidual(nn.Module):
    """Inverted residual with elastic in/out width, expand ratio and kernel size.

    The expanded width is `make_divisible(in_channels * expand_ratio, 8)`, as timm computes it;
    the residual is used when stride is 1 and the active in and out widths are equal.
    """

    def __init__(self, max_in: int, max_out: int, max_expand: float, max_kernel: int, stride: int,
                 use_se: bool, activation: str):
        super().__init__()
        max_mid = make_divisible(max_in * max_expand, 8)
        self.stride, self.activation = stride, activation
        self.conv_pw = ElasticConv2d(max_in, max_mid, 1)
        self.bn1 = ElasticBatchNorm2d(max_mid)
        self.act1 = make_activation(activation)
        self.conv_dw = ElasticDepthwiseConv2d(max_mid, max_kernel, stride)
        self.bn2 = ElasticBatchNorm2d(max_mid)
        self.act2 = make_activation(activation)
        self.se = ElasticSqueezeExcite(max_mid) if use_se else None
        self.conv_pwl = ElasticConv2d(max_mid, max_out, 1)
        self.bn3 = ElasticBatchNorm2d(max_out)
        self.mid_mask: torch.Tensor | None = None   # soft expanded-width mask (None: the plain path)
        self.configure(max_in, max_out, max_expand, max_kernel)

    def configure(self, in_channels: int, out_channels: int, expand_ratio: float, kernel_size: int) -> None:
        """Set the active widths, expand ratio and kernel size (and drop any soft mask)."""
        self.mid_mask = None
        mid = make_divisible(in_channels * expand_ratio, 8)
        self.conv_pw.configure(in_channels, mid)
        self.conv_dw.configure(mid, kernel_size)
        if self.se is not None:
            self.se.configure(mid)
        self.conv_pwl.configure(mid, out_channels)
        self.has_skip = self.stride == 1 and in_channels == out_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.act1(self.bn1(self.conv_pw(x)))
        out = self.act2(self.bn2(self.conv_dw(out)))
        if self.mid_mask is not None:
            out = out * self.mid_mask.view(1, -1, 1, 1)
        if self.se is not None:
            out = self.se(out)
        out = self.bn3(self.conv_pwl(out))
        return out + x if self.has_skip else out

    def to_static(self) -> InvertedResidual:
        """A static `InvertedResidual` with copies of the active weights and statistics."""
        mid, out = self.conv_pw.out_channels, self.conv_pwl.out_channels
        return InvertedResidual(
            self.conv_pw.to_static(), self.bn1.to_static(mid), self.conv_dw.to_static(),
            self.bn2.to_static(mid), self.se.to_static() if self.se is not None else nn.Identity(),
            self.conv_pwl.to_static(), self.bn3.to_static(out), self.activation, self.has_skip)
