"""`attentive`: AttentiveNAS BestUp/WorstUp sampling inside the sandwich rule.

Paper: Wang et al., "AttentiveNAS: Improving Neural Architecture Search via Attentive
Sampling", CVPR 2021. The max and min slots stay; each random slot instead:

1. draws a target MACs bin tau from the table's prior (`supernets.attentive_table`);
2. draws k candidates, each by drawing every choice from its distribution in bin tau, up to
   `tries` times until the arch falls in tau (the last draw is kept otherwise);
3. scores the candidates by their label-smoothed loss on the current mini-batch (no weight or
   buffer changes; under DDP the losses are all-reduced) and trains the lowest-loss one
   (`mode: best`, BestUp) or the highest-loss one (`mode: worst`, WorstUp).

Steps 1-2 are a pure function of (seed, step, slot), so every rank draws the same candidates
and, choosing from the same all-reduced losses, trains the same subnet. With k = 1 nothing
is scored: MACs-stratified sampling.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from nas.core.arch import Arch
from nas.core.errors import ConfigError
from nas.core.registry import SAMPLERS
from nas.core.rng import python_rng
from supernets.attentive_table import BinnedTable
from supernets.samplers import SandwichSampler, ScoreFn


@dataclass(frozen=True)
class AttentiveOptions:
    num_random: int = 2          # attentive slots between max and min: 2 + num_random passes a step
    mode: Literal["best", "worst"] = "best"   # train the lowest-loss (BestUp) or highest-loss candidate
    k: int = 3                   # candidates scored per slot (1: MACs-stratified, nothing scored)
    bins: int = 16               # equal-width MACs bins between the min and max archs
    tries: int = 100             # draws per candidate to land in the target bin
    table_size: int = 2000       # uniformly sampled archs behind the bin prior
    table_fill: int = 20         # distinct archs a reachable bin is topped up to ...
    table_tries: int = 500       # ... with at most this many mutation attempts per bin

    def __post_init__(self) -> None:
        problems = []
        minimums = {"num_random": 1, "k": 1, "bins": 2, "tries": 1, "table_size": 1, "table_fill": 0,
                    "table_tries": 0}
        for key, low in minimums.items():
            if getattr(self, key) < low:
                problems.append(f"{key}: must be >= {low}, got {getattr(self, key)}")
        if problems:
            raise ConfigError(problems)


@SAMPLERS.register("attentive", options=AttentiveOptions)
class AttentiveSampler(BinnedTable, SandwichSampler):
    """Sandwich rule whose random slots are picked by BestUp/WorstUp among k MACs-binned candidates.

    The table is built on first use, in memory or cached in `cache_dir` (the run directory
    in training). Without a `score` callback (`trained_archs`), each slot takes its first
    candidate, so those archs differ from what training trains when k > 1.
    """

    trains_max = True

    def candidates(self, step: int, slot: int) -> tuple[int, list[Arch]]:
        """The target bin and the k candidates of random slot `slot` at `step`."""
        rng = python_rng(self.seed, "attentive", step, slot)
        table = self.table
        target = table.draw_bin(rng)
        return target, [table.draw_in(target, rng, self.options.tries) for _ in range(self.options.k)]

    def random_archs(self, step: int, score: ScoreFn | None) -> list[Arch]:
        slots = [self.candidates(step, i)[1] for i in range(self.options.num_random)]
        if self.options.k == 1 or score is None:
            return [candidates[0] for candidates in slots]
        losses = list(score([arch for candidates in slots for arch in candidates]))  # one all-reduce
        pick = min if self.options.mode == "best" else max
        chosen = []
        for i, candidates in enumerate(slots):
            mine = losses[i * self.options.k:(i + 1) * self.options.k]
            chosen.append(candidates[pick(range(len(mine)), key=mine.__getitem__)])
        return chosen
