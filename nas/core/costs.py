"""The costs a search can constrain, listed once: MACs, parameters, latency.

Every place that names a cost (a search's budgets, its records and error messages, the CLI
flags, `pareto.json` and its figure, the default search folder name) reads it from `COSTS`,
so a new cost is one more entry here plus the code that computes it
(`nas.engine.searching.costs`). The order is the order of the checks: cheap analytic costs first.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

MAX_DIGITS = 17     # significant digits that write any float exactly


@dataclass(frozen=True)
class Cost:
    """One constrainable cost: its record key and how people read it; its budget is `param`."""

    name: str        # key in records, budgets and pareto.json ("macs")
    label: str       # axis label of the Pareto figure
    scale: float     # values are shown divided by this
    unit: str        # written after a scaled amount ("M MACs", " ms")
    short: str       # written after a scaled budget ("M", "")
    analytic: bool   # computed from the arch alone (no measurement, no table)

    @property
    def param(self) -> str:
        """The budget's parameter of `nas.api.search` (`max_macs`); the CLI names its flag."""
        return f"max_{self.name}"

    def amount(self, value: float) -> str:
        """`3.2M MACs`, `0.41 ms`: a cost as error messages print it."""
        return f"{value / self.scale:.3g}{self.unit}"

    def budget(self, value: float) -> str:
        """`3.2M`, `0.5`: a budget as the user wrote it on the command line."""
        number = f"{value / self.scale:.3g}" if self.analytic else f"{value:g}"
        return number + self.short

    def folder_part(self, value: float, digits: int = 4) -> str:
        """`macs3.2M`, `latency_ms2ms`: the budget in a default search folder name, to `digits`
        significant digits (latency: at least 6)."""
        if self.analytic:
            return f"{self.name}{value / self.scale:.{digits}g}{self.short}"
        return f"{self.name}{value:.{max(6, digits)}g}ms"

    def distinct_digits(self, values: Sequence[float]) -> int:
        """The fewest significant digits from 4 whose `folder_part`s tell distinct `values` apart
        (a family's budgets 0.2 MACs apart need 8)."""
        for digits in range(4, MAX_DIGITS):
            if len({self.folder_part(v, digits) for v in values}) == len(set(values)):
                return digits
        return MAX_DIGITS


MACS = Cost("macs", "MACs (M)", 1e6, "M MACs", "M", analytic=True)
PARAMS = Cost("params", "parameters (M)", 1e6, "M params", "M", analytic=True)
LATENCY = Cost("latency_ms", "latency (ms)", 1.0, " ms", "", analytic=False)
COSTS: tuple[Cost, ...] = (MACS, PARAMS, LATENCY)
COST_NAMES: tuple[str, ...] = tuple(cost.name for cost in COSTS)
BY_NAME: dict[str, Cost] = {cost.name: cost for cost in COSTS}
