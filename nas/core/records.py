"""Records read back through `nas.core.schema`'s typed conversion: a damaged one is one line.

The JSON files commands write into run, search and family folders (`family_export.json` ...)
may be edited, truncated or left from another version. `read_record` loads one into its frozen
dataclass, each field checked by its type hint (and the dataclass's own `__post_init__`), so a
reader never meets a wrong type: what cannot be trusted raises `RecordError` in one line naming
the file, the first bad key and what to do.
"""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any, TypeVar

from nas.core.errors import ConfigError, RecordError, clip, clip_words
from nas.core.schema import Problems, convert_dataclass

T = TypeVar("T")


def parse_record(cls: type[T], data: Any, path: str | Path, *, param: str | None = None,
                 fix: str | None = None, open_keys: bool = False) -> T:
    """`data` (a record's JSON content) as `cls`; `RecordError` naming `path` and its first bad key.
    `open_keys`: keys `cls` does not declare are left alone (a record that carries another
    record's further fields, as `shipped.json` carries an export's metrics), not refused."""
    problems = Problems()
    if open_keys and isinstance(data, dict):
        declared = {f.name for f in dataclasses.fields(cls)}      # type: ignore[arg-type]
        data = {key: value for key, value in data.items() if key in declared}
    value = convert_dataclass(cls, data, "", problems)
    if problems:
        key, problem = problems[0]
        found = _value_at(data, key)
        if problem.startswith("must be ") and found is not _ABSENT:      # a cross-field check: say what is there
            problem += f", got {clip(found, 60)}"
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise RecordError(f"{path}: damaged record: {key + ': ' if key else ''}{problem}{more}", param=param, fix=fix)
    return value


_ABSENT = object()


def _value_at(data: Any, key: str) -> Any:
    """The value at a problem's key path (`members[0].val_top1`) in `data`, or `_ABSENT`."""
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", key):
        try:
            data = data[int(part[1:-1])] if part.startswith("[") else data[part]
        except (KeyError, IndexError, TypeError):
            return _ABSENT
    return data


def read_record(cls: type[T], path: str | Path, *, param: str | None = None, fix: str | None = None,
                open_keys: bool = False) -> T:
    """The record at `path` as `cls` (`parse_record`); an unreadable file is a `RecordError` too."""
    return parse_record(cls, read_json(path, param=param, fix=fix), path, param=param, fix=fix, open_keys=open_keys)


def read_json(path: str | Path, *, param: str | None = None, fix: str | None = None) -> Any:
    """The JSON content of the file at `path`; `RecordError` naming it when it cannot be read."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise RecordError(f"{path}: cannot read it ({clip_words(str(e))})", param=param, fix=fix) from None


def field_problems(**checks: tuple[bool, str]) -> None:
    """Raise `ConfigError` with a `key: must be ...` line for each `key=(ok, want)` that is not ok:
    the cross-field checks of a record's `__post_init__`."""
    lines = [f"{key}: must be {want}" for key, (ok, want) in checks.items() if not ok]
    if lines:
        raise ConfigError(lines)


__all__ = ["field_problems", "parse_record", "read_json", "read_record"]
