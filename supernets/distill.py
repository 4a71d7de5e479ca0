"""In-place distillation losses: students learn from the max subnet's detached output.

`kl` is AttentiveNAS's soft-target cross-entropy at temperature 1 (`-sum p log q`, the KL up
to the teacher's constant entropy). `none` builds no loss at all: without a distillation
loss the strategy keeps no teacher and trains every subnet on the labels.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from nas.core.errors import ConfigError
from nas.core.registry import DISTILL_LOSSES, NoOptions


class DistillLoss(abc.ABC):
    """`loss(student_logits, teacher_logits, labels) -> (loss, logs)`; the teacher is detached."""

    def __init__(self, options: object):
        self.options = options

    @abc.abstractmethod
    def __call__(self, student: torch.Tensor, teacher: torch.Tensor,
                 labels: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """A student's loss against the teacher's logits, and values to log."""


@DISTILL_LOSSES.register("none", options=NoOptions)
def no_distillation(options: NoOptions) -> None:
    """No distillation loss: every subnet learns from the labels."""
    del options
    return None


@dataclass(frozen=True)
class KLOptions:
    temperature: float = 1.0

    def __post_init__(self) -> None:
        if self.temperature <= 0:
            raise ConfigError(f"temperature: must be > 0, got {self.temperature}")


@DISTILL_LOSSES.register("kl", options=KLOptions)
class SoftTargetKL(DistillLoss):
    """Cross-entropy against the teacher's softened probabilities (gradient equals KL's)."""

    def __call__(self, student, teacher, labels):
        t = self.options.temperature
        target = F.softmax(teacher.detach().float() / t, dim=1)
        log_q = F.log_softmax(student.float() / t, dim=1)
        loss = -(target * log_q).sum(1).mean() * (t * t)
        return loss, {}
