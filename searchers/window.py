"""Draws near the budgets: the window every searcher's first proposals partly come from.

A space's costs add up over many choices, so uniform draws seldom reach a budget. `WindowDraws`
draws an arch within the search's window (`SearchContext.window`: cost name -> (low, high)):
from the unseen feasible archs inside it when the space is small enough to list them, else a
uniform draw mutated step by step towards it. Evolution's first generation and the Optuna
searchers' start-up trials take every other arch from it.
"""
from __future__ import annotations

import random
from typing import Callable, Container, Mapping, Sequence

from nas.core.arch import Arch, arch_id
from search_spaces.base import ArchSpace

WINDOW_STEPS = 64         # mutations a window draw tries before it proposes the nearest arch it found
WINDOW_MUTATION = 0.2     # per-choice mutation probability of those steps

__all__ = ["WINDOW_MUTATION", "WINDOW_STEPS", "WindowDraws"]


class WindowDraws:
    """Uniform and window draws over a search's space (`seen`: the arch_ids to avoid when the
    feasible archs are listed). `candidates`, `window` and `cost_of` are the search context's
    (`searchers.base.SearchContext`): the feasible archs when listed, cost name -> (low, high),
    and the costs of an arch."""

    def __init__(self, space: ArchSpace, candidates: Sequence[Arch] | None,
                 window: Mapping[str, tuple[float, float]],
                 cost_of: Callable[[Arch], Mapping[str, float]] | None):
        self.space, self.candidates, self.window, self.cost_of = space, candidates, window, cost_of
        self.candidate_ids = [arch_id(a) for a in candidates] if candidates is not None else []
        self._inside: list[tuple[Arch, str]] | None = None     # the listed candidates in the window

    def uniform(self, rng: random.Random, seen: Container[str]) -> Arch:
        """A uniform draw: from the unseen feasible archs when listed, else from the space."""
        if self.candidates is None:
            return self.space.sample(rng)
        unseen = [a for a, i in zip(self.candidates, self.candidate_ids) if i not in seen]
        return dict(rng.choice(unseen)) if unseen else self.space.sample(rng)

    def near(self, rng: random.Random, seen: Container[str]) -> Arch:
        """An arch within the window: from the unseen feasible archs in it when they are listed;
        else a uniform draw mutated step by step, each step kept when it brings the costs nearer
        the window, until inside or after `WINDOW_STEPS` steps. Without a window, a uniform draw."""
        if not self.window or self.cost_of is None:
            return self.uniform(rng, seen)
        if self.candidates is not None:
            if self._inside is None:
                self._inside = [(a, i) for a, i in zip(self.candidates, self.candidate_ids)
                                if self.gap(a) == 0]
            unseen = [a for a, i in self._inside if i not in seen]
            return dict(rng.choice(unseen)) if unseen else self.uniform(rng, seen)
        arch = self.space.sample(rng)
        gap = self.gap(arch)
        for _ in range(WINDOW_STEPS):
            if gap == 0:
                break
            child = self.space.mutate(arch, WINDOW_MUTATION, rng)
            if (child_gap := self.gap(child)) < gap:
                arch, gap = child, child_gap
        return arch

    def gap(self, arch: Arch) -> float:
        """How far the costs of `arch` lie outside the window, in window widths (0: inside)."""
        assert self.cost_of is not None
        costs = self.cost_of(arch)
        return sum((max(0.0, low - costs[name]) + max(0.0, costs[name] - high)) / (high - low)
                   for name, (low, high) in self.window.items())
