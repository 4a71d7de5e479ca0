"""`vit`: an elastic Vision Transformer space (AutoFormer / HAT style weight sharing).

Patch embedding (kernel = stride = patch), an optional class token, a learned position
embedding, then pre-norm transformer blocks and a linear head (Dosovitskiy et al., 2021, "An
Image Is Worth 16x16 Words"). Elastic: the embedding width (shared by every block, prefix
slices), the depth (the first `depth` blocks run), and per block the number of heads (head
width fixed, so the attention width is `heads x head_dim`) and the MLP ratio (AutoFormer,
Chen et al., 2021). Pooling is the class token (`token`, with a final norm before it) or the
mean of the tokens (`avg`, with a norm after it), as timm does.

Exports are plain torch modules with timm's parameter names; when every block has the same
heads and MLP ratio and `heads x head_dim = embed_dim`, the export is also a timm
`VisionTransformer` that loads its weights with `strict=True` (`timm_config`). Attention is
computed with explicit matmuls so the analytic MACs (projections, QK^T, AV, MLP, patch
embedding, head) equal `FlopCounterMode`'s count of the export.

Shipped defaults (28x28 grey Fashion-MNIST): patch 7 (16 patches + class token = 17 tokens),
widths 32-64, depth 2-6, 2-4 heads of 16, MLP ratio 2-4: 0.34 to 5.3 MMACs (attention
included); BENCHMARKS.md has its training speed.

Arch keys: `embed_dim`, `depth`, `layer{i}.num_heads`, `layer{i}.mlp_ratio` (i from 0; layer
keys are active only when `depth > i`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping

import torch
from torch import nn

from nas.core.errors import ConfigError, int_problems
from nas.core.registry import SPACES
from search_spaces.base import ArchSpace, Gate, LayerCost, MixableLayer, Supernet
from search_spaces.ops import (
    ElasticLayerNorm,
    ElasticLinear,
    SharedTensor,
    conv_macs,
    linear_macs,
)
from search_spaces.ops.attention import ElasticQKV, attention_macs
from search_spaces.ops.transformer import (
    ElasticBlock,
    ElasticPatchEmbed,
    TokenPool,
    mlp_hidden,
)


@dataclass(frozen=True)
class ViTOptions:
    """Options of the `vit` space (`space.options` in YAML)."""

    image_size: int = 28                  # fixed input side; inputs of another size are resized
    patch_size: int = 7                   # 28 / 7 = 4 x 4 = 16 patches
    embed_dims: tuple[int, ...] = (32, 48, 64)
    depths: tuple[int, ...] = (2, 3, 4, 5, 6)
    num_heads: tuple[int, ...] = (2, 3, 4)
    head_dim: int = 16                    # fixed: the attention width is heads x head_dim
    mlp_ratios: tuple[float, ...] = (2.0, 3.0, 4.0)
    pool: Literal["token", "avg"] = "token"   # class token, or mean of tokens without one
    qkv_bias: bool = True

    def __post_init__(self) -> None:
        problems = []
        problems += int_problems(1, image_size=self.image_size, patch_size=self.patch_size, head_dim=self.head_dim)
        if self.patch_size >= 1 and self.image_size % self.patch_size:
            problems.append(f"patch_size: must divide image_size {self.image_size}, got {self.patch_size}")
        for name in ("embed_dims", "depths", "num_heads", "mlp_ratios"):
            values = getattr(self, name)
            if not values or any(v <= 0 for v in values) or len(set(values)) != len(values):
                problems.append(f"{name}: must be a non-empty list of distinct positive numbers, "
                                f"got {list(values)}")
        small = [r for r in self.mlp_ratios if r > 0 and self.embed_dims
                 and mlp_hidden(min(self.embed_dims), r) < 1]
        if small:
            problems.append(f"mlp_ratios: {small} give an empty MLP at embed_dim {min(self.embed_dims)}")
        if problems:
            raise ConfigError(problems)


@SPACES.register("vit", options=ViTOptions)
class ViTSpace(ArchSpace):
    """Elastic ViT choices and their analytic costs."""

    name = "vit"

    def __init__(self, options: ViTOptions, in_chans: int, num_classes: int):
        self.options, self.in_chans, self.num_classes = options, in_chans, num_classes
        self.num_patches = (options.image_size // options.patch_size) ** 2
        self.num_tokens = self.num_patches + (1 if options.pool == "token" else 0)
        self.max_depth = max(options.depths)
        choices: dict[str, tuple] = {"embed_dim": tuple(sorted(options.embed_dims)),
                                     "depth": tuple(sorted(options.depths))}
        gates: dict[str, Gate] = {}
        for i in range(self.max_depth):
            for key, values in (("num_heads", options.num_heads), ("mlp_ratio", options.mlp_ratios)):
                choices[f"layer{i}.{key}"] = tuple(sorted(values))
                gates[f"layer{i}.{key}"] = Gate("depth", i)
        super().__init__(choices, gates)

    def input_size(self, arch: Mapping[str, Any]) -> int:
        return self.options.image_size

    def splittable_keys(self) -> tuple[str, ...]:
        """Every layer's MLP ratio."""
        return tuple(f"layer{i}.mlp_ratio" for i in range(self.max_depth))

    def key_parameters(self, key: str) -> tuple[str, ...]:
        """A layer's MLP ratio owns that layer's MLP."""
        return (f"blocks.{key.split('.')[0][len('layer'):]}.mlp.",)

    def block_shapes(self, arch: Mapping[str, Any]) -> list[tuple[int, float]]:
        """(heads, MLP ratio) of every active block."""
        return [(arch[f"layer{i}.num_heads"], arch[f"layer{i}.mlp_ratio"]) for i in range(arch["depth"])]

    def layers(self, arch: Mapping[str, Any]) -> list[LayerCost]:
        """Patch embedding, every active block, then norm/pool/head.

        The class-token concat and position-embedding add are element-wise and belong to no
        layer's modules (their parameters are counted with the patch embedding's), so the
        patch layer outputs (patches, dim) while the blocks take (tokens, dim).
        """
        arch = self.canonical(arch)
        o, dim, tokens = self.options, arch["embed_dim"], self.num_tokens
        side, grid = o.image_size, o.image_size // o.patch_size
        layers = [LayerCost(
            f"patch_embed:{self.in_chans}x{side}x{side}:{dim}:p{o.patch_size}:{o.pool}",
            conv_macs(self.in_chans, dim, o.patch_size, (grid, grid)),
            self.in_chans * o.patch_size ** 2 * dim + dim + tokens * dim + (dim if o.pool == "token" else 0),
            (self.in_chans, side, side), ("patch_embed",))]
        for i, (heads, ratio) in enumerate(self.block_shapes(arch)):
            width, hidden = heads * o.head_dim, mlp_hidden(dim, ratio)
            macs = (linear_macs(dim, 3 * width, tokens) + attention_macs(tokens, heads, o.head_dim)
                    + linear_macs(width, dim, tokens) + 2 * linear_macs(dim, hidden, tokens))
            bias = 3 * width if o.qkv_bias else 0
            params = 4 * dim + (dim * 3 * width + bias) + (width * dim + dim) + (2 * dim * hidden + hidden + dim)
            layers.append(LayerCost(f"block:{tokens}x{dim}:h{heads}x{o.head_dim}:mlp{hidden}:qkvb{int(o.qkv_bias)}",
                                    macs, params, (tokens, dim), (f"blocks.{i}",)))
        norm = ("norm", "pool") if o.pool == "token" else ("pool", "fc_norm")
        layers.append(LayerCost(f"head:{tokens}x{dim}:{o.pool}:{self.num_classes}",
                                linear_macs(dim, self.num_classes),
                                2 * dim + dim * self.num_classes + self.num_classes,
                                (tokens, dim), norm + ("head",)))
        return layers

    def build_supernet(self) -> "ViTSupernet":
        return ViTSupernet(self)


class StaticViT(nn.Module):
    """A plain ViT subnet with timm's parameter names (a uniform one loads into timm strictly)."""

    def __init__(self, patch_embed: nn.Module, cls_token: torch.Tensor | None, pos_embed: torch.Tensor,
                 blocks: nn.Sequential, norm: nn.Module, pool: TokenPool, fc_norm: nn.Module, head: nn.Linear):
        super().__init__()
        self.patch_embed = patch_embed
        self.cls_token = nn.Parameter(cls_token) if cls_token is not None else None
        self.pos_embed = nn.Parameter(pos_embed)
        self.blocks, self.norm, self.pool, self.fc_norm, self.head = blocks, norm, pool, fc_norm, head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x)
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = self.blocks(x + self.pos_embed)
        return self.head(self.fc_norm(self.pool(self.norm(x))))


class ViTSupernet(Supernet):
    """Weight-sharing ViT: every block at its largest shape, sliced per arch."""

    def __init__(self, space: ViTSpace):
        super().__init__(space)
        o = space.options
        max_dim = max(o.embed_dims)
        self.patch_embed = ElasticPatchEmbed(space.in_chans, max_dim, o.patch_size)
        self.cls_token = SharedTensor(torch.zeros(1, 1, max_dim)) if o.pool == "token" else None
        self.pos_embed = SharedTensor(torch.zeros(1, space.num_tokens, max_dim))
        self.blocks = nn.ModuleList([ElasticBlock(max_dim, max(o.num_heads), o.head_dim, max(o.mlp_ratios),
                                                  o.qkv_bias) for _ in range(space.max_depth)])
        self.norm = ElasticLayerNorm(max_dim)
        self.pool = TokenPool(o.pool)
        self.head = ElasticLinear(max_dim, space.num_classes)
        self._init_weights()
        self.set_active(space.max())

    @torch.no_grad()
    def _init_weights(self) -> None:
        # timm's ViT initialisation: truncated normal (std 0.02) linears with zero biases,
        # position embedding std 0.02, class token ~0.
        nn.init.trunc_normal_(self.pos_embed.tensor, std=0.02)
        if self.cls_token is not None:
            nn.init.normal_(self.cls_token.tensor, std=1e-6)
        for module in self.modules():
            if isinstance(module, (ElasticLinear, ElasticQKV)):
                nn.init.trunc_normal_(module.weight.tensor, std=0.02)
                if module.bias is not None:
                    module.bias.tensor.zero_()

    def _configure(self, arch: dict) -> None:
        dim = arch["embed_dim"]
        self.dim, self.depth = dim, arch["depth"]
        self.patch_embed.configure(dim)
        for block, (heads, ratio) in zip(self.blocks, self.space.block_shapes(arch)):
            block.configure(dim, heads, ratio)
        self.head.configure(dim, self.space.num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(self.resize_input(x))
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.full()[..., : self.dim].expand(x.shape[0], -1, -1), x], dim=1)
        x = x + self.pos_embed.full()[..., : self.dim]
        for block in self.blocks[: self.depth]:
            x = block(x)
        if self.space.options.pool == "token":
            return self.head(self.pool(self.norm(x)))
        return self.head(self.norm(self.pool(x)))   # `norm` is timm's fc_norm here

    def mixable_layers(self) -> list[MixableLayer]:
        """The MLP of every block (`ffn`): fc1 and fc2, weights and biases."""
        return [MixableLayer("ffn", f"blocks.{i}.mlp",
                             tuple((f"blocks.{i}.mlp.{fc}.weight", f"blocks.{i}.mlp.{fc}.bias") for fc in ("fc1", "fc2")))
                for i in range(len(self.blocks))]

    @torch.no_grad()
    def _build_static(self) -> StaticViT:
        dim, token = self.dim, self.space.options.pool == "token"
        norm = self.norm.to_static(dim)
        return StaticViT(
            self.patch_embed.to_static(),
            self.cls_token.full()[..., :dim].clone() if self.cls_token is not None else None,
            self.pos_embed.full()[..., :dim].clone(),
            nn.Sequential(*[block.to_static() for block in self.blocks[: self.depth]]),
            norm if token else nn.Identity(), TokenPool(self.space.options.pool),
            nn.Identity() if token else norm, self.head.to_static())

    def timm_config(self, arch: Mapping[str, Any]) -> dict | None:
        """timm `VisionTransformer` definition of `arch`, when every block has the same shape and
        heads x head_dim = embed_dim; otherwise None."""
        o, arch = self.space.options, self.space.canonical(arch)
        shapes = set(self.space.block_shapes(arch))
        if len(shapes) != 1:
            return None
        (heads, ratio), = shapes
        if heads * o.head_dim != arch["embed_dim"]:
            return None
        return {"model": "VisionTransformer",
                "kwargs": {"img_size": o.image_size, "patch_size": o.patch_size, "in_chans": self.space.in_chans,
                           "num_classes": self.space.num_classes, "embed_dim": arch["embed_dim"],
                           "depth": arch["depth"], "num_heads": heads, "mlp_ratio": float(ratio),
                           "qkv_bias": o.qkv_bias, "class_token": o.pool == "token", "global_pool": o.pool},
                "input_size": [self.space.in_chans, o.image_size, o.image_size]}
