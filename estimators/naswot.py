"""`naswot`: how differently a batch's samples switch the network's activations at initialisation."""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from estimators.base import Batch
from estimators.zero_cost import RELU_LIKE, ZeroCostProxy
from nas.core.registry import ESTIMATORS


def hamming_kernel(codes: torch.Tensor, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """`K[i, j] = N_A - hamming(c_i, c_j)` (the units on which samples i and j agree) of 0/1 codes
    `(N, N_A)`, computed in `dtype` and returned in float64."""
    c = codes.to(dtype)
    return (c @ c.T + (1 - c) @ (1 - c).T).double()


@ESTIMATORS.register("naswot")
class Naswot(ZeroCostProxy):
    """`log |det K|`, `K[i, j] = N_A - hamming(c_i, c_j)`, `c_i` the binary code of which units of
    every ReLU-like activation (ReLU, ReLU6, LeakyReLU, Hardswish, GELU, SiLU) are active for
    sample i of the first batch, concatenated over activations; a unit is active when its
    pre-activation is > 0 (for GELU, SiLU and Hardswish too, which are not exactly zero below
    0); BN in train mode (Mellor et al., "Neural Architecture Search without Training", ICML
    2021). The shipped exports hold nn.ReLU and nn.Hardswish (mobilenetv3), nn.GELU (vit) and
    nn.ReLU (cell201); Hardsigmoid gates in squeeze-excite are not units and are left out."""

    name = "naswot"

    def measure(self, model: nn.Module, batches: Sequence[Batch], input_shape: tuple[int, int, int]) -> float:
        x = batches[0][0]
        kernel = torch.zeros(len(x), len(x), dtype=torch.float64, device=x.device)

        def add_codes(module: nn.Module, args: tuple) -> None:
            # per activation in float32: 0/1 dot products stay exact below 2**24 units
            kernel.add_(hamming_kernel((args[0] > 0).flatten(1), torch.float32))

        hooks = [m.register_forward_pre_hook(add_codes) for m in model.modules() if isinstance(m, RELU_LIKE)]
        try:
            with torch.no_grad():
                model(x)
        finally:
            for hook in hooks:
                hook.remove()
        return float(torch.linalg.slogdet(kernel).logabsdet)
