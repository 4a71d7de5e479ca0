"""Training samplers: which subnets a step trains (SPOS uniform, BigNAS sandwich rule).

The subnets of step t are a pure function of (seed, t) and of the sampler's state, so a
resumed run and every DDP rank draw the same ones without communicating. After each step the
strategy hands the sampler `observe(StepFeedback)`: the slots it trained and their losses. A
sampler that learns (bin probabilities, a generator network) keeps its parameters and their
optimiser in its own state (`state_dict` holds tensors and plain data), updates them in
`observe` from values every rank agrees on, and so resumes exactly.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from nas.core.arch import Arch
from nas.core.errors import ConfigError
from nas.core.registry import SAMPLERS, NoOptions
from nas.core.rng import python_rng
from search_spaces.base import ArchSpace

# Scores candidate archs on the current batch (lower loss is better); only data-driven
# samplers call it. Under DDP it returns scores already all-reduced across ranks.
ScoreFn = Callable[[Sequence[Arch]], Sequence[float]]


@dataclass(frozen=True)
class Slot:
    """One subnet of a training step: its role (`max`, `min`, `random0`, ...) and arch."""

    role: str
    arch: Arch


@dataclass(frozen=True)
class StepFeedback:
    """What a training step did: its slots and each one's loss on this rank's batch.

    A sampler that decides from the losses under DDP averages them first with
    `all_reduce_mean` (a collective: every rank calls it alike), so every rank learns the
    same thing. `probe(arch, images, labels)` gives the label loss of any arch on a batch
    without changing weights or buffers; `io` is the step's `supernets.base.StepIO`
    (`io.batches` draws seeded train/val batches, the same on every rank). `subnet_for(arch)`
    returns the live, unwrapped supernet that computes `arch`, with `arch` active: a sampler
    may run its own passes on it (a gradient probe, a generator's task loss) provided it
    leaves weights, gradients and buffers as it found them.
    """

    step: int
    slots: Sequence[Slot]
    losses: Sequence[float]
    probe: Callable[..., float] | None = None
    io: Any = None
    subnet_for: Callable[..., Any] | None = None

    def all_reduce_mean(self, tensor: Any) -> Any:
        """`io.all_reduce_mean` of a tensor that may live on the CPU (a sampler's own state): it
        is moved to the model's device for the collective (NCCL needs it there) and back."""
        if self.io is None:
            return tensor
        device = tensor.device
        if self.subnet_for is not None and self.slots:
            device = next(self.subnet_for(self.slots[-1].arch).parameters()).device
        return self.io.all_reduce_mean(tensor.to(device)).to(tensor.device)


class Sampler(abc.ABC):
    """Picks the subnets of each training step."""

    trains_max = False   # whether every step trains the max subnet first (the KD teacher)
    cache_dir: Path | None = None   # where tables derived from the config may be cached (the run dir)
    splittable = True    # False: learnt state fitted to the whole space, which a few-shot split cannot divide

    def __init__(self, space: ArchSpace, options: object, seed: int):
        self.space, self.options, self.seed = space, options, seed

    @abc.abstractmethod
    def slots(self, step: int, score: ScoreFn | None = None) -> list[Slot]:
        """The subnets to train at `step`, teacher (if any) first."""

    def anchors(self) -> list[Arch]:
        """Archs this sampler trains at every step (a search by the supernet evaluates them first)."""
        return []

    def observe(self, feedback: StepFeedback) -> None:
        """Learn from a finished step (before the optimiser step); by default nothing."""
        del feedback

    def logs(self) -> dict[str, float]:
        """Scalars to log after the step (TensorBoard `train/<key>`); by default none."""
        return {}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        del state


@SAMPLERS.register("uniform", options=NoOptions)
class UniformSampler(Sampler):
    """Single path one-shot (SPOS): one uniformly drawn subnet per step."""

    def slots(self, step: int, score: ScoreFn | None = None) -> list[Slot]:
        return [Slot("random0", self.space.sample(python_rng(self.seed, "uniform", step)))]


@dataclass(frozen=True)
class SandwichOptions:
    num_random: int = 2          # random subnets besides max and min: 2 + num_random passes a step
    max_every: int = 1           # the max subnet every k-th step; the others train one more random subnet instead

    def __post_init__(self) -> None:
        if self.num_random < 0:
            raise ConfigError(f"num_random: must be >= 0, got {self.num_random}")
        if self.max_every < 1:
            raise ConfigError(f"max_every: must be >= 1, got {self.max_every}")


@SAMPLERS.register("sandwich", options=SandwichOptions)
class SandwichSampler(Sampler):
    """BigNAS sandwich rule: the max subnet, `num_random` random ones, then the min subnet.

    `max_every: k` trains the max subnet only at every k-th step (steps 0, k, 2k, ...) and one more
    uniformly drawn subnet in its place at the others: the subnets between min and max, where
    searches under a budget land, get more of the updates (and a step costs less, the max being
    the most expensive pass). At the steps without it, distillation has no teacher and every
    subnet learns from the labels.
    """

    trains_max = True

    def random_archs(self, step: int, score: ScoreFn | None) -> list[Arch]:
        rng = python_rng(self.seed, "sandwich", step)
        return [self.space.sample(rng) for _ in range(self.options.num_random)]

    def anchors(self) -> list[Arch]:
        return [self.space.max(), self.space.min()]

    def slots(self, step: int, score: ScoreFn | None = None) -> list[Slot]:
        randoms = self.random_archs(step, score)
        top = [Slot("max", self.space.max())]
        if step % getattr(self.options, "max_every", 1):
            top = [Slot(f"random{len(randoms)}", self.space.sample(python_rng(self.seed, "instead-of-max", step)))]
        return (top + [Slot(f"random{i}", arch) for i, arch in enumerate(randoms)]
                + [Slot("min", self.space.min())])
