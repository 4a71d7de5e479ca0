"""Process-group facts for DDP under torchrun (rank, world size, device) and small helpers.

`torchrun` sets RANK, WORLD_SIZE, LOCAL_RANK and MASTER_ADDR/PORT; `nas train` detects them.
Each rank computes on `cuda:LOCAL_RANK` with backend `nccl` when CUDA is chosen, on the CPU with
`gloo` otherwise. Only rank 0 writes checkpoints, TensorBoard and logs.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from nas.core.errors import ConfigError
from nas.engine.devices import resolve_device


@dataclass(frozen=True)
class DistEnv:
    """Where this process sits in the job."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: str = "cpu"

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def detect(device: str | torch.device | None = None) -> DistEnv:
    """The torchrun environment and this process's device.

    Args:
        device: `--device` as given (None: cuda when available, else cpu). Under torchrun a
            CUDA choice means `cuda:LOCAL_RANK`, so it must not name an index.

    Raises:
        ConfigError: naming `device` when the device is unusable.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    chosen = resolve_device(device)
    if world > 1 and chosen.type == "cuda":
        if device is not None and ":" in str(device):
            raise ConfigError(f"device: {device}: under torchrun each rank uses cuda:LOCAL_RANK; "
                              "pass {device=cuda} (or cpu)")
        chosen = resolve_device(f"cuda:{local}", f"device (LOCAL_RANK {local})")
    return DistEnv(rank, world, local, str(chosen))


def init_process_group(env: DistEnv) -> None:
    """Make `env.device` this process's CUDA device (if CUDA) and join the torchrun process
    group (no-op for one process)."""
    if env.device.startswith("cuda"):
        torch.cuda.set_device(torch.device(env.device))
    if not env.enabled or dist.is_initialized():
        return
    dist.init_process_group("nccl" if env.device.startswith("cuda") else "gloo")


def all_reduce_mean(tensor: torch.Tensor) -> torch.Tensor:
    """Mean of `tensor` over ranks (the tensor itself on one process)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return tensor
    reduced = tensor.detach().clone()
    dist.all_reduce(reduced)
    return reduced / dist.get_world_size()


def barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
