"""The strategy protocol: how a supernet is built and trained, and which module serves an arch.

A strategy builds and owns `model`, the trainable module (one supernet, or several
sub-supernets behind a router) from the space, its options and the seed; `model.forward`
runs the arch last activated. The trainer owns optimisation, precision, DDP and checkpoints:
it asks the strategy for its parameter groups, hands each step a `StepIO` (so the strategy
never needs to know whether the model is wrapped in DistributedDataParallel), and calls
`after_step`, which may restructure the model (a few-shot split): the trainer then rebuilds
the DDP wrapper, the optimiser and the scheduler around the new parameters.

Checkpoints hold `model_state_dict()` and `state_dict()`. Both `nas train --resume` and
`nas.load_run` build the strategy first, then call `restore_strategy`: the strategy state
(which may rebuild structure) before the weights.
"""
from __future__ import annotations

import abc
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch
from torch import nn

from nas.core.arch import Arch
from search_spaces.base import ArchSpace, Supernet
from supernets.samplers import Sampler

Batches = list[tuple[torch.Tensor, torch.Tensor]]


@dataclass
class StepIO:
    """How a strategy runs passes inside the trainer.

    Attributes:
        forward: Runs the (possibly DDP-wrapped) model on a batch.
        pass_context: `pass_context(final)` wraps one forward/backward pass; under DDP the
            non-final passes of a step skip gradient synchronisation (`no_sync`), so the
            summed gradients of all subnets are all-reduced once.
        all_reduce_mean: Averages a float tensor over ranks (identity on one process); data-
            driven decisions reduce their scores with it so every rank decides alike.
        batches: `batches(split, count, key)`: `count` normalised batches of the `train` or
            `val` split on the model's device, a pure function of (seed, split, key), the
            same on every rank (for probes such as gradient matching; not for training).
        steps_per_epoch: Optimiser steps in one epoch (strategies that act at epoch ends).
        schedule_steps: Steps of the run's learning-rate schedule (`train.steps`, or
            `train.epochs` epochs): its length before `Strategy.total_steps` lengthens it.
        total_steps: Optimiser steps of the whole run (0: unknown), for schedules over the run.
        record_logits: `record_logits(logits, labels)`, where the run samples its data by
            importance (`data.sampling: pada`): the strategy hands it, once per step, the
            detached logits of one trained path on this rank's batch (None: nothing asked).
        rank, world_size: This process's place in the job, so a probe can share its batches
            out (each rank takes every `world_size`-th) and all-reduce what it measured.
    """

    forward: Callable[[torch.Tensor], torch.Tensor]
    pass_context: Callable[[bool], AbstractContextManager]
    all_reduce_mean: Callable[[torch.Tensor], torch.Tensor]
    batches: Callable[[str, int, str], Batches] = field(default=lambda split, count, key: [])
    steps_per_epoch: int = 1
    schedule_steps: int = 1
    total_steps: int = 0
    record_logits: Callable[[torch.Tensor, torch.Tensor], None] | None = None
    rank: int = 0
    world_size: int = 1


@dataclass(frozen=True)
class Restructure:
    """What `after_step` changed: new parameters, and where their values were copied from.

    Attributes:
        copied: new parameter -> the old parameter it was copied from; the trainer gives the
            new one a copy of the old one's optimiser state (momentum buffers and the like).
            Parameters that stay the same objects keep their state; new parameters that are
            not listed start with none.
        reason: One line for the log (e.g. `split stage1.block0.kernel_size: [3] | [5, 7]`).
        reset_state: True: every parameter starts without optimiser state, as in a new
            training (a progressive-shrinking phase; channels permuted in place).
        images: TensorBoard tag -> a matrix (2-D tensor) to show as an image (e.g. the
            distance matrices a split was decided from).
        scalars: TensorBoard tag -> a value logged at the restructuring step.
    """

    copied: Mapping[nn.Parameter, nn.Parameter]
    reason: str = ""
    reset_state: bool = False
    images: Mapping[str, torch.Tensor] = field(default_factory=dict)
    scalars: Mapping[str, float] = field(default_factory=dict)


class Strategy(abc.ABC):
    """Base of training strategies (one-shot; few-shot and mixture plug in the same way)."""

    model: nn.Module
    space: ArchSpace
    sampler: Sampler | None = None   # the subnets of each step, where the strategy uses a sampler

    @abc.abstractmethod
    def activate(self, arch: Mapping[str, Any]) -> Arch:
        """Make `arch` the subnet that `model.forward` runs; returns its canonical form."""

    @abc.abstractmethod
    def train_step(self, images: torch.Tensor, labels: torch.Tensor, step: int, io: StepIO) -> dict[str, float]:
        """Forward and backward every subnet of `step` (gradients summed); returns losses to log."""

    @abc.abstractmethod
    def subnet_for(self, arch: Mapping[str, Any]) -> Supernet:
        """The supernet that computes `arch`, with `arch` active (what evaluation and export use)."""

    @abc.abstractmethod
    def monitored_archs(self) -> dict[str, Arch]:
        """Archs whose validation accuracy is logged at each epoch end (e.g. min, mid, max)."""

    @abc.abstractmethod
    def trained_archs(self, step: int) -> Sequence[Arch]:
        """The archs step `step` trains (for tests and logs)."""

    def parameter_groups(self, weight_decay: float) -> list[dict[str, Any]]:
        """Optimiser parameter groups: no weight decay on biases and normalisation parameters
        (timm's rule: every parameter of at most one dimension)."""
        from timm.optim import param_groups_weight_decay

        return param_groups_weight_decay(self.model, weight_decay)

    def total_steps(self, io: StepIO) -> int:
        """Optimiser steps of the run for a schedule of `io.schedule_steps` steps (default: as
        many). A strategy whose sub-supernets each train the rest of the schedule takes more;
        the trainer asks again after every restructuring. Raises `ConfigError` for options
        that do not fit the schedule."""
        return io.schedule_steps

    def check_schedule(self, schedule_steps: int, steps_per_epoch: int) -> None:
        """Raise `ConfigError` naming the key when the strategy's options cannot fit a schedule of
        `schedule_steps` steps (`steps_per_epoch` an epoch); `nas train` asks before it creates
        the run folder. Default: nothing depends on the schedule."""
        del schedule_steps, steps_per_epoch

    def schedule_step(self, step: int, io: StepIO) -> float:
        """The learning-rate schedule's position at optimiser step `step` (default: `step`);
        epochs end where it crosses a multiple of `io.steps_per_epoch`."""
        del io
        return step

    def lr_step(self, step: int, io: StepIO) -> float:
        """The position the learning rate is read at for optimiser step `step` (default: the
        schedule's, `schedule_step`); a strategy that restarts the rate for fresh weights
        (few-shot's re-initialised children) counts it from its restart."""
        return self.schedule_step(step, io)

    def lr_factor(self, step: int, io: StepIO) -> float | None:
        """The learning rate of optimiser step `step` as a fraction of `train.optimizer.lr`, for a
        strategy with its own schedule (progressive shrinking's phases); None (default): the
        run's scheduler decides."""
        del step, io
        return None

    def describe(self) -> str:
        """One line the run's log starts with (e.g. a strategy's phases); default: none."""
        return ""

    def after_step(self, step: int, io: StepIO) -> Restructure | None:
        """Called after optimiser step `step - 1` completed (`step` steps are done); a strategy
        that restructures its model returns what changed, else None. Every rank must take the
        same decision (reduce data-driven scores with `io.all_reduce_mean`)."""
        del step, io
        return None

    def anchor_archs(self) -> list[Arch]:
        """Archs trained at every step (e.g. the sandwich rule's max and min), which the strategy
        contract checks. A search by the supernet's own measurement evaluates those within its
        budgets first (`SearchRequest.first`); other scores give them no privilege.
        Default: the sampler's (`Sampler.anchors`), none for a strategy without a sampler."""
        return self.sampler.anchors() if self.sampler is not None else []

    def sub_spaces(self) -> list[tuple[dict[str, tuple], ArchSpace]]:
        """(split values, space) of every sub-supernet, in routing order: the whole space for
        a strategy with one supernet."""
        return [({}, self.space)]

    def set_cache_dir(self, path: Path | None) -> None:
        """Let the strategy cache tables that are pure functions of the config in `path` (the
        run directory in training); by default nothing is cached."""
        del path

    def model_state_dict(self) -> dict[str, Any]:
        """The weights (and buffers) of every model the strategy owns."""
        return self.model.state_dict()

    def load_model_state_dict(self, state: Mapping[str, Any]) -> None:
        """Load `model_state_dict()` (after `load_state_dict`, which may rebuild structure)."""
        self.model.load_state_dict(state)

    def state_dict(self) -> dict:
        """Strategy state beyond the weights (tensors, lists and primitives only)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore `state_dict()`; may rebuild the model's structure (before weights load)."""
        del state


def restore_strategy(strategy: Strategy, checkpoint: Mapping[str, Any]) -> None:
    """Load a checkpoint's `strategy` state, then its `model` weights, into a built strategy."""
    strategy.load_state_dict(checkpoint.get("strategy", {}))
    strategy.load_model_state_dict(checkpoint["model"])


@contextmanager
def preserved_buffers(module: nn.Module) -> Iterator[None]:
    """Inside, passes may update batch-norm statistics and the like; on exit every buffer of
    `module` holds its value from before (probes and generators leave no trace on the model)."""
    saved = {name: b.clone() for name, b in module.named_buffers()}
    try:
        yield
    finally:
        for name, b in module.named_buffers():
            b.copy_(saved[name])


def seeded_supernet(space: ArchSpace, seed: int) -> Supernet:
    """A freshly initialised supernet of `space`, seeded by `seed` (global RNG state untouched)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return space.build_supernet()
