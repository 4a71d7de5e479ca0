"""`synflow`: synaptic flow of a data-free all-ones input through |W|, in float64."""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from estimators.base import Batch
from estimators.zero_cost import ZeroCostProxy, weights_of
from nas.core.registry import ESTIMATORS


@ESTIMATORS.register("synflow")
class Synflow(ZeroCostProxy):
    """`log S`, `S = sum over conv/linear weights of |W * dR/dW|`, `R = sum(f(1))`: every
    parameter replaced by its absolute value, one all-ones input sample, float64 (Tanaka et
    al., "Pruning neural networks without any data by iteratively conserving synaptic flow",
    NeurIPS 2020; as a proxy: Abdelfattah et al., ICLR 2021).

    BN is neutralised by eval mode with its default statistics (running mean 0, variance 1),
    so it scales by |gamma| / sqrt(1 + eps) and shifts by |beta| instead of normalising the
    signal away. The score is the log of S: S is a product over layers and spans hundreds of
    orders of magnitude across archs (float32 overflows in deep nets); the log keeps it in
    range, ranks archs exactly as S does, and makes the mean over init seeds a geometric mean.
    A float64 overflow gives +inf, an all-zero flow -inf. The model is a throw-away export of
    a seeded supernet, so its signs need no restoring.
    """

    name = "synflow"
    needs = frozenset()

    def measure(self, model: nn.Module, batches: Sequence[Batch], input_shape: tuple[int, int, int]) -> float:
        model = model.double().eval()
        with torch.no_grad():
            for module in model.modules():
                if isinstance(module, nn.modules.batchnorm._BatchNorm):
                    module.reset_running_stats()
            for parameter in model.parameters():
                parameter.abs_()
        weights = weights_of(model)
        flow = model(torch.ones(1, *input_shape, dtype=torch.float64, device=weights[0].device)).sum()
        grads = torch.autograd.grad(flow, weights, allow_unused=True, materialize_grads=True)
        total = math.fsum(float((w.detach() * g).abs().sum()) for w, g in zip(weights, grads))
        return math.log(total) if total > 0 else -math.inf
