"""Append-only JSON-lines files that survive a killed process: one record per line, fsynced.

A process killed mid-append leaves at most one torn last line, which `read_records` drops
from the file; a bad line anywhere else is an error naming the file and line. The one reader
and writer of every such file: a search's and a fidelity run's records, a run's `metrics.jsonl`.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from nas.core.errors import NasError
from nas.core.files import with_path, write_text


def read_records(path: Path, error: type[NasError] = NasError) -> list[dict[str, Any]]:
    """Records of `path` (none when it does not exist); a torn last line is truncated away."""
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
            records.append(json.loads(line))
            good += len(line) + 1
        except json.JSONDecodeError as e:
            if number < len(lines) - 1 or data.endswith(b"\n"):
                raise error(f"{path}:{number}: not a JSON record ({e.msg}); repair or remove the line") from e
            with open(path, "r+b") as f:
                f.truncate(good)
    return records


def _line(record: Mapping[str, Any]) -> str:
    return json.dumps(record, separators=(",", ":")) + "\n"


def keep_records(path: Path, keep: Callable[[dict[str, Any]], bool], error: type[NasError] = NasError) -> None:
    """Replace `path` (atomically) by its records that `keep` accepts; untouched when it keeps them all."""
    records = read_records(path, error)
    kept = [record for record in records if keep(record)]
    if len(kept) < len(records):
        write_records(path, kept)


def write_records(path: Path, records: Sequence[Mapping[str, Any]]) -> None:
    """Replace `path` (atomically) by `records`, one line each."""
    write_text(path, "".join(_line(record) for record in records))


def append_record(path: Path, record: Mapping[str, Any]) -> None:
    """Append `record` as one line and fsync, so a finished record survives a crash; an
    `OSError` (a full disk) becomes one line naming the file."""
    line = _line(record)
    try:
        with open(path, "a") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise with_path(e, path) from e
