"""A search's records: `results.jsonl`, appended as each evaluation finishes, and `ranked.jsonl`,
every record with its final score, best first, written when the search ends (for a population
score only when it completes: the final scores rank all archs together).

A kill can tear the last line of results.jsonl, which the next read drops (`nas.engine.jsonl`);
a line in the middle that is not a search record is an error naming it. Two processes appending
to one file (before searches were locked) can leave an arch twice: a replay counts the first
record of each arch.

A population score (a rank fusion) ranks each arch among the archs evaluated before it, which
is what the searcher is told, and not the arch's final score: results.jsonl keeps that value as
`score_told` and no `score_value`, so that only ranked.jsonl, whose `score_value` is every
arch's rank among all of them, can be sorted into the search's result.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from nas.core.errors import SearchError
from nas.engine.jsonl import append_record, read_records, write_records
from searchers.base import Record, rank_key

__all__ = ["append_record", "as_logged", "as_told", "read_results", "unique_records", "write_ranked"]

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
    write_records(path, sorted(records, key=rank_key))
