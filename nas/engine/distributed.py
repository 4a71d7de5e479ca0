"""Process-group facts for DDP under torchrun (rank, world size, device) and small helpers.

`torchrun` sets RANK, WORLD_SIZE, LOCAL_RANK and MASTER_ADDR/PORT; `nas train` detects them.
Backend `nccl` on CUDA, `gloo` on CPU. Only rank 0 writes checkpoints, TensorBoard and logs.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


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


def detect() -> DistEnv:
    """The torchrun environment (one process on CPU, or cuda:0 when available, without it)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    device = f"cuda:{local}" if torch.cuda.is_available() else "cpu"
    return DistEnv(rank, world, local, device)


def init_process_group(env: DistEnv) -> None:
    """Join the torchrun process group (no-op for one process)."""
    if not env.enabled or dist.is_initialized():
        return
    if env.device.startswith("cuda"):
        torch.cuda.set_device(env.local_rank)
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
