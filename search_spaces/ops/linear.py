"""Elastic linear layer: in/out features by prefix slicing."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from search_spaces.ops.source import SharedTensor


def linear_macs(in_features: int, out_features: int, tokens: int = 1) -> int:
    """Multiply-accumulates of a linear layer applied to `tokens` vectors."""
    return tokens * in_features * out_features


class ElasticLinear(nn.Module):
    """`y = x W[:out, :in]^T + b[:out]` over the active feature prefixes."""

    def __init__(self, max_in: int, max_out: int, bias: bool = True):
        super().__init__()
        self.max_in, self.max_out = max_in, max_out
        bound = 1.0 / math.sqrt(max_in)
        self.weight = SharedTensor(torch.empty(max_out, max_in).uniform_(-bound, bound))
        self.bias = SharedTensor(torch.empty(max_out).uniform_(-bound, bound)) if bias else None
        self.configure(max_in, max_out)

    def configure(self, in_features: int, out_features: int) -> None:
        """Set the active shape."""
        if not (0 < in_features <= self.max_in and 0 < out_features <= self.max_out):
            raise ValueError(f"linear shape ({in_features}, {out_features}) outside "
                             f"({self.max_in}, {self.max_out})")
        self.in_features, self.out_features = in_features, out_features

    def active_weight(self) -> torch.Tensor:
        weight = self.weight.full()
        if (self.out_features, self.in_features) == (self.max_out, self.max_in):
            return weight
        return weight[: self.out_features, : self.in_features]

    def active_bias(self) -> torch.Tensor | None:
        if self.bias is None:
            return None
        bias = self.bias.full()
        return bias if self.out_features == self.max_out else bias[: self.out_features]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.active_weight(), self.active_bias())

    def macs(self, tokens: int = 1) -> int:
        """MACs of the active layer applied to `tokens` vectors."""
        return linear_macs(self.in_features, self.out_features, tokens)

    @torch.no_grad()
    def to_static(self) -> nn.Linear:
        """A plain `nn.Linear` holding a copy of the active weights."""
        linear = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None)
        linear.weight.copy_(self.active_weight())
        if linear.bias is not None:
            linear.bias.copy_(self.active_bias())
        return linear
