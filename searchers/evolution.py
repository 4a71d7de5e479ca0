"""`evolution`: constraint-aware evolutionary search on arch dicts.

As in OFA/HAT/AttentiveNAS search, with the runner rejecting infeasible and duplicate
proposals (bounded retries) so the population and every child are feasible and distinct:
1. generation 0: `population` random archs, every other one drawn near the budgets
   (`window_arch`: uniform draws seldom reach them, their costs adding up over many choices)
   and the others uniformly;
2. before generation g, parents = the best `parents_ratio x population` of every arch
   evaluated so far (elitist). `mode: single`: highest score; `mode: pareto`: NSGA-II
   order (non-domination rank on the score and the cost objectives, then crowding distance);
3. each child: with `crossover_prob` a per-choice crossover of two parents, else a mutation
   of one parent (each choice moves with `mutation_prob`);
4. a rejected child is redrawn with a higher mutation rate (x(1 + attempt/10)), and after
   `RANDOM_AFTER` rejections in a row a random arch is proposed, so a converged population
   still yields new archs.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace
from typing import Literal

from nas.core.arch import Arch
from nas.core.errors import ConfigError, int_problems
from nas.core.pareto import crowding, objective, ranks
from nas.core.registry import SEARCHERS
from searchers.base import ReplaySearcher, SearchContext

RANDOM_AFTER = 100


@dataclass(frozen=True)
class EvolutionOptions:
    """Options of `evolution`; None defaults are derived from `--trials`."""

    population: int | None = None      # None: trials // 3 within [4, 100], or trials / (generations + 1)
    parents_ratio: float = 0.25        # share of the population kept as parents
    mutation_prob: float = 0.2         # per choice
    crossover_prob: float = 0.5        # share of children made by crossover
    generations: int | None = None     # generations after the first; None: until --trials
    mode: Literal["single", "pareto"] = "single"

    def __post_init__(self) -> None:
        problems = []
        if self.population is not None:
            problems += int_problems(1, population=self.population)
        if not 0 < self.parents_ratio <= 1:
            problems.append(f"parents_ratio: must be in (0, 1], got {self.parents_ratio}")
        for name in ("mutation_prob", "crossover_prob"):
            if not 0 <= getattr(self, name) <= 1:
                problems.append(f"{name}: must be in [0, 1], got {getattr(self, name)}")
        if self.generations is not None and self.generations < 0:
            problems.append(f"generations: must be >= 0, got {self.generations}")
        if problems:
            raise ConfigError(problems)


@SEARCHERS.register("evolution", options=EvolutionOptions)
class EvolutionSearcher(ReplaySearcher):
    """Elitist evolution; single-budget (accuracy) or multi-objective (Pareto) parents."""

    name = "evolution"

    def __init__(self, context: SearchContext, options: EvolutionOptions):
        super().__init__(context, options)
        self._parents_at: dict[int, list[Arch]] = {}

    @classmethod
    def resolve_options(cls, options: EvolutionOptions, trials: int) -> EvolutionOptions:
        if options.population is not None:
            return options
        if options.generations is not None:
            population = math.ceil(trials / (options.generations + 1))
        else:
            # A third of the budget as the random first generation: with 60 evaluations on the
            # default run, trials // 3 beat trials // 5 (median best 90.88% vs 90.68% over 5
            # seeds, benchmarks/notes/03-search-quality.md); a small first generation converges on noise-picked parents.
            population = min(trials, max(4, min(100, trials // 3)))
        return replace(options, population=max(1, population))

    def limit(self) -> int | None:
        if self.options.generations is None:
            return None
        return self.options.population * (self.options.generations + 1)

    def propose(self, rng: random.Random) -> Arch:
        size = self.options.population
        told = len(self.records)
        if self.attempt >= RANDOM_AFTER:
            return self.random_arch(rng)
        if told < size:
            return self.window_arch(rng) if told % 2 else self.random_arch(rng)
        parents = self.parents(told // size * size)
        prob = min(1.0, self.options.mutation_prob * (1 + self.attempt / 10))
        if len(parents) >= 2 and rng.random() < self.options.crossover_prob:
            first, second = rng.sample(parents, 2)
            child = self.space.crossover(first, second, rng)
            return self.space.mutate(child, prob, rng) if self.attempt else child
        return self.space.mutate(rng.choice(parents), prob, rng)

    def parents(self, start: int) -> list[Arch]:
        """Parents of the generation that begins after `start` evaluations."""
        if start not in self._parents_at:
            pool = self.records[:start]
            count = min(len(pool), max(2, round(self.options.parents_ratio * self.options.population)))
            if self.options.mode == "single":
                order = sorted(pool, key=lambda r: (-objective(r), r["macs"], r["trial"]))
            else:
                points = [(-objective(r), *(r[c] for c in self.context.costs)) for r in pool]
                rank = ranks(points)
                spread = [0.0] * len(pool)
                for level in sorted(set(rank)):
                    members = [i for i in range(len(pool)) if rank[i] == level]
                    for i, d in zip(members, crowding([points[i] for i in members])):
                        spread[i] = d
                order = [pool[i] for i in sorted(range(len(pool)), key=lambda i: (rank[i], -spread[i], i))]
            self._parents_at[start] = [dict(r["arch"]) for r in order[:count]]
        return self._parents_at[start]
