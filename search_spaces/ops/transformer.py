"""Vision-transformer building blocks: patch embedding, MLP, pre-norm block, token pooling.

Elastic versions slice a shared embedding width and a per-block number of heads and MLP
ratio; static versions carry timm's parameter names (`patch_embed.proj`, `norm1`,
`attn.qkv`, `attn.proj`, `norm2`, `mlp.fc1`, `mlp.fc2`), so a static block's state dict is a
timm `Block`'s. The MLP's hidden width is `int(dim * mlp_ratio)` of the active width, as timm
computes it, and GELU is the exact (erf) one, as timm's default.
"""
from __future__ import annotations

import torch
from torch import nn

from search_spaces.ops.attention import Attention, ElasticAttention
from search_spaces.ops.conv import ElasticConv2d
from search_spaces.ops.layernorm import ElasticLayerNorm
from search_spaces.ops.linear import ElasticLinear


def mlp_hidden(dim: int, mlp_ratio: float) -> int:
    """Hidden width of a transformer MLP (timm's rule)."""
    return int(dim * mlp_ratio)


class PatchEmbed(nn.Module):
    """Static patch embedding: conv with kernel = stride = patch, then (B, patches, dim)."""

    def __init__(self, proj: nn.Conv2d):
        super().__init__()
        self.proj = proj

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)


class ElasticPatchEmbed(nn.Module):
    """Patch embedding with an elastic output width."""

    def __init__(self, in_chans: int, max_dim: int, patch_size: int):
        super().__init__()
        self.proj = ElasticConv2d(in_chans, max_dim, patch_size, stride=patch_size, bias=True, padding=0)

    def configure(self, dim: int) -> None:
        """Set the active embedding width."""
        self.proj.configure(self.proj.max_in, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)

    def to_static(self) -> PatchEmbed:
        return PatchEmbed(self.proj.to_static())


class Mlp(nn.Module):
    """Static transformer MLP with timm's names (`fc1`, `act`, `fc2`)."""

    def __init__(self, fc1: nn.Linear, fc2: nn.Linear):
        super().__init__()
        self.fc1, self.act, self.fc2 = fc1, nn.GELU(), fc2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class ElasticMlp(nn.Module):
    """Transformer MLP with elastic width and ratio (hidden = `int(dim * mlp_ratio)`)."""

    def __init__(self, max_dim: int, max_ratio: float):
        super().__init__()
        max_hidden = mlp_hidden(max_dim, max_ratio)
        self.fc1 = ElasticLinear(max_dim, max_hidden)
        self.act = nn.GELU()
        self.fc2 = ElasticLinear(max_hidden, max_dim)

    def configure(self, dim: int, mlp_ratio: float) -> None:
        """Set the active width and ratio."""
        hidden = mlp_hidden(dim, mlp_ratio)
        self.fc1.configure(dim, hidden)
        self.fc2.configure(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))

    def macs(self, tokens: int) -> int:
        return self.fc1.macs(tokens) + self.fc2.macs(tokens)

    def to_static(self) -> Mlp:
        return Mlp(self.fc1.to_static(), self.fc2.to_static())


class Block(nn.Module):
    """Static pre-norm transformer block: `x + attn(norm1(x))`, then `x + mlp(norm2(x))`."""

    def __init__(self, norm1: nn.LayerNorm, attn: Attention, norm2: nn.LayerNorm, mlp: Mlp):
        super().__init__()
        self.norm1, self.attn, self.norm2, self.mlp = norm1, attn, norm2, mlp

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ElasticBlock(nn.Module):
    """Pre-norm transformer block with elastic width, heads (fixed head width) and MLP ratio."""

    def __init__(self, max_dim: int, max_heads: int, head_dim: int, max_ratio: float, qkv_bias: bool = True):
        super().__init__()
        self.norm1 = ElasticLayerNorm(max_dim)
        self.attn = ElasticAttention(max_dim, max_heads, head_dim, qkv_bias)
        self.norm2 = ElasticLayerNorm(max_dim)
        self.mlp = ElasticMlp(max_dim, max_ratio)
        self.dim = max_dim

    def configure(self, dim: int, heads: int, mlp_ratio: float) -> None:
        """Set the active width, number of heads and MLP ratio."""
        self.attn.configure(dim, heads)
        self.mlp.configure(dim, mlp_ratio)
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))

    def macs(self, tokens: int) -> int:
        """MACs of the block on `tokens` tokens (layer norms and GELU not counted)."""
        return self.attn.macs(tokens) + self.mlp.macs(tokens)

    def to_static(self) -> Block:
        return Block(self.norm1.to_static(self.dim), self.attn.to_static(),
                     self.norm2.to_static(self.dim), self.mlp.to_static())


class TokenPool(nn.Module):
    """(B, N, dim) -> (B, dim): the class token (`token`) or the mean of every token (`avg`)."""

    def __init__(self, mode: str):
        super().__init__()
        if mode not in ("token", "avg"):
            raise ValueError(f"pool mode must be 'token' or 'avg', got {mode!r}")
        self.mode = mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, 0] if self.mode == "token" else x.mean(dim=1)

    def extra_repr(self) -> str:
        return self.mode
