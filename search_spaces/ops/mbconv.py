"""MobileNetV3 building blocks: the elastic inverted residual and its static counterparts.

Static blocks use timm's parameter names (`conv_pw`, `bn1`, `conv_dw`, `bn2`, `se`,
`conv_pwl`, `bn3`; `conv_dw`, `bn1`, `se`, `conv_pw`, `bn2` for a depthwise-separable block;
`conv`, `bn1` for conv-BN-act), so an export's state dict loads into timm's `MobileNetV3` with
`strict=True`. An inverted residual at expand ratio 1 has no expansion conv: it exports as
timm's depthwise-separable (`ds`) block.
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


class DepthwiseSeparable(nn.Module):
    """Static MobileNetV3 block without expansion: depthwise kxk, optional SE, 1x1 project
    (timm's `DepthwiseSeparableConv`, whose names it keeps)."""

    def __init__(self, conv_dw: nn.Conv2d, bn1: nn.BatchNorm2d, se: nn.Module, conv_pw: nn.Conv2d,
                 bn2: nn.BatchNorm2d, activation: str, has_skip: bool):
        super().__init__()
        self.conv_dw, self.bn1, self.act1 = conv_dw, bn1, make_activation(activation)
        self.se, self.conv_pw, self.bn2 = se, conv_pw, bn2
        self.has_skip = has_skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.se(self.act1(self.bn1(self.conv_dw(x))))
        out = self.bn2(self.conv_pw(out))
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
    at expand ratio 1 the block has no expansion conv (the depthwise conv reads the input), and
    a block whose largest ratio is 1 owns none (`conv_pw`, `bn1` are None). The residual is used
    when stride is 1 and the active in and out widths are equal. `kernel_sizes` and
    `kernel_transform` configure the depthwise conv (see `ElasticDepthwiseConv2d`).
    """

    def __init__(self, max_in: int, max_out: int, max_expand: float, max_kernel: int, stride: int,
                 use_se: bool, activation: str, kernel_sizes: tuple[int, ...] | None = None,
                 kernel_transform: bool = False):
        super().__init__()
        max_mid = expanded_width(max_in, max_expand)
        self.stride, self.activation = stride, activation
        expands = max_expand != 1
        self.conv_pw = ElasticConv2d(max_in, max_mid, 1) if expands else None
        self.bn1 = ElasticBatchNorm2d(max_mid) if expands else None
        self.act1 = make_activation(activation)
        self.conv_dw = ElasticDepthwiseConv2d(max_mid, max_kernel, stride, kernel_sizes, kernel_transform)
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
        self.expands = expand_ratio != 1
        if self.expands and self.conv_pw is None:
            raise ValueError(f"expand ratio {expand_ratio:g} on a block built without an expansion conv")
        mid = expanded_width(in_channels, expand_ratio)
        if self.expands:
            self.conv_pw.configure(in_channels, mid)
        self.conv_dw.configure(mid, kernel_size)
        if self.se is not None:
            self.se.configure(mid)
        self.conv_pwl.configure(mid, out_channels)
        self.has_skip = self.stride == 1 and in_channels == out_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.act1(self.bn1(self.conv_pw(x))) if self.expands else x
        out = self.act2(self.bn2(self.conv_dw(out)))
        if self.mid_mask is not None:
            out = out * self.mid_mask.view(1, -1, 1, 1)
        if self.se is not None:
            out = self.se(out)
        out = self.bn3(self.conv_pwl(out))
        return out + x if self.has_skip else out

    def to_static(self) -> InvertedResidual | DepthwiseSeparable:
        """A static block with copies of the active weights and statistics: an
        `InvertedResidual`, or a `DepthwiseSeparable` at expand ratio 1."""
        mid, out = self.conv_dw.channels, self.conv_pwl.out_channels
        se = self.se.to_static() if self.se is not None else nn.Identity()
        if not self.expands:
            return DepthwiseSeparable(self.conv_dw.to_static(), self.bn2.to_static(mid), se,
                                      self.conv_pwl.to_static(), self.bn3.to_static(out), self.activation,
                                      self.has_skip)
        return InvertedResidual(
            self.conv_pw.to_static(), self.bn1.to_static(mid), self.conv_dw.to_static(),
            self.bn2.to_static(mid), se, self.conv_pwl.to_static(), self.bn3.to_static(out),
            self.activation, self.has_skip)


def expanded_width(in_channels: int, expand_ratio: float) -> int:
    """The expanded width of an inverted residual: the input's at ratio 1, else rounded to 8."""
    return in_channels if expand_ratio == 1 else make_divisible(in_channels * expand_ratio, 8)
