"""The strategy protocol: what one training step does, and which module serves an arch.

A strategy owns `model`, the trainable module (the supernet, or sub-supernets behind a
router) whose `forward` runs the currently activated arch. The trainer owns optimisation,
precision, DDP and checkpoints; it hands the strategy a `StepIO` so the strategy never needs
to know whether the model is wrapped in DistributedDataParallel.
"""
from __future__ import annotations

import abc
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch
from torch import nn

from nas.core.arch import Arch


@dataclass
class StepIO:
    """How a strategy runs passes inside the trainer.

    Attributes:
        forward: Runs the (possibly DDP-wrapped) model on a batch.
        pass_context: `pass_context(final)` wraps one forward/backward pass; under DDP the
            non-final passes of a step skip gradient synchronisation (`no_sync`), so the
            summed gradients of all subnets are all-reduced once.
        all_reduce_mean: Averages a float tensor over ranks (identity on one process); data-
            driven samplers reduce their scores with it so every rank picks the same subnet.
    """

    forward: Callable[[torch.Tensor], torch.Tensor]
    pass_context: Callable[[bool], AbstractContextManager]
    all_reduce_mean: Callable[[torch.Tensor], torch.Tensor]


class Strategy(abc.ABC):
    """Base of training strategies (one-shot; few-shot and mixture plug in the same way)."""

    model: nn.Module

    @abc.abstractmethod
    def activate(self, arch: Mapping[str, Any]) -> Arch:
        """Make `arch` the subnet that `model.forward` runs; returns its canonical form."""

    @abc.abstractmethod
    def train_step(self, images: torch.Tensor, labels: torch.Tensor, step: int, io: StepIO) -> dict[str, float]:
        """Forward and backward every subnet of `step` (gradients summed); returns losses to log."""

    @abc.abstractmethod
    def subnet_for(self, arch: Mapping[str, Any]) -> nn.Module:
        """The module that computes `arch` (with `arch` active); what evaluation and export use."""

    @abc.abstractmethod
    def monitored_archs(self) -> dict[str, Arch]:
        """Archs whose validation accuracy is logged at each epoch end (e.g. min, mid, max)."""

    def anchor_archs(self) -> list[Arch]:
        """Archs trained at every step (e.g. the sandwich rule's max and min): a search
        evaluates the feasible ones first, so it never returns worse than them. Default: none."""
        return []

    def set_cache_dir(self, path: Path | None) -> None:
        """Let the strategy cache tables that are pure functions of the config in `path` (the
        run directory in training); by default nothing is cached."""
        del path

    def state_dict(self) -> dict:
        """Strategy state beyond the model weights (tensors, lists and primitives only)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore `state_dict()`."""
        del state

    @abc.abstractmethod
    def trained_archs(self, step: int) -> Sequence[Arch]:
        """The archs step `step` trains (for tests and logs)."""
