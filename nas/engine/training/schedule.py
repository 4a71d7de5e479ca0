"""The per-iteration learning-rate schedule of supernet and standalone training.

Warm-up is a prefix of the decay: the rate rises linearly from `warmup_lr` to the peak over
the first `warmup_steps` iterations, then the schedule (timm's cosine, tanh, poly, step or
constant) runs over the remaining iterations, so there is no jump at the end of warm-up and
a cosine ends at `min_lr`. A warm-up longer than a tenth of the run is cut to a tenth
(`capped_warmup`): at 312 steps a 200-step warm-up would leave the decay 112 steps.
"""
from __future__ import annotations

from dataclasses import replace

import torch
from timm.scheduler import create_scheduler_v2

from nas.core.config import TrainConfig

MAX_WARMUP_FRACTION = 10     # warm-up is at most total_steps // 10 iterations


def effective_warmup(warmup_steps: int, total_steps: int) -> int:
    """The warm-up iterations a run of `total_steps` uses: at most a tenth of the run."""
    return max(0, min(warmup_steps, total_steps // MAX_WARMUP_FRACTION))


def capped_warmup(config: TrainConfig, total_steps: int) -> tuple[TrainConfig, str | None]:
    """`config` with its warm-up cut to a tenth of `total_steps` where longer, and the line that
    says so (None when nothing changed)."""
    asked = config.scheduler.warmup_steps
    used = effective_warmup(asked, total_steps)
    if used == asked:
        return config, None
    message = (f"train.scheduler.warmup_steps: {asked} is more than a tenth of the run's {total_steps} steps; "
               f"using {used} (recorded in the run's config)")
    return replace(config, scheduler=replace(config.scheduler, warmup_steps=used)), message


def build_scheduler(optimizer: torch.optim.Optimizer, config: TrainConfig, total_steps: int):
    """timm LR schedule stepped every iteration (`step_update(step)`), lengths in iterations:
    `effective_warmup` iterations of linear warm-up, then the decay over the rest."""
    s = config.scheduler
    warmup = effective_warmup(s.warmup_steps, total_steps)
    decay = max(total_steps - warmup, 1)
    scheduler, _ = create_scheduler_v2(
        optimizer, sched=s.name, num_epochs=decay, warmup_epochs=warmup, warmup_prefix=True,
        warmup_lr=s.warmup_lr, min_lr=s.min_lr, decay_rate=s.decay_rate,
        decay_epochs=s.decay_steps if s.decay_steps is not None else max(decay // 3, 1),
        step_on_epochs=False, updates_per_epoch=1)
    return scheduler
