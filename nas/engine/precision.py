"""bf16 autocast on the CPU: where it is faster, the rule `train.accelerate: auto` follows, the warning.

bf16 autocast pays on a CPU only with bf16 instructions (AVX512-BF16 or AMX: without them
autocast emulates bf16 and is slower) and only for networks whose work is dense matrix
products. Measured on one thread (`python -m benchmarks.bf16_speed`, benchmarks/notes/23-bf16.md; an AMD
EPYC with AVX512-BF16), fp32 ms / bf16 ms of a standalone training step, min / mid / max arch:
cell201 1.39 / 1.15 / 1.41 (faster); MobileNetV3 0.43 / 0.39 / 0.59 (its depthwise convolutions
run slower in bf16); ViT 0.88 / 0.87 / 1.26 (slower but for the max). With oneDNN kept off the
bf16 instructions (ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI) cell201 ran 0.71 / 0.73 / 0.50: hence
the capability check. Test top-1 of bf16 cell201 trainings (shipped recipe, 3 archs x 2 seeds)
was within the fp32 seed spread (-0.21 points on average, benchmarks/notes/23-bf16.md).

So under `auto` a standalone training of an fp32 recipe runs bf16 autocast when this CPU has
bf16 instructions and the network is a batch-normed CNN whose convolutions are all dense
(cell201; not MobileNetV3 nor ViT), on the CPU. That holds for the standalone trainings whose
results are not kept as reference records: the export's fine-tune, the search's finalists.
Ground truths (`nas fidelity`, the committed `benchmarks/ground_truth*` folders) stay fp32 under
`auto`: they are reference measurements that must read the same on every machine, and bf16 is
chosen only on CPUs with bf16 instructions, so an `auto` bf16 ground truth would differ from one
machine to the next (and the committed fp32 records would stop being reused). A recipe may still
ask for bf16 with `train.precision: bf16`. The rule is fixed, never timed at run time: it costs
nothing per run and one seed gives one result on one machine. The supernet trainer keeps
`train.precision` as given and warns on a CPU (`bf16_cpu_warning`).
"""
from __future__ import annotations

import contextlib
import functools
from typing import ContextManager

import torch
from torch import nn

from nas.core.config import TrainConfig

BF16_MEASURED = ("a standalone training step on one thread of a CPU with AVX512-BF16 ran 1.15-1.41x faster than "
                 "fp32 for cell201 archs, 1.7-2.6x slower for MobileNetV3's (depthwise convolutions) and up to "
                 "1.15x slower for ViT's; with its bf16 instructions masked from oneDNN, cell201's ran 1.4-2.0x slower")


def trains_in_bf16(model: nn.Module, train: TrainConfig, *, ground_truth: bool = False) -> bool:
    """Whether a standalone training of `model` under `train` runs bf16 autocast: when
    `train.precision` says bf16, or under `auto` where the rule above says so (never for a
    `ground_truth`, never for a model off the CPU)."""
    if train.precision == "bf16":
        return True
    return (may_choose_bf16(train, ground_truth=ground_truth) and dense_convolutions_with_bn(model)
            and all(p.device.type == "cpu" for p in model.parameters()))


def may_choose_bf16(train: TrainConfig, *, ground_truth: bool = False) -> bool:
    """Whether `trains_in_bf16` may say bf16 for some model though `train.precision` says fp32
    (`auto` on a CPU with bf16 instructions, not a ground truth; the model decides then)."""
    return train.accelerate == "auto" and train.precision == "fp32" and not ground_truth and cpu_has_bf16()


def dense_convolutions_with_bn(model: nn.Module) -> bool:
    """Whether `model` is a convolutional network with batch norm whose convolutions are all dense."""
    modules = list(model.modules())
    convs = [m for m in modules if isinstance(m, nn.Conv2d)]
    return bool(convs) and all(m.groups == 1 for m in convs) and any(isinstance(m, nn.BatchNorm2d) for m in modules)


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


def bf16_autocast(bf16: bool, device_type: str = "cpu") -> ContextManager:
    """The context a bf16 training's forward pass runs in (autocast to bfloat16), or a no-op."""
    return torch.autocast(device_type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()


def bf16_cpu_warning() -> str:
    """What `train.precision: bf16` on a CPU is warned with: what was measured, and this CPU's case."""
    return (f"train.precision: bf16 autocast on CPU is often slower than fp32; measured (benchmarks/notes/23-bf16.md): "
            f"{BF16_MEASURED}; this CPU {'has' if cpu_has_bf16() else 'lacks'} bf16 instructions")
