"""A search's costs and budgets: every cost of `nas.core.costs.COSTS`, computed once per arch.

MACs and parameters are analytic (`space.costs`); latency is predicted by the run's lookup
table and, for the winner, measured on the table's device. The search loop only asks this
module three things: the costs of an arch, whether they break a budget, and (at the end) how
far the table's prediction was from a measurement.

A budget below the cheapest arch is refused before searching, and a MACs or params budget above
the max subnet's cost (it admits every arch). For MACs and params the cheapest
is the min subnet (every choice at its cheapest). For latency it is the cheapest latency the
source holds for a live arch (`latency_floor`), not the min subnet's: a measured or fitted
table need not rank the min-MACs subnet first (on a phone, archs of more MACs run faster). The
archs looked at: every listed arch of a small space (at most `ENUMERATE_LIMIT` raw archs), or
the rows of a per-arch timings source that predicts nothing else; in a larger space, the min
subnet and the rows the source holds.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from torch import nn

from nas.core.arch import Arch, arch_id
from nas.core.budgets import check_not_above_max
from nas.core.costs import BY_NAME, COSTS, LATENCY, MACS, PARAMS
from nas.core.errors import ConfigError, SearchError
from nas.engine.latency.table import BUILD_TABLE, ENUMERATE_LIMIT, LatencyTable
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

    def latency_source(self) -> dict[str, Any] | None:
        """`{"table", "device", "batch"}` of the latency table (None without one): which file
        (`PATH:COLUMN` for measured per-arch ms), the device it describes and its batch."""
        if self.latency is None:
            return None
        path, column = getattr(self.latency, "path", None), getattr(self.latency, "column", None)
        table = None if path is None else f"{path}:{column}" if column else str(path)
        return {"table": table, "device": self.latency.device.device, "batch": self.latency.device.batch_size}

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

    def check_range(self) -> None:
        """Raise `SearchError` naming the parameter when a budget is below the cheapest arch
        (module docstring): the min subnet's MACs or params, the latency floor; `ConfigError`
        when a MACs or params budget is above the max subnet's (`check_not_above_max`)."""
        highest = dict(zip((MACS.name, PARAMS.name), self.space.costs(self.space.max())))
        for name, budget in self.budgets.items():
            if name in highest:
                cost = BY_NAME[name]
                check_not_above_max(cost.param, cost, cost.budget(budget), budget, highest[name])
        costs = self(self.space.min())
        for name, budget in self.budgets.items():
            cost = BY_NAME[name]
            if cost is LATENCY and self.latency is not None:
                floor, arch = self.latency_floor()
                if floor > budget:
                    device = self.latency.device
                    raise SearchError(f"{cost.param}: {cost.budget(budget)} is below the cheapest live arch of the "
                                      f"latency table ({arch_id(arch)}: {cost.amount(floor)} predicted on "
                                      f"{device.device}, batch {device.batch_size}); raise the budget")
            elif costs[name] > budget:
                raise SearchError(f"{cost.param}: {cost.budget(budget)} is below the cheapest subnet "
                                  f"(min: {cost.amount(costs[name])}); raise the budget")

    def latency_floor(self) -> tuple[float, Arch]:
        """The cheapest latency the table holds for a live arch of the space, and that arch
        (module docstring); computed once per table and space (`floors`: listing a small space
        takes seconds)."""
        space, latency = self.space, self.latency
        if space.fingerprint() not in latency.floors:
            rows = list(getattr(latency, "archs", ()))
            if rows and getattr(latency, "fallback", None) is None:
                pool = rows
            elif space.raw_size() <= ENUMERATE_LIMIT:
                pool = space.enumerate()
            else:
                pool = [space.canonical(space.min()), *rows]
            live = [arch for arch in pool if space.is_live(arch)] or pool
            latency.floors[space.fingerprint()] = min(((round(latency.predict(space, arch), 6), arch) for arch in live),
                                                      key=lambda pair: pair[0])
        return latency.floors[space.fingerprint()]

    def cheapest_feasible(self) -> Arch | None:
        """An arch that meets every budget, for a search whose proposals keep failing: the min
        subnet, else the latency floor's arch (None when neither does)."""
        archs = [self.space.canonical(self.space.min())]
        if self.latency is not None and LATENCY.name in self.budgets:
            archs.append(self.latency_floor()[1])
        return next((arch for arch in archs if self.feasible(arch)), None)

    def latency_check(self, export: Callable[[Arch], nn.Module] | None, best: Arch) -> dict[str, Any] | None:
        """The table's prediction for `best` against a measurement of its export (None without
        a table or an `export`, or when the table's device is not this machine's)."""
        if self.latency is None or export is None or not self.latency.measurable:
            return None
        return self.latency.verify(self.space, export(best), best, self.budgets.get(LATENCY.name))
