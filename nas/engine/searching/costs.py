"""A search's costs and budgets: every cost of `nas.core.costs.COSTS`, computed once per arch.

MACs and parameters are analytic (`space.costs`); latency is predicted by the run's lookup
table and, for the winner, measured on the table's device. The search loop only asks this
module three things: the costs of an arch, whether they break a budget, and (at the end) how
far the table's prediction was from a measurement.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from torch import nn

from nas.core.arch import Arch, arch_id
from nas.core.costs import BY_NAME, COSTS, LATENCY, MACS
from nas.core.errors import ConfigError, SearchError
from nas.engine.searching.latency import BUILD_TABLE, LatencyTable
from search_spaces.base import ArchSpace


@dataclass(frozen=True)
class Constraints:
    """Budgets of a search; None: unconstrained. MACs and params are counts, latency in ms."""

    max_macs: float | None = None
    max_params: float | None = None
    max_latency_ms: float | None = None

    def __post_init__(self) -> None:
        for cost in COSTS:
            budget = getattr(self, cost.param)
            if budget is not None and not budget > 0:
                raise ConfigError(f"{cost.param}: must be > 0, got {budget}")
            if budget is not None and not math.isfinite(budget):
                raise ConfigError(f"{cost.param}: must be a finite number, got {budget}")

    def budgets(self) -> dict[str, float]:
        """Constrained cost name (`macs`, `params`, `latency_ms`) -> budget."""
        values = {cost.name: getattr(self, cost.param) for cost in COSTS}
        return {name: float(budget) for name, budget in values.items() if budget is not None}


class SearchCosts:
    """The costs of archs (cached by arch_id) and the budgets they must meet."""

    def __init__(self, space: ArchSpace, budgets: Mapping[str, float], latency: LatencyTable | None):
        if LATENCY.name in budgets and latency is None:
            raise ConfigError("needs a latency table", param=LATENCY.param, fix=BUILD_TABLE)
        if latency is not None:
            latency.check_space(space)
        self.space, self.budgets, self.latency = space, dict(budgets), latency
        self._cache: dict[str, dict[str, float]] = {}

    @property
    def names(self) -> tuple[str, ...]:
        """The costs the searchers optimise: MACs always, then each other constrained cost."""
        return (MACS.name, *(c.name for c in COSTS if c.name in self.budgets and c is not MACS))

    def settings(self) -> dict[str, Any]:
        """What a resumed search must share with this one about its costs."""
        measured_on = self.latency.device if self.latency is not None and LATENCY.name in self.budgets else None
        return {"budgets": self.budgets, "latency_table": None if measured_on is None
                else f"{measured_on.device}-b{measured_on.batch_size}"}

    def __call__(self, arch: Arch, key: str | None = None) -> dict[str, float]:
        """`{"macs", "params", "latency_ms"?}` of `arch` (latency only with a table)."""
        key = key if key is not None else arch_id(arch)
        if key not in self._cache:
            macs, params = self.space.costs(arch)
            costs: dict[str, float] = {"macs": macs, "params": params}
            if self.latency is not None:
                costs[LATENCY.name] = round(self.latency.predict(self.space, arch), 6)
            self._cache[key] = costs
        return self._cache[key]

    def violation(self, costs: Mapping[str, float]) -> str | None:
        """Why `costs` break a budget (the first cost in `COSTS` order), or None."""
        for cost in COSTS:
            budget = self.budgets.get(cost.name)
            if budget is not None and costs[cost.name] > budget:
                return f"{cost.name} {cost.amount(costs[cost.name])} > {cost.param} {cost.amount(budget)}"
        return None

    def feasible(self, arch: Arch, key: str | None = None) -> bool:
        """Whether `arch` (whose arch_id is `key`, when known) meets every budget."""
        return self.violation(self(arch, key)) is None

    def check_cheapest(self) -> None:
        """Raise `SearchError` naming the parameter when even the min subnet breaks a budget."""
        costs = self(self.space.min())
        for name, budget in self.budgets.items():
            if costs[name] > budget:
                cost = BY_NAME[name]
                where = ""
                if cost is LATENCY and self.latency is not None:
                    where = f" predicted on {self.latency.device.device}, batch {self.latency.device.batch_size}"
                raise SearchError(f"{cost.param}: {cost.budget(budget)} is below the cheapest subnet "
                                  f"(min: {cost.amount(costs[name])}{where}); raise the budget")

    def latency_check(self, export: Callable[[Arch], nn.Module] | None, best: Arch) -> dict[str, Any] | None:
        """The table's prediction for `best` against a measurement of its export (None without
        a table or an `export`, or when the table's device is not this machine's)."""
        if self.latency is None or export is None or not self.latency.measurable:
            return None
        return self.latency.verify(self.space, export(best), best, self.budgets.get(LATENCY.name))
