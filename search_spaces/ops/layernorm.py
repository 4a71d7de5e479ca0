"""Elastic layer norm: the active features use a prefix slice of the weight and bias."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from search_spaces.ops.source import SharedTensor


class ElasticLayerNorm(nn.Module):
    """Layer norm over the last dimension, whose active width follows the input's.

    `eps` defaults to 1e-6, timm's value for vision transformers.
    """

    def __init__(self, max_features: int, eps: float = 1e-6):
        super().__init__()
        self.max_features, self.eps = max_features, eps
        self.weight = SharedTensor(torch.ones(max_features))
        self.bias = SharedTensor(torch.zeros(max_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = x.shape[-1]
        weight, bias = self.weight.full(), self.bias.full()
        if features != self.max_features:
            weight, bias = weight[:features], bias[:features]
        return F.layer_norm(x, (features,), weight, bias, self.eps)

    @torch.no_grad()
    def to_static(self, features: int) -> nn.LayerNorm:
        """A plain `nn.LayerNorm` with copies of the first `features` weights and biases."""
        norm = nn.LayerNorm(features, eps=self.eps)
        norm.weight.copy_(self.weight.full()[:features])
        norm.bias.copy_(self.bias.full()[:features])
        return norm
