"""A gloo rank's part of a PA&DA test, in a module of its own: each spawned rank imports only
what its job needs (torch and `DataImportance`), not the test module's trainer, timm and
torchvision, which cost a rank about three CPU-seconds to import."""
from __future__ import annotations

import torch

from nas.engine.data.importance import DataImportance


def record_half_batches(rank: int, store: str, out: dict) -> None:
    """Four steps of epoch 0 on 32 examples in batches of 8, this rank recording only its half of
    each batch (norm = index / 32); puts the gathered sums and counts in `out[rank]`."""
    importance = DataImportance(32, 8, seed=0, rank=rank, world_size=2)
    norms_of = torch.arange(32, dtype=torch.float32) / 32
    for step in range(4):
        index = importance.order(0)[step * 8:(step + 1) * 8]
        importance.record(0, step, norms_of[index][rank * 4:(rank + 1) * 4])
    out[rank] = (importance.sums.clone(), importance.counts.clone())
