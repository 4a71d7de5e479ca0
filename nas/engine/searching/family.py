"""A family search's folder: `family.json` beside one ordinary search folder per member.

A family answers several budgets on one cost (MACs, parameters or latency) with one command
(`nas.engine.searching.family_search`). Its folder holds:
- `family.json`: what the family was asked (cost, budgets as given and as counts or ms, the
  budgets on the other costs every member shares, searcher, score, seed, trials per member,
  the weights searched) and each member's answer (its budget, folder, arch, costs, score),
  members in ascending budget order;
- `m<k>-<cost><amount>/`: member k's own search folder (summary.json, best.yaml, results.jsonl,
  pareto.json ...), which every command reading a search folder reads as it reads any other.

This module owns reading and writing `family.json` (`read_family` checks every field, so a
damaged file is one line naming it) and the `FamilyResult` a family search returns.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from nas.core.costs import COST_NAMES
from nas.core.errors import SearchError, clip_words
from nas.core.files import write_json
from nas.engine.searching.results import SearchResult

__all__ = ["FAMILY", "FamilyResult", "is_family", "member_dir", "read_family", "write_family"]

FAMILY = "family.json"
KIND = "family"
_MEMBER_FIELDS = {"index": int, "budget": (int, float), "budget_spec": str, "dir": str, "arch_id": str,
                  "arch": dict, "macs": int, "params": int, "score": str, "score_value": (int, float)}
_FIELDS = {"kind": str, "cost": str, "budget_specs": list, "budgets": list, "other_budgets": dict,
           "members": list, "searcher": str, "score": str, "seed": int, "trials": int, "evaluations": int,
           "device": str, "batch": int}


def member_dir(index: int, cost: str, budget: float, digits: int = 4) -> str:
    """Member `index`'s folder name inside the family folder: `m1-macs3.2M`, `m2-latency_ms1.5ms`
    (`digits`: the budget's significant digits, more where a family's budgets need them to differ:
    `Cost.distinct_digits`)."""
    from nas.core.costs import BY_NAME

    return f"m{index}-{BY_NAME[cost].folder_part(budget, digits)}"


def is_family(folder: str | Path) -> bool:
    """Whether `folder` is a family search's folder (it holds `family.json`)."""
    return (Path(folder) / FAMILY).is_file()


def _problem(data: Any) -> str | None:
    """What is wrong with a family.json's content, or None."""
    if not isinstance(data, dict):
        return "not a JSON object"
    if data.get("kind") != KIND:
        return f"kind is {data.get('kind')!r}, not {KIND!r}"
    for key, kind in _FIELDS.items():
        if not isinstance(data.get(key), kind) or isinstance(data.get(key), bool):
            return f"'{key}' is missing or not a {kind.__name__}"
    if data["cost"] not in COST_NAMES:
        return f"cost {data['cost']!r} is not one of {', '.join(COST_NAMES)}"
    budgets = data["budgets"]
    if (not budgets or not all(_number(b) for b in budgets) or any(a >= b for a, b in zip(budgets, budgets[1:]))
            or len(data["budget_specs"]) != len(budgets)):
        return "'budgets' must be numbers in strictly increasing order, one per budget_specs entry"
    for number, member in enumerate(data["members"], 1):
        if not isinstance(member, dict):
            return f"member {number} is not an object"
        for key, kind in _MEMBER_FIELDS.items():
            value = member.get(key)
            if not isinstance(value, kind) or isinstance(value, bool) or (kind != str and not _finite(value)):
                return f"member {number}: '{key}' is missing or of the wrong type"
        if member["index"] != number or member["budget"] != budgets[number - 1]:
            return f"member {number}: index or budget out of order (members in ascending budget order)"
        if Path(member["dir"]).is_absolute() or ".." in Path(member["dir"]).parts:
            return f"member {number}: 'dir' must be a folder inside the family folder"
    if len(data["members"]) > len(budgets):
        return "more members than budgets"
    return None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _finite(value: Any) -> bool:
    return not isinstance(value, float) or math.isfinite(value)


def read_family(folder: str | Path) -> dict[str, Any]:
    """The content of `folder/family.json`, checked (see the module docstring); a missing or
    damaged file raises `SearchError` in one line naming it. `members` lists the members
    found so far (a family stopped between members lists fewer than `budgets`)."""
    path = Path(folder) / FAMILY
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise SearchError(f"{path}: no such file; {folder} is not a family search folder") from None
    except (OSError, ValueError) as e:
        raise SearchError(f"{path}: not readable as JSON ({clip_words(str(e))})",
                          fix="remove the family folder and search again") from None
    problem = _problem(data)
    if problem is not None:
        raise SearchError(f"{path}: not a family search's record ({problem})",
                          fix="remove the family folder and search again")
    return data


def write_family(folder: Path, data: Mapping[str, Any]) -> Path:
    """Write `folder/family.json` atomically (checked as `read_family` reads it)."""
    problem = _problem(dict(data))
    if problem is not None:      # the writer's own defect: never leave a file read_family refuses
        raise SearchError(f"{folder / FAMILY}: would not be readable ({problem})")
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
