"""`generator`: evaluate a trained architecture generator's proposals under the budgets.

For runs trained with `strategy.sampler: {name: shiftnas, generator: true}`. The generator is
conditioned on the MACs budget (the max subnet's MACs without one). The first proposal is
`nas generate --seed S`'s answer (the search seed is S); later
ones are Gumbel draws from its logits for fresh noise, at `temperature` times (1 + proposals
rejected since the last evaluation), so duplicates make the draws more diverse. A proposal
over the MACs budget is shrunk to fit (`ArchSpace.shrink`); other budgets are checked by the
runner as for every searcher. Every draw is a pure function of (seed, evaluations, attempt),
so a resumed search continues exactly.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import torch

from nas.core.arch import Arch, arch_id
from nas.core.errors import ConfigError
from nas.core.registry import SEARCHERS
from searchers.base import ReplaySearcher, SearchContext


@dataclass(frozen=True)
class GeneratorSearchOptions:
    temperature: float = 1.0   # Gumbel temperature of the draws after the first proposal

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise ConfigError(f"temperature: must be > 0, got {self.temperature}")


@SEARCHERS.register("generator", options=GeneratorSearchOptions)
class GeneratorSearcher(ReplaySearcher):
    """Proposals of the run's architecture generator for the MACs budget."""

    name = "generator"

    def __init__(self, context: SearchContext, options: Any):
        if context.generator is None:
            raise ConfigError("searcher generator: the run has no architecture generator (train it with "
                              "strategy.sampler: {name: shiftnas, generator: true})")
        super().__init__(context, options)
        self.target = context.budgets.get("macs", self.space.macs(self.space.max()))
        self._answer: Arch | None = None

    def propose(self, rng: random.Random) -> Arch:
        generator = self.context.generator
        if self.attempt == 0 and arch_id(self.space.canonical(self._fitted(self.answer()))) not in self.index:
            arch = self.answer()        # first, unless evaluated (e.g. queued first as an anchor)
        else:
            noise = torch.Generator()
            noise.manual_seed(rng.getrandbits(63))
            arch = generator.propose(self.target, noise, sample=True,
                                     temperature=self.options.temperature * (1 + self.attempt))
        return self._fitted(arch)

    def answer(self) -> Arch:
        """The generator's answer for the budget (computed once)."""
        if self._answer is None:
            self._answer = self.context.generator.generate(self.target, self.context.seed)[0]
        return self._answer

    def _fitted(self, arch: Arch) -> Arch:
        """`arch` shrunk to the MACs budget when it breaks it."""
        if "macs" in self.context.budgets and self.space.macs(arch) > self.target:
            arch = self.space.shrink(arch, self.target)
        return arch
