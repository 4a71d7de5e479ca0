"""`fused`: a weighted rank average of several estimators, spelt `2*supernet+naswot+synflow`.

Syntax (`estimators/score_spec.py`): components joined by `+`; each is a registered estimator
name, optionally preceded by a positive weight and `*` (`2*supernet`, `0.5*synflow`); a
component without a weight weighs 1. A component appears once. Each component scores the same archs; its scores become average
ranks (ties share their mean rank) normalised to [0, 1] (worst 0, best 1; a NaN score ranks
worst); the fused score is the weighted mean of those ranks. Ranks rather than raw scores,
because the components live on unrelated scales (a top-1, a log-determinant, a MAC count).
Since it ranks within the scored archs, an arch's score depends on the others
(`population = True`): a search re-scores its whole population.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from estimators.base import Estimator, EstimatorContext
from estimators.score_spec import build_component, format_spec, parse_spec
from nas.core.arch import Arch, arch_id
from nas.core.ranks import average_ranks


def is_fusion(spec: str) -> bool:
    """Whether a `--score` value is a fusion spec rather than one estimator's name."""
    return "+" in spec or "*" in spec


def normalised_ranks(scores: Sequence[float]) -> np.ndarray:
    """Average ranks of `scores` mapped to [0, 1] (lowest 0, highest 1; NaN lowest; one arch 1)."""
    values = np.asarray(scores, dtype=float)
    values = np.where(np.isnan(values), -np.inf, values)
    if len(values) < 2:
        return np.ones(len(values))
    return (average_ranks(values) - 1) / (len(values) - 1)


class Fused(Estimator):
    """The weighted mean of the components' normalised ranks (module docstring). Fusing the
    supernet with zero-cost proxies follows Abdelfattah et al. (ICLR 2021), whose "vote" of
    synflow, jacov and snip ranked NAS-Bench-201 better than any one of them."""

    population = True

    def __init__(self, components: Sequence[tuple[float, str]]):
        self.components = [(float(w), build_component(n)) for w, n in components]
        self.name = format_spec(list(components))
        self.needs = frozenset().union(*(e.needs for _, e in self.components))
        self.cheap = all(e.cheap for _, e in self.components)

    @classmethod
    def from_spec(cls, spec: str) -> Fused:
        """The fusion a `--score` spec names (syntax in the module docstring)."""
        return cls(parse_spec(spec))

    def scores(self, archs: Sequence[Arch], context: EstimatorContext) -> list[float]:
        total = sum(w for w, _ in self.components)
        fused = sum(w * normalised_ranks(_memoised(e, archs, context)) for w, e in self.components) / total
        return [float(v) for v in np.atleast_1d(fused)]


    def check(self, context: EstimatorContext) -> None:
        for _, estimator in self.components:
            estimator.check(context)

    def component_scores(self, arch: Arch, context: EstimatorContext) -> dict[str, float]:
        """Each component's own score of `arch` (computed once per context, with the ranks)."""
        return {estimator.name: _memoised(estimator, [arch], context)[0] for _, estimator in self.components}


def _memoised(estimator: Estimator, archs: Sequence[Arch], context: EstimatorContext) -> list[float]:
    """A component's scores, each arch's computed once per context: a search re-ranks its whole
    population after every trial, which would otherwise re-score every arch every time."""
    memo = context.cache.setdefault(("fused-component", estimator.name), {})
    missing = list({arch_id(a): a for a in archs if arch_id(a) not in memo}.values())
    if missing:
        memo.update(zip((arch_id(a) for a in missing), estimator.scores(missing, context)))
    return [memo[arch_id(a)] for a in archs]
