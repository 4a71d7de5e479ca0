"""Multi-head self-attention with elastic embedding width and number of heads (fixed head width).

The fused projection `qkv` is laid out as timm lays it out: rows are `[q; k; v]`, each
`heads x head_dim` head-major, so `qkv(x).reshape(B, N, 3, heads, head_dim)` splits it. The
full weight is `(3, max_heads, head_dim, max_dim)`; an active shape takes the first `heads`
heads of each of q, k and v and the first `dim` input features, which is exactly the weight of
timm's `Attention(dim, heads)` when `heads x head_dim = dim`.

Attention is computed with explicit matmuls in the supernet and in the export, never with
the fused `scaled_dot_product_attention`, so `FlopCounterMode` counts QK^T and AV.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from search_spaces.ops.linear import ElasticLinear, linear_macs
from search_spaces.ops.source import SharedTensor


def attention_macs(tokens: int, heads: int, head_dim: int) -> int:
    """MACs of the two attention matmuls, QK^T and AV, for one sequence."""
    return 2 * heads * tokens * tokens * head_dim


def multi_head_attention(qkv: torch.Tensor, heads: int, head_dim: int) -> torch.Tensor:
    """softmax(QK^T / sqrt(head_dim)) V of every head, heads concatenated: (B, N, heads x head_dim)."""
    batch, tokens, _ = qkv.shape
    q, k, v = qkv.reshape(batch, tokens, 3, heads, head_dim).permute(2, 0, 3, 1, 4).unbind(0)
    attn = ((q * head_dim ** -0.5) @ k.transpose(-2, -1)).softmax(dim=-1)
    return (attn @ v).transpose(1, 2).reshape(batch, tokens, heads * head_dim)


class ElasticQKV(nn.Module):
    """The fused q/k/v projection: elastic input width and number of heads."""

    def __init__(self, max_dim: int, max_heads: int, head_dim: int, bias: bool = True):
        super().__init__()
        self.max_dim, self.max_heads, self.head_dim = max_dim, max_heads, head_dim
        rows = 3 * max_heads * head_dim
        bound = 1.0 / math.sqrt(max_dim)
        self.weight = SharedTensor(torch.empty(rows, max_dim).uniform_(-bound, bound))
        self.bias = SharedTensor(torch.zeros(rows)) if bias else None
        self.configure(max_dim, max_heads)

    def configure(self, dim: int, heads: int) -> None:
        """Set the active input width and number of heads."""
        if not (0 < dim <= self.max_dim and 0 < heads <= self.max_heads):
            raise ValueError(f"qkv shape (dim {dim}, heads {heads}) outside "
                             f"(dim {self.max_dim}, heads {self.max_heads})")
        self.dim, self.heads = dim, heads

    def active_weight(self) -> torch.Tensor:
        weight = self.weight.full()
        if (self.dim, self.heads) == (self.max_dim, self.max_heads):
            return weight
        weight = weight.view(3, self.max_heads, self.head_dim, self.max_dim)
        return weight[:, : self.heads, :, : self.dim].reshape(3 * self.heads * self.head_dim, self.dim)

    def active_bias(self) -> torch.Tensor | None:
        if self.bias is None:
            return None
        bias = self.bias.full()
        if self.heads == self.max_heads:
            return bias
        return bias.view(3, self.max_heads, self.head_dim)[:, : self.heads].reshape(-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.active_weight(), self.active_bias())

    @torch.no_grad()
    def to_static(self) -> nn.Linear:
        """A plain `nn.Linear` in timm's qkv layout."""
        linear = nn.Linear(self.dim, 3 * self.heads * self.head_dim, bias=self.bias is not None)
        linear.weight.copy_(self.active_weight())
        if linear.bias is not None:
            linear.bias.copy_(self.active_bias())
        return linear


class Attention(nn.Module):
    """Static multi-head self-attention with timm's parameter names (`qkv`, `proj`)."""

    def __init__(self, qkv: nn.Linear, proj: nn.Linear, num_heads: int, head_dim: int):
        super().__init__()
        self.qkv, self.proj = qkv, proj
        self.num_heads, self.head_dim = num_heads, head_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(multi_head_attention(self.qkv(x), self.num_heads, self.head_dim))


class ElasticAttention(nn.Module):
    """Multi-head self-attention with elastic embedding width and number of heads."""

    def __init__(self, max_dim: int, max_heads: int, head_dim: int, qkv_bias: bool = True):
        super().__init__()
        self.head_dim = head_dim
        self.qkv = ElasticQKV(max_dim, max_heads, head_dim, qkv_bias)
        self.proj = ElasticLinear(max_heads * head_dim, max_dim)
        self.configure(max_dim, max_heads)

    def configure(self, dim: int, heads: int) -> None:
        """Set the active embedding width and number of heads."""
        self.qkv.configure(dim, heads)
        self.proj.configure(heads * self.head_dim, dim)
        self.dim, self.heads = dim, heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(multi_head_attention(self.qkv(x), self.heads, self.head_dim))

    def macs(self, tokens: int) -> int:
        """MACs of the projections and the attention matmuls on `tokens` tokens."""
        width = self.heads * self.head_dim
        return (linear_macs(self.dim, 3 * width, tokens) + attention_macs(tokens, self.heads, self.head_dim)
                + linear_macs(width, self.dim, tokens))

    def to_static(self) -> Attention:
        """A static `Attention` with copies of the active weights."""
        return Attention(self.qkv.to_static(), self.proj.to_static(), self.heads, self.head_dim)
