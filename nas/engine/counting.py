"""Costs counted on a real module, the independent check of the analytic ones.

`counted_flops` is what `torch.utils.flop_counter.FlopCounterMode` counts for one forward
pass (FLOPs = 2 x MACs of convolutions, linear layers and matmuls; batch norm, activations,
pooling and element-wise products are not counted, by the counter or by the spaces).
"""
from __future__ import annotations

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode


def counted_flops(model: nn.Module, example: torch.Tensor) -> int:
    """FLOPs that `FlopCounterMode` counts for one forward pass of `model` on `example`."""
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(example)
    return counter.get_total_flops()


def parameter_count(model: nn.Module) -> int:
    """Number of parameters of a module."""
    return sum(p.numel() for p in model.parameters())
