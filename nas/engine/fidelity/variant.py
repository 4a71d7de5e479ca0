"""How a standalone training runs: memory format and compilation (`train.accelerate`).

Kernels change the last bits of a training, so the variant is chosen by a fixed rule of
(model, recipe, length, threads), never by timing at run time: one seed gives one result on
one machine. `eager` keeps the plain loop in the memory format `train.channels_last` says;
`compiled` also runs forward and backward through `torch.compile` (inductor); `auto` applies
the rule of `choose_variant`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from nas.core.config import TrainConfig


@dataclass(frozen=True)
class Variant:
    """The kernels a standalone training runs with."""

    channels_last: bool
    compiled: bool

    @property
    def memory_format(self) -> torch.memory_format:
        return torch.channels_last if self.channels_last else torch.contiguous_format

    def to_dict(self) -> dict[str, str | bool]:
        """What a ground-truth record says of how it was trained."""
        return {"memory_format": "channels_last" if self.channels_last else "contiguous", "compiled": self.compiled}




def choose_variant(model: nn.Module, train: TrainConfig, steps: int, threads: int) -> Variant:
    """The variant of training `model` for `steps` steps on `threads` threads under `train`."""
    del model, steps, threads   # the rule below does not depend on them (yet)
    return Variant(train.channels_last, train.accelerate == "compiled")


def forward_of(model: nn.Module, variant: Variant) -> Callable[[torch.Tensor], torch.Tensor]:
    """What the training loop calls: `model` itself, or its compiled forward (same parameters)."""
    return torch.compile(model, dynamic=False) if variant.compiled else model
