"""How a standalone training runs: memory format, compilation and precision (`train.accelerate`).

Kernels change the last bits of a training, so the variant is chosen by a fixed rule of
(model, recipe, length, threads, the CPU's instruction set), never by timing at run time: one
seed gives one result on one machine. `eager` keeps the plain loop in the memory format
`train.channels_last` says and the precision `train.precision` says; `compiled` also runs
forward and backward through `torch.compile` (inductor); `auto` applies the rules of
`choose_variant`: compiling when it pays back, and bf16 autocast instead of fp32 where this CPU
has bf16 instructions and the model is of the kind measured faster with it, except for ground
truths, which stay in their recipe's precision (`nas.engine.precision` says why).
"""
from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from nas.core.config import TrainConfig
from nas.engine.precision import dense_convolutions_with_bn, trains_in_bf16


@dataclass(frozen=True)
class Variant:
    """The kernels a standalone training runs with."""

    channels_last: bool
    compiled: bool
    bf16: bool = False      # bf16 autocast of the forward pass (else fp32)

    @property
    def memory_format(self) -> torch.memory_format:
        return torch.channels_last if self.channels_last else torch.contiguous_format

    def to_dict(self) -> dict[str, str | bool]:
        """What a ground-truth record says of how it was trained."""
        return {"memory_format": "channels_last" if self.channels_last else "contiguous", "compiled": self.compiled,
                "precision": "bf16" if self.bf16 else "fp32"}


# `auto` compiles the training of a convolutional network with batch norm whose convolutions
# are all dense (not grouped), when it has at least this many steps per thread. Measured on
# one thread (benchmarks/standalone_speed.py): against eager channels_last, inductor saves
# 9-26 ms of a cell201 step (min, mid) and about 9% of the max's, after 40-140 s of
# compilation, so it pays back after about 4,000-5,000 steps; twice that leaves a margin for
# the machine's load. The shipped 4-epoch cell201 recipe (1,716 steps) stays eager.
# MobileNetV3's depthwise (grouped) convolutions run no faster compiled (its min and mid steps
# slower), and ViT (one patch convolution, no batch norm) was not measured: both stay eager.
COMPILE_MIN_STEPS_PER_THREAD = 10_000


def choose_variant(model: nn.Module, train: TrainConfig, steps: int, threads: int, *,
                   ground_truth: bool = False) -> Variant:
    """The variant of training `model` for `steps` steps on `threads` threads under `train`:
    `train.channels_last`'s memory format; compiled when `train.accelerate` is `compiled`, or
    `auto`, the rule above says compiling pays back and inductor has a C++ compiler to run;
    bf16 autocast where `nas.engine.precision.trains_in_bf16` says so (`train.precision`, or
    under `auto` its rule, which leaves a `ground_truth` in its recipe's precision)."""
    compiled = may_compile(train, steps, threads)
    if compiled and train.accelerate == "auto":
        compiled = dense_convolutions_with_bn(model)
    return Variant(train.channels_last, compiled, trains_in_bf16(model, train, ground_truth=ground_truth))


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
