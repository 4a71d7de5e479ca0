"""How a standalone training runs: memory format, compilation and precision (`train.accelerate`).

Kernels change the last bits of a training, so the variant is chosen by a fixed rule of
(model, recipe, length, threads, the CPU's instruction set), never by timing at run time: one
seed gives one result on one machine. `eager` keeps the plain loop in the memory format
`train.channels_last` says and the precision `train.precision` says; `compiled` also runs
forward and backward through `torch.compile` (inductor); `auto` applies the rules of
`choose_variant`: compiling when it pays back, and bf16 autocast instead of fp32 where this CPU
has bf16 instructions and the model is of the kind measured faster with it.
"""
from __future__ import annotations

import functools
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

# `auto` trains under bf16 autocast a recipe that says fp32 when the CPU has bf16 instructions
# (AVX512-BF16 or AMX: without them autocast emulates bf16 and is slower) and the network is of
# the kind measured faster with it: dense (not grouped) convolutions with batch norm, i.e. cell201.
# Measured on one thread (benchmarks/bf16_speed.py, BENCHMARKS.md §23; an AMD EPYC with
# AVX512-BF16), fp32 ms / bf16 ms of a standalone training step, min / mid / max arch:
# cell201 1.39 / 1.15 / 1.41 (faster); MobileNetV3 0.43 / 0.39 / 0.59 (its depthwise convolutions
# run slower in bf16); ViT 0.88 / 0.87 / 1.26 (slower but for the max): both stay fp32. With
# oneDNN kept off the bf16 instructions (ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI) cell201 ran
# 0.71 / 0.73 / 0.50: hence the capability check. Test top-1 of bf16 cell201 trainings (shipped
# recipe, 3 archs x 2 seeds) was within the fp32 seed spread (-0.21 points on average, §23).
BF16_MEASURED = ("a standalone training step on one thread of a CPU with AVX512-BF16 ran 1.15-1.41x faster than "
                 "fp32 for cell201 archs, 1.7-2.6x slower for MobileNetV3's (depthwise convolutions) and up to "
                 "1.15x slower for ViT's; with its bf16 instructions masked from oneDNN, cell201's ran 1.4-2.0x slower")


def choose_variant(model: nn.Module, train: TrainConfig, steps: int, threads: int) -> Variant:
    """The variant of training `model` for `steps` steps on `threads` threads under `train`:
    `train.channels_last`'s memory format; compiled when `train.accelerate` is `compiled`, or
    `auto`, the rule above says compiling pays back and inductor has a C++ compiler to run;
    bf16 when `train.precision` says so, or under `auto` where the bf16 rule above says so."""
    compiled = may_compile(train, steps, threads)
    bf16, choose_bf16 = train.precision == "bf16", may_choose_bf16(train)
    if train.accelerate == "auto" and (compiled or choose_bf16):
        dense = dense_convolutions_with_bn(model)
        compiled, bf16 = compiled and dense, bf16 or (choose_bf16 and dense)
    return Variant(train.channels_last, compiled, bf16)


def dense_convolutions_with_bn(model: nn.Module) -> bool:
    """Whether `model` is a convolutional network with batch norm whose convolutions are all dense."""
    modules = list(model.modules())
    convs = [m for m in modules if isinstance(m, nn.Conv2d)]
    return bool(convs) and all(m.groups == 1 for m in convs) and any(isinstance(m, nn.BatchNorm2d) for m in modules)


def may_choose_bf16(train: TrainConfig) -> bool:
    """Whether `choose_variant` may train some model under `train` in bf16 though `train.precision`
    says fp32 (`auto` on a CPU with bf16 instructions; the model decides then)."""
    return train.accelerate == "auto" and train.precision == "fp32" and cpu_has_bf16()


def may_compile(train: TrainConfig, steps: int, threads: int) -> bool:
    """Whether `choose_variant` may compile some model under `train` for `steps` steps on
    `threads` threads (under `auto`, the model decides then): False means eager for every model."""
    if train.accelerate != "auto":
        return train.accelerate == "compiled"
    return steps >= COMPILE_MIN_STEPS_PER_THREAD * max(1, threads) and has_cpp_compiler()


def has_cpp_compiler() -> bool:
    """Whether a C++ compiler that inductor's CPU code needs is on PATH (`$CXX`, g++, clang++)."""
    return any(shutil.which(name) for name in (os.environ.get("CXX"), "g++", "clang++") if name)


@functools.cache
def cpu_has_bf16() -> bool:
    """Whether this CPU has bf16 instructions (AVX512-BF16 or AMX), which bf16 autocast's
    matrix kernels need to beat fp32: torch's own check, else /proc/cpuinfo's flags."""
    checks = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    if all(callable(check) for check in checks):
        return any(check() for check in checks)
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            flags = {flag for line in cpuinfo if line.startswith("flags") for flag in line.split(":", 1)[1].split()}
    except OSError:
        return False
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def bf16_cpu_warning() -> str:
    """What `train.precision: bf16` on a CPU is warned with: what was measured, and this CPU's case."""
    return (f"train.precision: bf16 autocast on CPU is often slower than fp32; measured (BENCHMARKS.md §23): "
            f"{BF16_MEASURED}; this CPU {'has' if cpu_has_bf16() else 'lacks'} bf16 instructions")


def forward_of(model: nn.Module, variant: Variant) -> Callable[[torch.Tensor], torch.Tensor]:
    """What the training loop calls: `model` itself, or its compiled forward (same parameters)."""
    return torch.compile(model, dynamic=False) if variant.compiled else model
