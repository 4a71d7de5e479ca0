"""Typed conversion of plain YAML data into frozen dataclasses, collecting every problem.

`convert(cls, data, path)` walks the dataclass fields by their type hints (int, float, bool,
str, Optional, Literal, tuple[X, ...], dict, nested dataclasses) and returns the instance or
records `key.path: problem` lines. Checks that need several fields live in the dataclass's
`__post_init__`, which raises `ConfigError` with field-relative lines; they get the path too.
"""
from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Literal, Union

from nas.core.errors import ConfigError, clip
from nas.core.registry import did_you_mean

_MISSING = object()


class Problems(list):
    """(key path, problem) pairs gathered during one conversion."""

    def add(self, path: str, problem: str) -> None:
        self.append((path, problem))

    def lines(self, source_of: "typing.Callable[[str, str], str]") -> list[str]:
        """`SOURCE: key.path: problem` lines; `source_of(path, problem)` names the file or `--set`."""
        return [f"{source_of(path, problem)}: {path + ': ' if path else ''}{problem}" for path, problem in self]


def _join(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp) if a is not type(None))
    if origin is tuple:
        return f"list of {_type_name(typing.get_args(tp)[0])}"
    if dataclasses.is_dataclass(tp):
        return "mapping"
    return getattr(tp, "__name__", str(tp))


def convert(tp: Any, value: Any, path: str, problems: Problems) -> Any:
    """Convert `value` to type `tp`; on failure record a problem and return `_MISSING`."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return convert(inner[0], value, path, problems)
        for option in inner:
            attempt = Problems()
            result = convert(option, value, path, attempt)
            if not attempt:
                return result
        problems.add(path, f"expected {_type_name(tp)}, got {clip(value)}")
        return _MISSING
    if origin is Literal:
        if value in args:
            return value
        problems.add(path, f"{clip(value)} is not allowed; choose one of {', '.join(map(repr, args))}"
                     f"{did_you_mean(value, args)}")
        return _MISSING
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            problems.add(path, f"expected a list, got {clip(value)}")
            return _MISSING
        items = [convert(args[0], item, f"{path}[{i}]", problems) for i, item in enumerate(value)]
        return _MISSING if any(i is _MISSING for i in items) else tuple(items)
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            problems.add(path, f"expected a mapping, got {clip(value)}")
            return _MISSING
        return dict(value)
    if dataclasses.is_dataclass(tp):
        return convert_dataclass(tp, value, path, problems)
    return _convert_scalar(tp, value, path, problems)


def _convert_scalar(tp: type, value: Any, path: str, problems: Problems) -> Any:
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value):
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
    else:
        raise TypeError(f"unsupported config type {tp!r} at {path}")
    problems.add(path, f"expected {_type_name(tp)}, got {clip(value)}")
    return _MISSING


def convert_dataclass(cls: type, data: Any, path: str, problems: Problems) -> Any:
    """Build dataclass `cls` from a mapping; unknown keys get a did-you-mean suggestion."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        problems.add(path, f"expected a mapping, got {clip(data)}")
        return _MISSING
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    for key in data:
        if key not in fields:
            allowed = f"allowed: {', '.join(fields)}" if fields else "this section takes no keys"
            problems.add(_join(path, key), f"unknown key{did_you_mean(key, fields)}; {allowed}")
    kwargs, before = {}, len(problems)
    for name, field in fields.items():
        if name in data:
            kwargs[name] = convert(hints[name], data[name], _join(path, name), problems)
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            problems.add(_join(path, name), "missing (required)")
    if len(problems) > before:
        return _MISSING
    try:
        return cls(**kwargs)
    except ConfigError as e:
        for line in e.problems:
            field, sep, problem = line.partition(": ")
            if sep and field.split("[")[0].split(", ")[0] in fields:
                problems.add(_join(path, field), problem)
            else:
                problems.add(path, line)
        return _MISSING


def to_plain(value: Any) -> Any:
    """Plain YAML-able data (dicts, lists, scalars) from dataclasses and tuples."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    return value


def number_in(value: Any, low: float, high: float = math.inf, integer: bool = False) -> bool:
    """Whether `value` is a finite number (not a bool) in [`low`, `high`], a whole one if `integer`:
    the check of a number read back from a record that a user may have edited."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and low <= value <= high and (not integer or float(value).is_integer()))
