"""results.jsonl of a search: one JSON record per evaluated arch, appended as it finishes.

A kill can tear the last line, which the next read drops (`nas.core.jsonl`); a line in the
middle that is not a search record is an error naming it. Two processes appending to one file
(before searches were locked) can leave an arch twice: a replay counts the first record of
each arch.
"""
from __future__ import annotations

from pathlib import Path

from nas.core.errors import SearchError
from nas.core.jsonl import append_record, read_records
from searchers.base import Record

__all__ = ["append_record", "read_results", "unique_records"]

_REQUIRED = ("trial", "arch", "arch_id", "macs", "params")
_SCORED = ("score_value", "val_top1")     # at least one (older searches recorded val_top1 only)


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
