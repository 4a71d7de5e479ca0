"""A family's budgets: a list in one budget parameter, or `members=K` points along the MACs range.

`max_macs="35%,50%,75%"` (or a list, from Python), `max_params="1M,2M"`, `max_latency_ms="1.2,1.5"`
each ask one member per budget; `members=K` asks K MACs budgets evenly spaced from
`MEMBERS_LOW` to `MEMBERS_HIGH` percent of the way from the min to the max subnet (K=1: the
middle). Budgets on the other costs are shared by every member. Everything is checked here,
before any work: one line naming the parameter for an empty entry, a list that is not strictly
increasing once percentages are counts, lists in two parameters, `members` beside a MACs budget.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from nas.core.costs import BY_NAME, COSTS, LATENCY, MACS
from nas.core.errors import ConfigError, check_int
from nas.engine.searching.request import resolve_budget

if TYPE_CHECKING:
    from nas.engine.run import Run

MEMBERS_LOW, MEMBERS_HIGH = 20, 80     # percent of the MACs range that `members=K` spans
Budget = str | float


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


def budget_list(value: Any) -> list[Budget] | None:
    """`value` as a list of budgets when it asks for several (a list or tuple, or a string with
    commas); None when it is one budget or none."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, str) and "," in value:
        return [item.strip() for item in value.split(",")]
    return None


def member_specs(members: int) -> list[str]:
    """`members` MACs budgets evenly spaced over `MEMBERS_LOW`..`MEMBERS_HIGH`% (one: the middle)."""
    check_int("members", members, 1)
    if members == 1:
        return [f"{(MEMBERS_LOW + MEMBERS_HIGH) / 2:g}%"]
    step = (MEMBERS_HIGH - MEMBERS_LOW) / (members - 1)
    return [f"{round(MEMBERS_LOW + k * step, 4):g}%" for k in range(members)]


def family_budgets(run: Run, *, max_macs: Any = None, max_params: Any = None, max_latency_ms: Any = None,
                   members: int | None = None) -> FamilyBudgets:
    """The checked budgets of a family (see the module docstring)."""
    given = {MACS.param: max_macs, "max_params": max_params, LATENCY.param: max_latency_ms}
    lists = {param: items for param, value in given.items() if (items := budget_list(value)) is not None}
    if len(lists) > 1:
        first, second = lists
        raise ConfigError(f"{first}: a family's budgets are on one cost, and {{{second}}} holds a list too; give "
                          f"the list in one of them (the other budget, one value, is shared by every member)")
    if members is not None:
        check_int("members", members, 1)
        if MACS.param in lists or max_macs is not None:
            raise ConfigError("members: gives the MACs budgets (evenly spaced from "
                              f"{MEMBERS_LOW}% to {MEMBERS_HIGH}% of the MACs range); drop {{max_macs}} or members")
        if lists:
            raise ConfigError(f"members: asks MACs budgets, and {{{next(iter(lists))}}} holds a list; give one of them")
        lists = {MACS.param: member_specs(members)}
    if not lists:
        raise ConfigError("members: a family needs a list of budgets in one budget parameter (e.g. "
                          "{max_macs=35%,50%,75%}) or {members=K}")
    (param, items), = lists.items()
    cost = next(c for c in COSTS if c.param == param)
    specs = [_spec(item, param, items) for item in items]
    budgets = [_resolve(run, cost.name, spec, param) for spec in specs]
    _check_increasing(param, specs, budgets, cost.name)
    others = {p: value for p, value in given.items() if p != param}
    if isinstance(others.get(LATENCY.param), str):
        others[LATENCY.param] = _resolve(run, LATENCY.name, others[LATENCY.param], LATENCY.param)
    return FamilyBudgets(cost.name, tuple(specs), tuple(budgets), others)


def _spec(item: Budget, param: str, items: Sequence[Budget]) -> str:
    text = item.strip() if isinstance(item, str) else f"{item:g}" if isinstance(item, (int, float)) else None
    if not text:
        listed = ",".join(str(i) for i in items)
        raise ConfigError(f"{param}: an empty budget in the list {listed!r}; give budgets separated by commas, "
                          "e.g. 35%,50%,75%")
    return text


def _resolve(run: Run, cost: str, spec: str, param: str) -> float:
    """A budget as a count (ms for latency)."""
    if cost == LATENCY.name:
        try:
            value = float(spec)
        except ValueError:
            raise ConfigError(f"{param}: cannot read {spec!r}; give milliseconds, e.g. 1.5") from None
        if not value > 0 or value == float("inf"):
            raise ConfigError(f"{param}: must be a finite number > 0, got {spec}")
        return value
    index = 0 if cost == MACS.name else 1
    low, high = run.space.costs(run.space.min())[index], run.space.costs(run.space.max())[index]
    value = resolve_budget(spec, low, high, param)
    assert value is not None
    return value


def _check_increasing(param: str, specs: list[str], budgets: list[float], cost: str) -> None:
    if all(a < b for a, b in zip(budgets, budgets[1:])):
        return
    shown = ", ".join(spec if spec == BY_NAME[cost].budget(value) else f"{spec} ({BY_NAME[cost].budget(value)})"
                      for spec, value in zip(specs, budgets))
    raise ConfigError(f"{param}: a family's budgets must be strictly increasing (no duplicates), got {shown}; "
                      "list them in ascending order, each once")
