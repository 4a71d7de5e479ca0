"""Records read back through `nas.core.schema`'s typed conversion: a damaged one is one line.

The JSON files commands write into run, search and family folders (`family_export.json` ...)
may be edited, truncated or left from another version. `read_record` loads one into its frozen
dataclass, each field checked by its type hint (and the dataclass's own `__post_init__`), so a
reader never meets a wrong type: what cannot be trusted raises `RecordError` in one line naming
the file, the first bad key and what to do.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

from nas.core.errors import ConfigError, RecordError, clip_words
from nas.core.schema import Problems, convert_dataclass

T = TypeVar("T")


def parse_record(cls: type[T], data: Any, path: str | Path, *, param: str | None = None,
                 fix: str | None = None) -> T:
    """`data` (a record's JSON content) as `cls`; `RecordError` naming `path` and its first bad key."""
    problems = Problems()
    value = convert_dataclass(cls, data, "", problems)
    if problems:
        key, problem = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise RecordError(f"{path}: damaged record: {key + ': ' if key else ''}{problem}{more}", param=param, fix=fix)
    return value


def read_record(cls: type[T], path: str | Path, *, param: str | None = None, fix: str | None = None) -> T:
    """The record at `path` as `cls` (`parse_record`); an unreadable file is a `RecordError` too."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise RecordError(f"{path}: cannot read it ({clip_words(str(e))})", param=param, fix=fix) from None
    return parse_record(cls, data, path, param=param, fix=fix)


def field_problems(**checks: tuple[bool, str]) -> None:
    """Raise `ConfigError` with a `key: must be ...` line for each `key=(ok, want)` that is not ok:
    the cross-field checks of a record's `__post_init__`."""
    lines = [f"{key}: must be {want}" for key, (ok, want) in checks.items() if not ok]
    if lines:
        raise ConfigError(lines)


__all__ = ["field_problems", "parse_record", "read_record"]
