"""Which torch device a command computes on: `--device cpu|cuda|cuda:N`, checked before any work."""
from __future__ import annotations

import contextlib
import platform
import re
from pathlib import Path
from typing import Iterator

import torch
from torch import nn

from nas.core.errors import ConfigError, clip

_DEVICE = re.compile(r"(cpu|cuda)(?::(\d+))?")


def resolve_device(text: str | torch.device | None, flag: str = "device") -> torch.device:
    """`cpu`, `cuda` or `cuda:N` as a usable device; None means `cuda` when available, else `cpu`.

    `cuda` without an index is the current CUDA device (cuda:0 unless the process chose another),
    so the result always carries an index for CUDA.

    Raises:
        ConfigError: naming `flag` for a malformed device, or a CUDA device this machine lacks.
    """
    if text is None:
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    match = _DEVICE.fullmatch(str(text).strip())
    if match is None or (match.group(1) == "cpu" and match.group(2) is not None):
        raise ConfigError(f"{flag}: {clip(str(text))!r} is not a device; use cpu, cuda or cuda:N")
    if match.group(1) == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ConfigError(f"{flag}: {text}: CUDA is not available here (torch {torch.__version__}, "
                          "torch.cuda.is_available() is False); use {device=cpu}")
    count = torch.cuda.device_count()
    index = int(match.group(2)) if match.group(2) is not None else torch.cuda.current_device()
    if index >= count:
        raise ConfigError(f"{flag}: {text}: this machine has {count} CUDA device{'s' if count != 1 else ''} "
                          f"(cuda:0 to cuda:{count - 1})")
    return torch.device("cuda", index)


def module_device(module: nn.Module) -> torch.device:
    """The device of `module`'s first parameter (or buffer); CPU for a module with neither."""
    for tensor in module.parameters():
        return tensor.device
    for tensor in module.buffers():
        return tensor.device
    return torch.device("cpu")


@contextlib.contextmanager
def exact_float32(device: torch.device) -> Iterator[None]:
    """No TF32 inside on CUDA (convolutions and matmuls use it by default on recent GPUs), so
    two float32 computations of the same function agree to float32 rounding."""
    if device.type != "cuda":
        yield
        return
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def cpu_model() -> str:
    """The CPU model name (from /proc/cpuinfo on Linux)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
