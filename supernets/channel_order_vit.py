"""Channel sorting for a ViT supernet before progressive shrinking opens its heads, MLP ratios
or embedding widths: the transformer counterpart of `channel_order`'s MobileNetV3 sorting.

Once-for-All sorts only convolutions; the same rule carries over. An elastic ViT keeps a prefix
of its heads, of each MLP's hidden units and of the embedding's features, so before a phase
opens smaller ones they are permuted most important first, importance being the L1 norm of the
weights that read them:
- a block's heads by the output projection's (`attn.proj`) columns of each head (summed over
  the head's features); the q, k and v rows of a head move together;
- a block's MLP hidden units by `fc2`'s columns; `fc1`'s rows and bias move with them;
- the embedding features (the residual stream every block reads and writes) by every block's
  `qkv` and `fc1` columns and the classifier's columns; the patch projection, class token,
  position embedding, every layer norm, `attn.proj`'s and `fc2`'s rows move with them.
A layer norm over the full width is unchanged by a permutation of its features and parameters,
so the full network computes the same function before and after (up to summation order).
`tier` keeps OFA's meaning: with `tier` > 0 heads and hidden units stay inside the tiers the
previous phase trained (for hidden units, the widths at the largest embedding width).
"""
from __future__ import annotations

from typing import Mapping, Sequence

import torch
from torch import nn

from search_spaces.ops.transformer import mlp_hidden
from supernets.channel_order import importance_order, learned_tensor, permute_in_place


def _tiers(widths: Sequence[int], tier: int) -> list[int]:
    """OFA's tier starts: the widths the previous phases opened (below the largest), ascending."""
    return sorted(sorted(set(widths), reverse=True)[1:tier + 1]) if tier > 0 else []


def sort_heads(attn: nn.Module, head_counts: Sequence[int] = (), tier: int = 0) -> torch.Tensor:
    """Sort an elastic attention's heads by the L1 norm of `proj`'s columns; returns the order."""
    qkv, proj = attn.qkv, learned_tensor(attn.proj)
    heads, head_dim = qkv.max_heads, qkv.head_dim
    order = importance_order(proj.detach().abs().view(proj.shape[0], heads, head_dim).sum(dim=(0, 2)),
                             _tiers(head_counts, tier))
    within = torch.arange(head_dim)
    columns = (order[:, None] * head_dim + within).reshape(-1)
    rows = (torch.arange(3)[:, None, None] * heads * head_dim + columns.view(heads, head_dim)[None]).reshape(-1)
    permute_in_place(proj, 1, columns)
    permute_in_place(learned_tensor(qkv), 0, rows)
    if qkv.bias is not None:
        permute_in_place(learned_tensor(qkv, "bias"), 0, rows)
    return order


def sort_mlp_hidden(mlp: nn.Module, hidden_widths: Sequence[int] = (), tier: int = 0) -> torch.Tensor:
    """Sort an elastic MLP's hidden units by the L1 norm of `fc2`'s columns; returns the order."""
    fc2 = learned_tensor(mlp.fc2)
    order = importance_order(fc2.detach().abs().sum(dim=0), _tiers(hidden_widths, tier))
    permute_in_place(fc2, 1, order)
    permute_in_place(learned_tensor(mlp.fc1), 0, order)
    if mlp.fc1.bias is not None:
        permute_in_place(learned_tensor(mlp.fc1, "bias"), 0, order)
    return order


def sort_block_expansions(supernet: nn.Module, opened: Mapping[str, Sequence[float]], tier: int) -> int:
    """Sort the heads and MLP hidden units of the layers whose `layer{i}.num_heads` or
    `layer{i}.mlp_ratio` is in `opened` (key -> the values the phase opens); returns how many
    layers were sorted."""
    max_dim = supernet.blocks[0].mlp.fc1.max_in
    layers = set()
    for key, values in opened.items():
        layer, choice = key.split(".")
        block = supernet.blocks[int(layer[len("layer"):])]
        if choice == "num_heads":
            sort_heads(block.attn, [int(v) for v in values], tier)
        elif choice == "mlp_ratio":
            sort_mlp_hidden(block.mlp, [mlp_hidden(max_dim, v) for v in values], tier)
        else:
            continue
        layers.add(layer)
    return len(layers)


def sort_embedding(supernet: nn.Module) -> torch.Tensor:
    """Sort the embedding features by the L1 norm of every column reading them; returns the order."""
    blocks = list(supernet.blocks)
    readers = [learned_tensor(b.attn.qkv) for b in blocks] + [learned_tensor(b.mlp.fc1) for b in blocks] + [learned_tensor(supernet.head)]
    order = importance_order(sum(w.detach().abs().sum(dim=0) for w in readers))
    for weight in readers:
        permute_in_place(weight, 1, order)
    written = [supernet.patch_embed.proj, *(b.attn.proj for b in blocks), *(b.mlp.fc2 for b in blocks)]
    for op in written:
        permute_in_place(learned_tensor(op), 0, order)
        if op.bias is not None:
            permute_in_place(learned_tensor(op, "bias"), 0, order)
    for norm in [supernet.norm, *(n for b in blocks for n in (b.norm1, b.norm2))]:
        permute_in_place(learned_tensor(norm), 0, order)
        permute_in_place(learned_tensor(norm, "bias"), 0, order)
    for token in (supernet.cls_token, supernet.pos_embed):
        if token is not None:
            permute_in_place(token.tensor, 2, order)
    return order
