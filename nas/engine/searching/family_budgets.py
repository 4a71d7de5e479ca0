"""A family's budgets: a list in one budget parameter, or `members=K` points along the MACs range.

`max_macs="35%,50%,75%"` (or a list, from Python), `max_params="200K,400K"`, `max_latency_ms="1.2,1.5"`
each ask one member per budget; `members=K` asks K MACs budgets evenly spaced from
`MEMBERS_LOW` to `MEMBERS_HIGH` percent of the way from the min to the max subnet (K=1: the
middle). Budgets on the other costs are shared by every member. Everything is checked before
any work (what needs no space by `nas.core.budgets`): one line naming the parameter for an empty
entry, a list that is not strictly increasing once percentages are counts, a budget above the
max subnet's cost (it admits every arch, as a one-budget search refuses it too), more than
`MAX_MEMBERS` budgets, lists in two parameters, `members` beside a MACs budget.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nas.core.budgets import (MEMBERS_HIGH, MEMBERS_LOW, Budget, budget_list, check_increasing, check_not_above_max,
                              family_specs, member_specs, milliseconds)
from nas.core.costs import BY_NAME, COSTS, LATENCY, MACS
from nas.core.errors import ConfigError
from nas.engine.searching.request import resolve_budget

if TYPE_CHECKING:
    from nas.engine.run import Run

# budget_list, member_specs, MEMBERS_LOW, MEMBERS_HIGH: from `nas.core.budgets`, as before
__all__ = ["MEMBERS_HIGH", "MEMBERS_LOW", "FamilyBudgets", "budget_list", "family_budgets", "member_specs"]


@dataclass(frozen=True)
class FamilyBudgets:
    """The budgets of a family, checked.

    Attributes:
        cost: The cost the members' budgets are on (`macs`, `params`, `latency_ms`).
        specs: Each member's budget as given (`35%`, `2M`, `1.5`), ascending.
        budgets: The same as counts (ms for latency), strictly increasing.
        others: The budgets on the other costs, as given, by parameter (`{"max_params": "1M"}`).
    """

    cost: str
    specs: tuple[str, ...]
    budgets: tuple[float, ...]
    others: dict[str, Budget | None]

    def member(self, index: int) -> dict[str, Budget | None]:
        """Member `index`'s (0-based) budget parameters, for `nas.search` (latency in ms)."""
        own = self.budgets[index] if self.cost == LATENCY.name else self.specs[index]
        return {**self.others, BY_NAME[self.cost].param: own}


def family_budgets(run: Run, *, max_macs: Any = None, max_params: Any = None, max_latency_ms: Any = None,
                   members: int | None = None) -> FamilyBudgets:
    """The checked budgets of a family (see the module docstring)."""
    given = {MACS.param: max_macs, "max_params": max_params, LATENCY.param: max_latency_ms}
    asked = family_specs(given, members)
    if asked is None:
        raise ConfigError("members: a family needs a list of budgets in one budget parameter (e.g. "
                          "{max_macs=35%,50%,75%}) or {members=K}")
    param, specs = asked
    cost = next(c for c in COSTS if c.param == param)
    if cost == LATENCY:
        budgets = [milliseconds(spec, param) for spec in specs]
    else:
        index = 0 if cost == MACS else 1
        low, high = run.space.costs(run.space.min())[index], run.space.costs(run.space.max())[index]
        budgets = [_resolve(spec, low, high, param) for spec in specs]
    check_increasing(param, specs, budgets, [cost.budget(value) for value in budgets])
    if cost != LATENCY:
        for spec, budget in zip(specs, budgets):
            check_not_above_max(param, cost, spec, budget, high)
    others = {p: value for p, value in given.items() if p != param}
    if isinstance(others.get(LATENCY.param), str):
        others[LATENCY.param] = milliseconds(others[LATENCY.param], LATENCY.param)
    return FamilyBudgets(cost.name, tuple(specs), tuple(budgets), others)


def _resolve(spec: str, low: float, high: float, param: str) -> float:
    """A MACs or params budget as a count (`low`, `high`: the min and max subnet's)."""
    value = resolve_budget(spec, low, high, param)
    assert value is not None
    return value
