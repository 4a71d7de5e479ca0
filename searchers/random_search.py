"""`random`: uniform random search, the baseline every other searcher is measured against.

The runner rejects infeasible and already evaluated proposals, so the evaluated archs are
rejection-sampled feasible, distinct architectures (Li & Talwalkar, "Random Search and
Reproducibility for NAS", 2019). When the runner can list the feasible archs of a small
space, draws come uniformly from the feasible archs not evaluated yet (nothing is rejected).
"""
from __future__ import annotations

import random

from nas.core.arch import Arch
from nas.core.registry import SEARCHERS, NoOptions
from searchers.base import ReplaySearcher


@SEARCHERS.register("random", options=NoOptions)
class RandomSearcher(ReplaySearcher):
    """Uniform draws; every draw is a pure function of (seed, evaluations, attempt)."""

    name = "random"

    def propose(self, rng: random.Random) -> Arch:
        return self.random_arch(rng)
