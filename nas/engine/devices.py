"""Device arguments: `cpu`, `cuda` or `cuda:N`, checked against the machine before any work."""
from __future__ import annotations

import re

import torch

from nas.core.errors import ConfigError, clip

_DEVICE = re.compile(r"(cpu|cuda)(?::(\d+))?")


def resolve_device(text: str | torch.device, flag: str = "--device") -> torch.device:
    """The torch device `text` names; `cuda` means the current GPU (`cuda:N` with its index).

    Raises:
        ConfigError: Naming `flag`, for another spelling (`tpu9`, `cpu:1`) or a GPU this
            machine does not have.
    """
    spelled = str(text).strip()
    match = _DEVICE.fullmatch(spelled)
    if match is None or (match.group(1) == "cpu" and match.group(2) is not None):
        raise ConfigError(f"{flag}: {clip(spelled)}: expected cpu, cuda or cuda:N")
    if match.group(1) == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ConfigError(f"{flag}: {spelled}: no CUDA GPU is available on this machine "
                          f"(torch.cuda.is_available() is False); use cpu")
    count = torch.cuda.device_count()
    index = int(match.group(2)) if match.group(2) is not None else torch.cuda.current_device()
    if index >= count:
        raise ConfigError(f"{flag}: {spelled}: this machine has {count} GPU{'s' if count != 1 else ''} "
                          f"(cuda:0 to cuda:{count - 1})")
    return torch.device("cuda", index)
