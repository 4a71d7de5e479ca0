"""`zico`: the inverse coefficient of variation of the loss gradients over several batches."""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from estimators.base import Batch
from estimators.zero_cost import ZeroCostProxy, loss_gradients
from nas.core.errors import ConfigError
from nas.core.registry import ESTIMATORS


def zico_score(per_batch: Sequence[Sequence[torch.Tensor]]) -> float:
    """`sum over layers l of log(sum over w of mean_n |g_nw| / std_n(g_nw))`, from the gradients
    `per_batch[n][l]` of N batches; std is the population std (ddof 0), weights with zero std
    are skipped, and so is a layer whose sum is 0."""
    total = 0.0
    for layer in zip(*per_batch):
        g = torch.stack([t.double() for t in layer])
        std = g.std(dim=0, correction=0)
        keep = std > 0
        ratio = float((g.abs().mean(dim=0)[keep] / std[keep]).sum())
        if ratio > 0:
            total += math.log(ratio)
    return total


@ESTIMATORS.register("zico")
class Zico(ZeroCostProxy):
    """`sum over conv/linear layers l of log(sum over W_l of mean_n |g| / std_n(g))`, g the
    mean cross-entropy gradients of the context's N >= 2 batches, BN in train mode (Li et al.,
    "ZiCo: Zero-shot NAS via Inverse Coefficient of Variation on Gradients", ICLR 2023)."""

    name = "zico"
    cheap = False   # a backward pass per batch and init seed: ~1.5 CPU s per mbv3 arch (estimator_cost.py)

    def measure(self, model: nn.Module, batches: Sequence[Batch], input_shape: tuple[int, int, int]) -> float:
        if len(batches) < 2:
            raise ConfigError(f"score: 'zico' needs at least 2 batches, the estimator context has {len(batches)}")
        return zico_score([loss_gradients(model, batch) for batch in batches])
