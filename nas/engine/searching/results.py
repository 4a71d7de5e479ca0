"""A search's records: `results.jsonl`, appended as each evaluation finishes, and `ranked.jsonl`,
every record with its final score, best first, written when the search ends (for a population
score only when it completes: the final scores rank all archs together).

A kill can tear the last line of results.jsonl, which the next read drops (`nas.core.jsonl`);
a line in the middle that is not a search record is an error naming it. Two processes appending
to one file (before searches were locked) can leave an arch twice: a replay counts the first
record of each arch.

A population score (a rank fusion) ranks each arch among the archs evaluated before it, which
is what the searcher is told, and not the arch's final score: results.jsonl keeps that value as
`score_told` and no `score_value`, so that only ranked.jsonl, whose `score_value` is every
arch's rank among all of them, can be sorted into the search's result.

`SearchRun` is what a search loop ends with; `SearchResult` is what a search returns (`nas.search`).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nas.core.arch import Arch
from nas.core.errors import NasError, SearchError
from nas.core.jsonl import append_record, read_records, write_records
from nas.core.registry import SUPERNET_SCORE

if TYPE_CHECKING:     # searchers loads Optuna: `nas.api` imports this module, a search loads that
    from nas.engine.searching.costs import SearchCosts
    from searchers.base import Record

__all__ = ["RANKED", "RESULTS", "SearchResult", "SearchRun", "append_record", "as_logged", "as_told", "read_results",
           "to_dataframe", "unique_records", "write_ranked"]

RESULTS, RANKED = "results.jsonl", "ranked.jsonl"

_REQUIRED = ("trial", "arch", "arch_id", "macs", "params")
_SCORED = ("score_value", "score_told", "val_top1")     # at least one (older searches recorded val_top1 only)


def read_results(path: Path) -> list[Record]:
    """Records of results.jsonl; a torn last line (a killed search) is dropped from the file."""
    records = read_records(path, SearchError)
    for number, record in enumerate(records, 1):
        if (not isinstance(record, dict) or any(key not in record for key in _REQUIRED)
                or not any(key in record for key in _SCORED)):
            raise SearchError(f"{path}:{number}: not a search record (needs {', '.join(_REQUIRED)} and "
                              f"{' or '.join(_SCORED)}); repair or remove the line")
    return records


def unique_records(records: list[Record]) -> list[Record]:
    """The first record of every arch_id, in file order (a results.jsonl written by two
    processes at once holds some archs twice)."""
    first: dict[str, Record] = {}
    for record in records:
        first.setdefault(record["arch_id"], record)
    return list(first.values())


def as_logged(record: Record, population: bool) -> Record:
    """The results.jsonl line of an evaluation: for a population score, the value the searcher
    was told as `score_told` instead of `score_value`."""
    if not population:
        return record
    return {("score_told" if key == "score_value" else key): value for key, value in record.items()}


def as_told(record: Record) -> Record:
    """A results.jsonl line as its searcher was told it (`score_value` = `score_told`), to replay."""
    if "score_value" in record or "score_told" not in record:
        return record
    return {("score_value" if key == "score_told" else key): value for key, value in record.items()}


def write_ranked(path: Path, records: Sequence[Record]) -> None:
    """Replace `path` (ranked.jsonl) by `records` (with their final `score_value`) best first:
    highest `score_value`, then fewer MACs, then the earlier trial (the order `best.yaml` and
    `summary.json` take their best from)."""
    from searchers.base import rank_key

    write_records(path, sorted(records, key=rank_key))


@dataclass
class SearchResult:
    """Outcome of `run_search`: the best arch and where everything was written.

    Attributes:
        best: The best arch (highest score within the budgets), canonical.
        arch_id, val_top1, macs, params, latency_ms: Its id and metrics (val_top1 None when
            the score did not evaluate the supernet; latency predicted by the table, None
            without one).
        dir: The search directory.
        evaluated: Evaluations in the search (all workers of a shared study).
        new: Evaluations made by this call (0 when re-run on a finished search).
        record: The best arch's results.jsonl record.
        latency_check: Predicted vs measured latency of `best` (None without a table and export).
        notes: Things the caller should tell the user (fewer feasible archs than asked...).
        front: The records on the Pareto front of the score against MACs, by increasing MACs.
        trials: Every evaluated record of the search (results.jsonl), in trial order; for a
            population score, with `score_value` the final one (the told one in `score_told`).
        score, score_value: What ranked the candidates and the best arch's value of it.
        finalists: With `finalists=K`: the finalists stage (`nas.engine.searching.finalists`:
            each finalist's two measures, the winner, which is `best`, and the score's own best).
        optimised_for: What the score optimises, in words (`SearchRequest.objective`).
        score_line, score_reason: Why `auto` chose the score, in one short line and with the
            whole evidence (None when the caller named it).
        latency_table: Where `latency_ms` came from (`{"table", "device", "batch"}`; None without
            a latency table).
    """

    best: Arch
    arch_id: str
    val_top1: float | None
    macs: int
    params: int
    latency_ms: float | None
    dir: Path
    evaluated: int
    new: int
    record: Record
    latency_check: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    front: list[Record] = field(default_factory=list)
    trials: list[Record] = field(default_factory=list)
    score: str = SUPERNET_SCORE
    score_value: float | None = None
    finalists: dict[str, Any] | None = None
    optimised_for: str = ""
    score_line: str | None = None
    score_reason: str | None = None
    latency_table: dict[str, Any] | None = None

    def to_dataframe(self) -> Any:
        """`trials` as a pandas DataFrame, one row per evaluated arch and one `arch.<key>` column
        per choice (needs pandas, which nas does not install)."""
        return to_dataframe(self.trials, "SearchResult.to_dataframe")

    def to_json(self) -> dict[str, Any]:
        """What `nas search --json` prints: `{"best", "val_top1"?, "macs", "dir", "score", "score_value", ...}`."""
        data = {"best": self.best, **({"val_top1": self.val_top1} if self.val_top1 is not None else {}),
                "macs": self.macs, "dir": str(self.dir), "arch_id": self.arch_id, "params": self.params,
                "evaluated": self.evaluated, "score": self.score, "score_value": self.score_value,
                "optimised_for": self.optimised_for, "score_line": self.score_line,
                "score_reason": self.score_reason}
        if self.latency_ms is not None:
            data["latency_ms"] = self.latency_ms
        if self.latency_table is not None:
            data["latency_table"] = self.latency_table
        if self.latency_check is not None:
            data["latency_check"] = self.latency_check
        if self.finalists is not None:
            data["finalists"] = self.finalists
        return data


@dataclass(frozen=True)
class SearchRun:
    """What a search loop ended with: every record of the search (all workers; for a population
    score with its final `score_value` when `final`, else as told), the evaluations this call
    made (`new`), the evaluations it aimed for (`target`), notes for the user, the searcher's
    options in effect and the costs (for the latency check of the answer)."""

    history: list[Record]
    new: int
    target: int
    notes: list[str]
    options: dict[str, Any]
    costs: SearchCosts
    final: bool = True


def to_dataframe(rows: Sequence[Mapping[str, Any]], what: str) -> Any:
    """A pandas DataFrame of `rows`, one column per key (arch choices as `arch.<key>` columns)."""
    try:
        import pandas
    except ImportError:
        raise NasError(f"{what}: needs pandas, which is not installed; `pip install pandas`, or read the "
                       f"records as a list of dicts") from None
    flat = []
    for row in rows:
        arch = row.get("arch", {})
        flat.append({**{k: v for k, v in row.items() if k != "arch"}, **{f"arch.{k}": v for k, v in arch.items()}})
    return pandas.DataFrame(flat)
