"""Elastic convolutions: output/input channels by prefix slicing, kernel size by centre crop
(or, for depthwise convs, by Once-for-All's learned kernel transformation)."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from search_spaces.ops.source import SharedTensor
from search_spaces.ops.util import conv_output_size


def conv_macs(in_channels: int, out_channels: int, kernel_size: int, out_hw: tuple[int, int],
              groups: int = 1) -> int:
    """Multiply-accumulates of a 2-D convolution (bias excluded, as FlopCounterMode counts)."""
    return out_hw[0] * out_hw[1] * out_channels * (in_channels // groups) * kernel_size * kernel_size


def conv_params(in_channels: int, out_channels: int, kernel_size: int, groups: int = 1,
                bias: bool = False) -> int:
    """Parameter count of a 2-D convolution."""
    return out_channels * (in_channels // groups) * kernel_size ** 2 + (out_channels if bias else 0)


def _centre_crop(weight: torch.Tensor, kernel_size: int) -> torch.Tensor:
    start = (weight.shape[-1] - kernel_size) // 2
    return weight[..., start:start + kernel_size, start:start + kernel_size]


def _fan_out_normal(shape: tuple[int, ...], groups: int = 1) -> torch.Tensor:
    fan_out = shape[0] * shape[2] * shape[3] // groups
    return torch.randn(shape) * math.sqrt(2.0 / fan_out)


class ElasticConv2d(nn.Module):
    """Dense convolution with elastic in/out channels (prefix) and kernel size (centre crop).

    By default padding is `kernel_size // 2` (odd kernels only), so every kernel size keeps
    the same output size; a fixed `padding` (e.g. 0 for a patch embedding with kernel =
    stride = patch) allows any kernel size.
    """

    def __init__(self, max_in: int, max_out: int, max_kernel: int = 1, stride: int = 1,
                 bias: bool = False, padding: int | None = None):
        super().__init__()
        self.max_in, self.max_out, self.max_kernel, self.stride = max_in, max_out, max_kernel, stride
        self.fixed_padding = padding
        self.weight = SharedTensor(_fan_out_normal((max_out, max_in, max_kernel, max_kernel)))
        self.bias = SharedTensor(torch.zeros(max_out)) if bias else None
        self.configure(max_in, max_out, max_kernel)

    def configure(self, in_channels: int, out_channels: int, kernel_size: int | None = None) -> None:
        """Set the active shape."""
        kernel_size = kernel_size if kernel_size is not None else self.max_kernel
        if not (0 < in_channels <= self.max_in and 0 < out_channels <= self.max_out
                and 0 < kernel_size <= self.max_kernel
                and (kernel_size % 2 == 1 or self.fixed_padding is not None)):
            raise ValueError(f"conv shape ({in_channels}, {out_channels}, k{kernel_size}) outside "
                             f"({self.max_in}, {self.max_out}, k{self.max_kernel})")
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, kernel_size

    def active_weight(self) -> torch.Tensor:
        weight = self.weight.full()
        if (self.out_channels, self.in_channels) != (self.max_out, self.max_in):
            weight = weight[: self.out_channels, : self.in_channels]
        if self.kernel_size != self.max_kernel:
            weight = _centre_crop(weight, self.kernel_size)
        return weight

    def active_bias(self) -> torch.Tensor | None:
        if self.bias is None:
            return None
        bias = self.bias.full()
        return bias if self.out_channels == self.max_out else bias[: self.out_channels]

    @property
    def padding(self) -> int:
        """Padding of the active convolution."""
        return self.fixed_padding if self.fixed_padding is not None else self.kernel_size // 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, self.active_weight(), self.active_bias(), self.stride, self.padding)

    def output_size(self, size: int) -> int:
        """Spatial output size of the active convolution on an input side of `size`."""
        return (size + 2 * self.padding - self.kernel_size) // self.stride + 1

    def macs(self, in_hw: tuple[int, int]) -> int:
        """MACs of the active convolution on an input of spatial size `in_hw`."""
        out_hw = tuple(self.output_size(s) for s in in_hw)
        return conv_macs(self.in_channels, self.out_channels, self.kernel_size, out_hw)

    @torch.no_grad()
    def to_static(self) -> nn.Conv2d:
        """A plain `nn.Conv2d` holding a copy of the active weights."""
        conv = nn.Conv2d(self.in_channels, self.out_channels, self.kernel_size, self.stride,
                         self.padding, bias=self.bias is not None)
        conv.weight.copy_(self.active_weight())
        if conv.bias is not None:
            conv.bias.copy_(self.active_bias())
        return conv


class ElasticDepthwiseConv2d(nn.Module):
    """Depthwise convolution with elastic channels (prefix) and kernel size.

    A smaller kernel is the centre crop of the largest one. With `kernel_transform`
    (Once-for-All's kernel transformation) it is a learned map of it instead: each step down
    the sorted `kernel_sizes` (7 -> 5 -> 3) takes the centre crop of the previous kernel and
    multiplies every channel's flattened k*k taps by a k^2 x k^2 matrix (`transforms["7to5"]`,
    `transforms["5to3"]`), identity at initialisation, trained and shared by every subnet; the
    active kernel is then restricted to `kernel_sizes`. `to_static` bakes the map in.
    """

    def __init__(self, max_channels: int, max_kernel: int, stride: int = 1,
                 kernel_sizes: tuple[int, ...] | None = None, kernel_transform: bool = False):
        super().__init__()
        self.max_channels, self.max_kernel, self.stride = max_channels, max_kernel, stride
        self.kernel_sizes = tuple(sorted(set(kernel_sizes or (max_kernel,))))
        if self.kernel_sizes[-1] != max_kernel:
            raise ValueError(f"kernel sizes {list(self.kernel_sizes)} must end at the largest kernel {max_kernel}")
        shape = (max_channels, 1, max_kernel, max_kernel)
        self.weight = SharedTensor(_fan_out_normal(shape, groups=max_channels))
        self.transforms = nn.ParameterDict({
            f"{big}to{small}": nn.Parameter(torch.eye(small * small))
            for small, big in zip(self.kernel_sizes, self.kernel_sizes[1:])}) if kernel_transform else None
        self.configure(max_channels, max_kernel)

    def configure(self, channels: int, kernel_size: int) -> None:
        """Set the active shape."""
        if not (0 < channels <= self.max_channels and 0 < kernel_size <= self.max_kernel
                and kernel_size % 2 == 1
                and (self.transforms is None or kernel_size in self.kernel_sizes)):
            raise ValueError(f"depthwise shape ({channels}, k{kernel_size}) outside "
                             f"({self.max_channels}, k{self.max_kernel})")
        self.channels, self.kernel_size = channels, kernel_size

    def active_weight(self) -> torch.Tensor:
        weight = self.weight.full()
        if self.channels != self.max_channels:
            weight = weight[: self.channels]
        if self.kernel_size == self.max_kernel:
            return weight
        if self.transforms is None:
            return _centre_crop(weight, self.kernel_size)
        for big, small in zip(self.kernel_sizes[::-1], self.kernel_sizes[-2::-1]):
            if small < self.kernel_size:
                break
            taps = _centre_crop(weight, small).reshape(self.channels, small * small)
            weight = F.linear(taps, self.transforms[f"{big}to{small}"]).view(self.channels, 1, small, small)
        return weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, self.active_weight(), None, self.stride, self.kernel_size // 2,
                        groups=self.channels)

    def macs(self, in_hw: tuple[int, int]) -> int:
        """MACs of the active depthwise convolution on an input of spatial size `in_hw`."""
        out_hw = tuple(conv_output_size(s, self.kernel_size, self.stride) for s in in_hw)
        return conv_macs(self.channels, self.channels, self.kernel_size, out_hw, groups=self.channels)

    @torch.no_grad()
    def to_static(self) -> nn.Conv2d:
        """A plain depthwise `nn.Conv2d` holding a copy of the active weights."""
        conv = nn.Conv2d(self.channels, self.channels, self.kernel_size, self.stride,
                         self.kernel_size // 2, groups=self.channels, bias=False)
        conv.weight.copy_(self.active_weight())
        return conv
