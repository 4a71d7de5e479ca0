"""`jacov`: how decorrelated the input Jacobians of a batch are at initialisation."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from estimators.base import Batch
from estimators.zero_cost import ZeroCostProxy
from nas.core.registry import ESTIMATORS

K = 1e-5


def jacov_score(jacobians: np.ndarray, k: float = K) -> float:
    """`-sum(log(s + k) + 1 / (s + k))` over the eigenvalues `s` of the correlation matrix of
    the rows of `jacobians` (one flattened Jacobian per sample).

    A constant row (e.g. the all-zero Jacobian of a network whose output ignores its input)
    tells its sample apart from no other constant row: it is taken as correlated 1 with the
    other constant rows and 0 with the rest (np.corrcoef would give NaN), so a network blind to
    its input scores as low as one whose samples all share one Jacobian.
    """
    j = np.asarray(jacobians, dtype=np.float64)
    centred = j - j.mean(axis=1, keepdims=True)
    norms = np.sqrt((centred * centred).sum(axis=1))
    unit = np.divide(centred, norms[:, None], out=np.zeros_like(centred), where=norms[:, None] > 0)
    corr = unit @ unit.T
    constant = norms == 0
    corr[np.ix_(constant, constant)] = 1.0
    np.fill_diagonal(corr, 1.0)
    s = np.linalg.eigvalsh(corr)
    return float(-np.sum(np.log(s + k) + 1.0 / (s + k)))


@ESTIMATORS.register("jacov")
class Jacov(ZeroCostProxy):
    """`-sum(log(s + k) + 1/(s + k))`, k = 1e-5, s the eigenvalues of `corrcoef(J)`, row i of J
    the flattened gradient of the summed output of the first batch w.r.t. sample i's input;
    BN in train mode, so samples interact through batch statistics as in the original code
    (Mellor et al., "Neural Architecture Search without Training", arXiv 2006.04647 v1)."""

    name = "jacov"

    def measure(self, model: nn.Module, batches: Sequence[Batch], input_shape: tuple[int, int, int]) -> float:
        x = batches[0][0].detach().clone().requires_grad_(True)
        (jacobian,) = torch.autograd.grad(model(x).sum(), x, allow_unused=True, materialize_grads=True)
        return jacov_score(jacobian.flatten(1).double().cpu().numpy())
