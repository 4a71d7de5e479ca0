"""The `search:` section of a run config: what `nas search RUN` does where its flags are not given.

Its keys are the search flags' own names in YAML spelling, each taking what its flag takes::

    search:
      searcher: evolution
      max_macs: [35%, 50%, 75%]     # a list: a family, one subnet per budget
      trials: 20

`searcher`, `score`, `trials`, `seed`, `finalists`; the budgets `max_macs` and `max_params` (an
amount such as `4M`, `P%` of the way from the min to the max subnet, or a list of them),
`max_latency_ms` (ms, or a list) and `members` (K MACs budgets from 20% to 80% of the range). A
search takes each value from its argument where one is given (the command line, or the Python
call), else from the section, else the default below (`nas search`'s own); a budget given as an
argument (`members` included) replaces the section's budgets entirely. What needs no space is
checked when the config loads (`nas.core.budgets`), the rest when a search reads it; either way
a bad value is one line naming `search.KEY`.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Any, Iterator, Mapping

from nas.core.budgets import BUDGET_PARAMS, budget_list, check_specs, family_specs
from nas.core.errors import ConfigError, NasError, int_problems
from nas.core.registry import SEARCHERS
from nas.core.wording import leading_param

SECTION = "search"
BUDGET_KEYS = (*BUDGET_PARAMS, "members")     # a budget argument replaces all of these


def _key(param: str) -> str:
    return f"{SECTION}.{param}"


@dataclass(frozen=True)
class SearchConfig:
    """A run's search settings (module docstring); every default is `nas search`'s own."""

    searcher: str = "evolution"
    score: str = "auto"
    trials: int = 50
    seed: int = 0
    max_macs: str | float | tuple[str | float, ...] | None = None
    max_params: str | float | tuple[str | float, ...] | None = None
    max_latency_ms: float | tuple[float, ...] | None = None
    members: int | None = None
    finalists: int = 0

    def __post_init__(self) -> None:
        problems = int_problems(1, trials=self.trials) + int_problems(0, finalists=self.finalists)
        try:
            SEARCHERS.get(self.searcher, "searcher")
        except NasError as e:
            problems += e.lines()
        problems += _budget_problems({param: getattr(self, param) for param in BUDGET_PARAMS}, self.members)
        if problems:
            raise ConfigError(problems)

    def settings(self, source: str, **given: Any) -> SearchSettings:
        """The settings of a search with the arguments `given` (keys of this section; None: not
        given), as the module docstring says; `source`: the config file this section was read from."""
        unknown = set(given) - set(KEYS)
        if unknown:
            raise TypeError(f"settings: no such keys {sorted(unknown)}")
        budgets_given = any(given.get(key) is not None for key in BUDGET_KEYS)
        values, from_config = {}, set()
        for key in KEYS:
            if given.get(key) is not None:
                values[key] = given[key]
            elif key in BUDGET_KEYS and budgets_given:
                values[key] = None
            else:
                values[key] = getattr(self, key)
                if values[key] != DEFAULTS[key]:
                    from_config.add(key)
        replaced = tuple(key for key in BUDGET_KEYS if budgets_given and getattr(self, key) is not None)
        return SearchSettings(values, frozenset(from_config), replaced, source)


def _budget_problems(budgets: Mapping[str, Any], members: int | None) -> list[str]:
    """The section's budgets checked as far as no space is needed (`nas.core.budgets`)."""
    try:
        asked = family_specs(budgets, members, ref=_key)
    except ConfigError as e:
        return e.problems
    given = {param: [value] for param, value in budgets.items() if value is not None}
    if asked is not None:
        given[asked[0]] = asked[1]
    problems = []
    for param, specs in given.items():
        try:
            check_specs(param, specs)
        except ConfigError as e:
            problems += e.problems
    return problems


KEYS: tuple[str, ...] = tuple(f.name for f in fields(SearchConfig))
DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(SearchConfig)}


@dataclass(frozen=True)
class SearchSettings:
    """The values one search uses, and where each came from.

    Attributes:
        values: Every key of `SearchConfig`: the argument given, else the section's, else the default.
        from_config: The keys whose value the section gave (one other than the default).
        replaced: The section's budget keys that a budget given as an argument replaced.
        source: The config file the section was read from.
    """

    values: Mapping[str, Any]
    from_config: frozenset[str]
    replaced: tuple[str, ...]
    source: str

    @property
    def family_key(self) -> str | None:
        """The key that asks a family (`members`, or a budget key holding a list), or None."""
        if self.values["members"] is not None:
            return "members"
        return next((param for param in BUDGET_PARAMS if budget_list(self.values[param]) is not None), None)

    @property
    def budgets_from_config(self) -> bool:
        """Whether the budgets are the section's (none was given as an argument)."""
        return any(key in self.from_config for key in BUDGET_KEYS)

    def budget_origin(self) -> str:
        """Where a family's budgets came from, for its members' header lines: `the config's
        search.max_macs`, `in place of the config's search.max_macs`, or empty (arguments alone)."""
        if self.budgets_from_config:
            return f"the config's {_key(self.family_key or 'members')}"
        if self.replaced:
            return "in place of the config's " + ", ".join(map(_key, self.replaced))
        return ""

    def check_one_budget(self) -> None:
        """Refuse budgets that ask a family where one budget is searched (`nas.search`)."""
        key = self.family_key
        if key is not None:
            raise ConfigError(f"{key}: asks a family (one subnet per budget): search it with nas.search_family, or "
                              "give one budget")

    @contextmanager
    def blamed(self) -> Iterator[None]:
        """Inside, an error about a value the section gave is raised again as a `ConfigError`
        naming it where it was written (`runs/demo/config.yaml: search.max_macs: ...`)."""
        try:
            yield
        except NasError as error:
            lines = error.lines()
            if not any(leading_param(line) in self.from_config for line in lines):
                raise
            raise ConfigError([f"{self.source}: {SECTION}.{line}" if leading_param(line) in self.from_config
                               else line for line in lines]) from error
