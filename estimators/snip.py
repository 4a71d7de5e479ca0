"""`snip`: connection sensitivity of the loss at initialisation."""
from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from estimators.base import Batch
from estimators.zero_cost import ZeroCostProxy, loss_gradients, weights_of
from nas.core.registry import ESTIMATORS


@ESTIMATORS.register("snip")
class Snip(ZeroCostProxy):
    """`sum over conv/linear weights of |W * dL/dW|`, L the mean cross-entropy of the first
    batch, BN in train mode (Lee et al., "SNIP: Single-shot Network Pruning based on Connection
    Sensitivity", ICLR 2019; as a proxy: Abdelfattah et al., ICLR 2021)."""

    name = "snip"

    def measure(self, model: nn.Module, batches: Sequence[Batch], input_shape: tuple[int, int, int]) -> float:
        grads = loss_gradients(model, batches[0])
        return float(sum((w.detach().double() * g.double()).abs().sum() for w, g in zip(weights_of(model), grads)))
