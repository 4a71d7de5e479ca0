"""A family search's folder: `family.json` beside one ordinary search folder per member.

A family answers several budgets on one cost (MACs, parameters or latency) with one command
(`nas.engine.searching.family_search`). Its folder holds:
- `family.json`: what the family was asked (cost, budgets as given and as counts or ms, the
  budgets on the other costs every member shares, searcher, score, seed, trials per member,
  the weights searched) and each member's answer (its budget, folder, arch, costs, score),
  members in ascending budget order;
- `m<k>-<cost><amount>/`: member k's own search folder (summary.json, best.yaml, results.jsonl,
  pareto.json ...), which every command reading a search folder reads as it reads any other.

This module owns reading and writing `family.json` (`read_family` reads it through its typed
record, `FamilyRecord`, so a damaged file is one line naming it and its first bad key) and the
`FamilyResult` a family search returns.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping

from nas.core.costs import COST_NAMES
from nas.core.errors import RecordError, SearchError
from nas.core.files import write_json
from nas.core.records import field_problems, parse_record, read_json
from nas.engine.searching.results import SearchResult

__all__ = ["FAMILY", "FamilyMember", "FamilyRecord", "FamilyResult", "is_family", "member_dir", "read_family",
           "write_family"]

COST_KINDS = Literal[COST_NAMES]      # type: ignore[valid-type]

FAMILY = "family.json"
FIX = "remove the family folder and search again"


@dataclass(frozen=True)
class FamilyMember:
    """One member's answer in family.json: its budget, folder (inside the family's), arch and costs."""

    index: int
    budget: float
    budget_spec: str
    dir: str
    arch_id: str
    arch: dict[str, Any]
    macs: int
    params: int
    score: str
    score_value: float
    latency_ms: float | None = None
    val_top1: float | None = None

    def __post_init__(self) -> None:
        inside = not Path(self.dir).is_absolute() and ".." not in Path(self.dir).parts
        field_problems(dir=(inside, "a folder inside the family folder"),
                       score_value=(math.isfinite(self.score_value), "a finite number"),
                       budget=(math.isfinite(self.budget), "a finite number"))


@dataclass(frozen=True)
class FamilyRecord:
    """family.json: what the family was asked and its members so far, in ascending budget order
    (`source`: the weights searched; `config`: the config's spelling, for an untrained one)."""

    kind: Literal["family"]
    cost: COST_KINDS
    budget_specs: tuple[str, ...]
    budgets: tuple[float, ...]
    other_budgets: dict[str, Any]
    members: tuple[FamilyMember, ...]
    searcher: str
    score: str
    seed: int
    trials: int
    evaluations: int
    device: str
    batch: int
    score_reason: str | None = None
    source: dict[str, Any] | None = None
    latency_table: str | None = None
    config: str | None = None

    def __post_init__(self) -> None:
        budgets = self.budgets
        increasing = (bool(budgets) and all(map(math.isfinite, budgets))
                      and all(a < b for a, b in zip(budgets, budgets[1:])))
        in_order = [m.index == k and m.budget == budgets[k - 1] for k, m in enumerate(self.members, 1)
                    if k <= len(budgets)]
        field_problems(budgets=(increasing and len(self.budget_specs) == len(budgets), "finite numbers in strictly "
                                "increasing order, one per budget_specs entry"),
                       members=(len(self.members) <= len(budgets) and all(in_order), "at most one per budget, "
                                "numbered 1, 2, ... in ascending budget order"))


def member_dir(index: int, cost: str, budget: float, digits: int = 4) -> str:
    """Member `index`'s folder name inside the family folder: `m1-macs3.2M`, `m2-latency_ms1.5ms`
    (`digits`: the budget's significant digits, more where a family's budgets need them to differ:
    `Cost.distinct_digits`)."""
    from nas.core.costs import BY_NAME

    return f"m{index}-{BY_NAME[cost].folder_part(budget, digits)}"


def is_family(folder: str | Path) -> bool:
    """Whether `folder` is a family search's folder (it holds `family.json`)."""
    return (Path(folder) / FAMILY).is_file()


def read_family(folder: str | Path) -> dict[str, Any]:
    """The content of `folder/family.json`, checked (see the module docstring); a missing or
    damaged file raises `SearchError` in one line naming it. `members` lists the members
    found so far (a family stopped between members lists fewer than `budgets`)."""
    path = Path(folder) / FAMILY
    if not path.exists():
        raise SearchError(f"{path}: no such file; {folder} is not a family search folder")
    data = read_json(path, fix=FIX)
    parse_record(FamilyRecord, data, path, fix=FIX)
    return data


def write_family(folder: Path, data: Mapping[str, Any]) -> Path:
    """Write `folder/family.json` atomically (checked as `read_family` reads it)."""
    try:
        parse_record(FamilyRecord, dict(data), folder / FAMILY)
    except RecordError as e:      # the writer's own defect: never leave a file read_family refuses
        raise SearchError(f"would not be readable: {e.problem}") from None
    return write_json(folder / FAMILY, dict(data))


@dataclass
class FamilyResult:
    """What a family search returns (`nas.search_family`).

    Attributes:
        dir: The family folder.
        cost: The cost whose budgets the members answer (`macs`, `params`, `latency_ms`).
        budgets: The members' budgets (counts or ms), ascending.
        budget_specs: The budgets as given (`35%`, `2M`, `1.5`).
        members: Each member's `SearchResult`, in budget order.
        evaluations: Distinct archs evaluated over the family (an arch shared by members once).
        new: Evaluations this call made (0 when re-run on a finished family).
        record: The content of family.json.
    """

    dir: Path
    cost: str
    budgets: list[float]
    budget_specs: list[str]
    members: list[SearchResult] = field(default_factory=list)
    evaluations: int = 0
    new: int = 0
    record: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """What `nas search --json` prints for a family: family.json's content, `dir` and `new`."""
        return {**self.record, "dir": str(self.dir), "new": self.new}
