"""How a standalone training runs: memory format and compilation (`train.accelerate`).

Kernels change the last bits of a training, so the variant is chosen by a fixed rule of
(model, recipe, length, threads), never by timing at run time: one seed gives one result on
one machine. `eager` keeps the plain loop in the memory format `train.channels_last` says;
`compiled` also runs forward and backward through `torch.compile` (inductor); `auto` applies
the rule of `choose_variant`.
"""
from __future__ import annotations

import os
import shutil
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


# `auto` compiles the training of a convolutional network with batch norm whose convolutions
# are all dense (not grouped), when it has at least this many steps per thread. Measured on
# one thread (benchmarks/standalone_speed.py): against eager channels_last, inductor saves
# 9-26 ms of a cell201 step (min, mid) and about 9% of the max's, after 40-140 s of
# compilation, so it pays back after about 4,000-5,000 steps; twice that leaves a margin for
# the machine's load. The shipped 4-epoch cell201 recipe (1,716 steps) stays eager.
# MobileNetV3's depthwise (grouped) convolutions run no faster compiled (its min and mid steps
# slower), and ViT (one patch convolution, no batch norm) was not measured: both stay eager.
COMPILE_MIN_STEPS_PER_THREAD = 10_000


def choose_variant(model: nn.Module, train: TrainConfig, steps: int, threads: int) -> Variant:
    """The variant of training `model` for `steps` steps on `threads` threads under `train`:
    `train.channels_last`'s memory format; compiled when `train.accelerate` is `compiled`, or
    `auto`, the rule above says compiling pays back and inductor has a C++ compiler to run."""
    compiled = may_compile(train, steps, threads)
    if compiled and train.accelerate == "auto":
        modules = list(model.modules())
        convs = [m for m in modules if isinstance(m, nn.Conv2d)]
        compiled = (bool(convs) and all(m.groups == 1 for m in convs)
                    and any(isinstance(m, nn.BatchNorm2d) for m in modules))
    return Variant(train.channels_last, compiled)


def may_compile(train: TrainConfig, steps: int, threads: int) -> bool:
    """Whether `choose_variant` may compile some model under `train` for `steps` steps on
    `threads` threads (under `auto`, the model decides then): False means eager for every model."""
    if train.accelerate != "auto":
        return train.accelerate == "compiled"
    return steps >= COMPILE_MIN_STEPS_PER_THREAD * max(1, threads) and has_cpp_compiler()


def has_cpp_compiler() -> bool:
    """Whether a C++ compiler that inductor's CPU code needs is on PATH (`$CXX`, g++, clang++)."""
    return any(shutil.which(name) for name in (os.environ.get("CXX"), "g++", "clang++") if name)


def forward_of(model: nn.Module, variant: Variant) -> Callable[[torch.Tensor], torch.Tensor]:
    """What the training loop calls: `model` itself, or its compiled forward (same parameters)."""
    return torch.compile(model, dynamic=False) if variant.compiled else model
