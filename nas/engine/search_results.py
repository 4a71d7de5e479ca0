"""results.jsonl of a search: one JSON record per evaluated arch, appended as it finishes.

A kill can tear the last line, which the next read drops; a line in the middle that is not a
search record is an error naming it. Two processes appending to one file (before searches
were locked) can leave an arch twice: a replay counts the first record of each arch.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from nas.core.errors import SearchError
from nas.core.files import with_path
from searchers.base import Record

_REQUIRED = ("trial", "arch", "arch_id", "val_top1", "macs", "params")


def _check_record(record: Any, path: Path, number: int) -> Record:
    if not isinstance(record, dict) or any(key not in record for key in _REQUIRED):
        raise SearchError(f"{path}:{number}: not a search record (needs {', '.join(_REQUIRED)}); "
                          "repair or remove the line")
    return record


def read_results(path: Path) -> list[Record]:
    """Records of results.jsonl; a torn last line (a killed search) is dropped from the file."""
    if not path.is_file():
        return []
    data = path.read_bytes()
    lines = data.split(b"\n")
    records, good = [], 0
    for number, line in enumerate(lines, 1):
        if not line.strip():
            good += len(line) + 1
            continue
        try:
            records.append(_check_record(json.loads(line), path, number))
            good += len(line) + 1
        except json.JSONDecodeError as e:
            if number < len(lines) - 1 or data.endswith(b"\n"):
                raise SearchError(f"{path}:{number}: not a JSON record ({e.msg}); repair or remove the line") from e
            with open(path, "r+b") as f:
                f.truncate(good)
    return records


def append_record(path: Path, record: Record) -> None:
    """Append `record` as one line and fsync (a kill leaves at most a torn last line)."""
    line = json.dumps(record, separators=(",", ":")) + "\n"
    try:
        with open(path, "a") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise with_path(e, path) from e


def unique_records(records: list[Record]) -> list[Record]:
    """The first record of every arch_id, in file order (a results.jsonl written by two
    processes at once holds some archs twice)."""
    first: dict[str, Record] = {}
    for record in records:
        first.setdefault(record["arch_id"], record)
    return list(first.values())
