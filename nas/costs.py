"""Costs of an architecture: analytic MACs and parameters, amounts like `20M`, counted FLOPs.

MACs are the multiply-accumulates of convolutions, linear layers and matmuls: exactly what
`torch.utils.flop_counter.FlopCounterMode` counts on the exported model, divided by 2 (it
counts FLOPs = 2 x MACs). Batch norm, activations, pooling, residual adds and SE's
element-wise products are not counted, by the counter or here.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from search_spaces.base import ArchSpace

_SUFFIX = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_AMOUNT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([kKmMgGtT]?)\s*$")


def macs(space: ArchSpace, arch: Mapping[str, Any]) -> int:
    """Multiply-accumulates of one image through `arch` (analytic, no forward pass)."""
    return space.macs(arch)


def params(space: ArchSpace, arch: Mapping[str, Any]) -> int:
    """Parameter count of `arch`'s export (analytic)."""
    return space.params(arch)


def macs_and_params(space: ArchSpace, arch: Mapping[str, Any]) -> tuple[int, int]:
    """(MACs, parameters) of `arch`, computed together (one pass over the layers)."""
    return space.costs(arch)


def parse_amount(text: str | float | int, what: str = "amount") -> float:
    """`"20M"` -> 20e6, `"1.2G"` -> 1.2e9, `"1500"` -> 1500; errors name `what`."""
    from nas.errors import ConfigError
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    match = _AMOUNT.match(str(text))
    if not match:
        raise ConfigError(f"{what}: cannot read {text!r}; use a number with an optional K/M/G suffix, e.g. 20M")
    return float(match.group(1)) * _SUFFIX[match.group(2).upper()]


def format_amount(value: float) -> str:
    """`20_000_000` -> `"20.00M"`."""
    for suffix in ("T", "G", "M", "K"):
        if abs(value) >= _SUFFIX[suffix]:
            return f"{value / _SUFFIX[suffix]:.2f}{suffix}"
    return f"{value:g}"


def counted_flops(model: nn.Module, example: torch.Tensor) -> int:
    """FLOPs that `FlopCounterMode` counts for one forward pass of `model` on `example`."""
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(example)
    return counter.get_total_flops()


def parameter_count(model: nn.Module) -> int:
    """Number of parameters of a module."""
    return sum(p.numel() for p in model.parameters())
