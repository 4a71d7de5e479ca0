"""What an estimator is: a score per architecture that predicts its standalone accuracy.

Estimators rank candidate subnets: the trained supernet's own accuracy (`supernet`), free
baselines (`macs`, `params`), zero-cost proxies computed on a freshly initialised export
(`synflow`, `naswot`, ...), a rank fusion of several, or a model calibrated on a fidelity
ground truth. Every estimator answers for a list of archs at once (`scores`), because some
are defined relative to a population (a fusion of ranks) and most are cheaper in a batch.
Higher scores mean "predicted more accurate"; a score is deterministic for a context.

`nas fidelity` reports each estimator's rank agreement with standalone training beside the
supernet's, and `nas search --score NAME` ranks candidates by any of them.
"""
from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from nas.core.arch import Arch
from search_spaces.base import ArchSpace

Batch = tuple[torch.Tensor, torch.Tensor]

# The fixed training batches (count, images each) that `nas search` and `nas fidelity` give
# data-reading estimators, so a score means the same in both.
ESTIMATOR_BATCHES, ESTIMATOR_BATCH_SIZE = 2, 64


@dataclass
class EstimatorContext:
    """What estimators may read; each uses only what it needs (`Estimator.needs`).

    Attributes:
        space: The architecture space.
        batches: Fixed batches of the run's training data (normalised images at the data's
            native size, int labels), the same for every arch: what data-dependent proxies
            read (resize to `space.input_size(arch)` before the forward pass). At least two.
        supernet_top1: The run's BN-recalibrated top-1 of an arch (validation split for a
            search, test split for `nas fidelity`); None without a trained run.
        init_seeds: Proxies average over this many fresh initialisations (seeds 0..n-1
            derived with `seed`).
        seed: Base seed of initialisations and of anything else random.
        run_dir: The run's folder (where a calibrated model is stored), or None.
    """

    space: ArchSpace
    batches: Sequence[Batch] = ()
    supernet_top1: Callable[[Arch], float] | None = None
    init_seeds: int = 3
    seed: int = 0
    run_dir: Path | None = None
    cache: dict = field(default_factory=dict, repr=False)   # per-context memo (e.g. seeded supernets)


class Estimator(abc.ABC):
    """A ranking score of archs; subclasses register with `@ESTIMATORS.register(name)`.

    Class attributes:
        name: The registered name.
        needs: Context fields it reads: "batches", "supernet_top1", "run_dir".
        cheap: Under a second per arch on a 2-core CPU for the shipped Fashion-MNIST spaces
            (BENCHMARKS.md measures it); `nas fidelity` reports the cheap ones by default.
        population: True when an arch's score depends on the other archs scored with it
            (a rank fusion); a search then re-scores its whole population.
    """

    name: str = ""
    needs: frozenset[str] = frozenset()
    cheap: bool = True
    population: bool = False

    @abc.abstractmethod
    def scores(self, archs: Sequence[Arch], context: EstimatorContext) -> list[float]:
        """One score per arch, in order; higher means predicted more accurate."""

    def score(self, arch: Arch, context: EstimatorContext) -> float:
        """The score of one arch (only for estimators whose `population` is False)."""
        return self.scores([arch], context)[0]

    def check(self, context: EstimatorContext) -> None:
        """Raise a one-line error when it cannot score in `context` (a model not fitted yet),
        so that a search refuses before it makes its folder; by default nothing to check."""
        del context
