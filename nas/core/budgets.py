"""A search's budgets as they are given, before a space turns percentages into counts.

A MACs or params budget is an amount (`4M`, `150K`, a number) or `P%` of the way from the min
to the max subnet's cost; a latency budget is milliseconds. Several budgets in one parameter (a
list, or a string with commas: `35%,50%,75%`) ask a family, one member per budget, and
`members=K` asks K MACs budgets evenly spaced from `MEMBERS_LOW` to `MEMBERS_HIGH` percent.
What needs no space is checked here, for the Python API, the CLI and a run config's `search:`
section alike (each names the other parameters its own way: `ref`); the rest (percentages as
counts, the order of amounts beside percentages, the cheapest subnet) once a run's space is
known (`nas.engine.searching.family_budgets`).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

from nas.core.amounts import parse_amount
from nas.core.costs import COSTS, LATENCY, MACS, Cost
from nas.core.errors import ConfigError, check_int

MEMBERS_LOW, MEMBERS_HIGH = 20, 80     # percent of the MACs range that `members=K` spans
# The most members a family has: `members=K` budgets at least 1% of the MACs range apart (closer
# budgets answer alike), and a list no longer; a larger K is a typo, refused before any work.
MAX_MEMBERS = MEMBERS_HIGH - MEMBERS_LOW + 1
BUDGET_PARAMS: tuple[str, ...] = tuple(cost.param for cost in COSTS)
Budget = str | float


def marker(param: str) -> str:
    """How a message below the front ends refers to a parameter: `{param}`, which each front end
    words (`nas.core.wording`)."""
    return "{" + param + "}"


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
    _check_members(members)
    if members == 1:
        return [f"{(MEMBERS_LOW + MEMBERS_HIGH) / 2:g}%"]
    step = (MEMBERS_HIGH - MEMBERS_LOW) / (members - 1)
    return [f"{round(MEMBERS_LOW + k * step, 4):g}%" for k in range(members)]


def family_specs(given: Mapping[str, Any], members: int | None,
                 ref: Callable[[str], str] = marker) -> tuple[str, list[str]] | None:
    """(the budget parameter of a family, its budgets as text) from the budget parameters `given`
    (`{"max_macs": "35%,50%"}`) and `members`; None when they ask no family. Refused in one line
    naming the parameter: lists in two parameters, `members` beside a MACs budget or a list, an
    empty list or entry."""
    lists = {param: items for param, value in given.items() if (items := budget_list(value)) is not None}
    if len(lists) > 1:
        first, second = lists
        raise ConfigError(f"{first}: a family's budgets are on one cost, and {ref(second)} holds a list too; give "
                          f"the list in one of them (the other budget, one value, is shared by every member)")
    if members is not None:
        _check_members(members)
        if MACS.param in lists or given.get(MACS.param) is not None:
            raise ConfigError(f"members: gives the MACs budgets (evenly spaced from {MEMBERS_LOW}% to "
                              f"{MEMBERS_HIGH}% of the MACs range); drop {ref(MACS.param)} or {ref('members')}")
        if lists:
            raise ConfigError(f"members: asks MACs budgets, and {ref(next(iter(lists)))} holds a list; give one of "
                              "them")
        return MACS.param, member_specs(members)
    if not lists:
        return None
    (param, items), = lists.items()
    if not items:
        raise ConfigError(f"{param}: an empty list; give the family's budgets, e.g. 35%,50%,75%")
    if len(items) > MAX_MEMBERS:
        raise ConfigError(f"{param}: {len(items):,} budgets; a family has at most {MAX_MEMBERS} members (budgets at "
                          "least 1% of the range apart)")
    return param, [_spec(item, param, items) for item in items]


def check_not_above_max(param: str, cost: Cost, spec: str, budget: float, high: float) -> None:
    """Refuse a MACs or params budget (`spec` as given, `budget` as a count) above the max
    subnet's cost `high`: it admits every arch, as the max subnet's own cost does, so it is a
    typo or a unit slip (a family's members would answer alike). Equal to `high` is accepted."""
    if budget > high:
        raise ConfigError(f"{param}: {spec} ({budget:,.0f}) is above the max subnet's {cost.amount(high)} "
                          f"({high:,.0f}): it admits every arch, as 100% (the max subnet) does; give at most that")


def _check_members(members: Any) -> None:
    """`members` is an integer from 1 to `MAX_MEMBERS` (a `ConfigError` naming it, in one short line)."""
    check_int("members", members, 1)
    if members > MAX_MEMBERS:
        raise ConfigError(f"members: {members:,} members; a family has at most {MAX_MEMBERS} (K budgets from "
                          f"{MEMBERS_LOW}% to {MEMBERS_HIGH}% of the MACs range, at least 1% apart)")


def _spec(item: Budget, param: str, items: Sequence[Budget]) -> str:
    text = item.strip() if isinstance(item, str) else f"{item:g}" if isinstance(item, (int, float)) else None
    if not text:
        listed = ",".join(str(i) for i in items)
        raise ConfigError(f"{param}: an empty budget in the list {listed!r}; give budgets separated by commas, "
                          "e.g. 35%,50%,75%")
    return text


def budget_fraction(text: str, param: str) -> float | None:
    """`P%` as the fraction P/100 of the way from the min to the max subnet's cost, checked to lie
    in [0, 1]; None for an amount."""
    text = text.strip()
    if not text.endswith("%"):
        return None
    try:
        fraction = float(text[:-1]) / 100
    except ValueError:
        fraction = -1.0
    if not 0 <= fraction <= 1:
        raise ConfigError(f"{param}: {text!r}: a percentage must be between 0% (min subnet) and 100% (max subnet)")
    return fraction


def milliseconds(spec: Budget, param: str) -> float:
    """A latency budget in ms, checked to be a finite number > 0."""
    try:
        value = float(spec)
    except ValueError:
        raise ConfigError(f"{param}: cannot read {spec!r}; give milliseconds, e.g. 1.5") from None
    if not value > 0 or not math.isfinite(value):
        raise ConfigError(f"{param}: must be a finite number > 0, got {spec}")
    return value


def check_specs(param: str, specs: Sequence[Budget]) -> None:
    """Check the budgets of one parameter as far as no space is needed: each readable, and a
    family's strictly increasing where they compare without one (all percentages, all amounts,
    or latencies)."""
    if param == LATENCY.param:
        check_increasing(param, [str(s) for s in specs], [milliseconds(s, param) for s in specs])
        return
    fractions = [budget_fraction(s, param) if isinstance(s, str) else None for s in specs]
    amounts = [parse_amount(s, param) if f is None else None for s, f in zip(specs, fractions)]
    for values in (fractions, amounts):
        if all(v is not None for v in values):
            check_increasing(param, [str(s) for s in specs], values)


def check_increasing(param: str, specs: Sequence[str], values: Sequence[float],
                     counts: Sequence[str] | None = None) -> None:
    """Refuse a family's budgets unless `values` (the budgets `specs` as comparable numbers) are
    strictly increasing; `counts`: what each budget came to, shown beside a spec that differs."""
    if all(a < b for a, b in zip(values, values[1:])):
        return
    shown = ", ".join(spec if count == spec else f"{spec} ({count})" for spec, count in zip(specs, counts or specs))
    raise ConfigError(f"{param}: a family's budgets must be strictly increasing (no duplicates), got {shown}; "
                      "list them in ascending order, each once")
