"""The architecture router of a mixture of experts: an arch encoding in, expert weights out.

A two-layer MLP reads `space.encode(arch)` (a one-hot of every active choice: entries in
{0, 1}, already on a common scale, so it is fed as is) and gives, for each of `groups` rows,
a softmax over the experts: one row for a whole layer (layer-wise routing) or one per output
neuron of an op (neuron-wise routing). The output layer starts at zero, so at initialisation
every arch mixes the experts evenly (the scale `supernets.mixture` gives the mix assumes it)
and the routing is learned from there.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Router(nn.Module):
    """`softmax(W2 relu(W1 a + b1) + b2)` reshaped to (groups, experts), rows summing to 1."""

    def __init__(self, encoding_size: int, hidden: int, experts: int, groups: int = 1):
        super().__init__()
        self.experts, self.groups = experts, groups
        self.hidden = nn.Linear(encoding_size, hidden)
        self.out = nn.Linear(hidden, groups * experts)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)
        self._bound: torch.Tensor | None = None      # the encoding as `bind` received it
        self._encoding: torch.Tensor | None = None   # the same on the router's device

    def forward(self, encoding: torch.Tensor) -> torch.Tensor:
        """Expert weights (groups, experts) for one arch encoding: non-negative, rows sum to 1."""
        logits = self.out(F.relu(self.hidden(encoding)))
        return logits.view(self.groups, self.experts).softmax(dim=-1)

    def bind(self, encoding: torch.Tensor) -> None:
        """Route for the arch of `encoding` from now on (several sources may bind the same one)."""
        if encoding is not self._bound:
            self._bound, self._encoding = encoding, None

    def routes(self) -> torch.Tensor:
        """Expert weights for the bound arch, computed afresh (so every pass back-propagates
        into the router, whatever ran before)."""
        if self._bound is None:
            raise RuntimeError("router used before an arch was bound (Supernet.set_active binds it)")
        weight = self.hidden.weight
        if self._encoding is None or self._encoding.device != weight.device:
            self._encoding = self._bound.to(device=weight.device, dtype=weight.dtype)
        return self(self._encoding)
