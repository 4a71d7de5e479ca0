"""`grad_norm`: the summed per-layer norms of the loss gradient at initialisation."""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from estimators.base import Batch
from estimators.zero_cost import ZeroCostProxy, loss_gradients
from nas.core.registry import ESTIMATORS


@ESTIMATORS.register("grad_norm")
class GradNorm(ZeroCostProxy):
    """`sum over conv/linear layers l of ||dL/dW_l||_2`, L the mean cross-entropy of the first
    batch, BN in train mode (Abdelfattah et al., "Zero-Cost Proxies for Lightweight NAS",
    ICLR 2021)."""

    name = "grad_norm"

    def measure(self, model: nn.Module, batches: Sequence[Batch], input_shape: tuple[int, int, int]) -> float:
        grads = loss_gradients(model, batches[0])
        return float(sum(torch.linalg.vector_norm(g.double()) for g in grads))
