"""Whole-network timings a user measured on a target device, read from a CSV file.

A timings file has a header row with an `arch` column and a milliseconds column (default
`latency_ms`; any column name may be chosen, e.g. one per device). An arch cell is any form
`nas` accepts: an arch id of the space (for spaces small enough to list, see `ID_LIMIT`),
inline JSON (`{"edge1<-0": "conv_3x3", ...}`), the path of a YAML/JSON arch file (relative
to the CSV's folder), or, in `cell201` spaces, a NAS-Bench-201 string
(`|nor_conv_3x3~0|+|...|`). Every arch is mapped to its canonical form in the space.

Bad rows are reported as `FILE: line N: ...` (all of them, at most a few printed); values must
be finite and > 0. Milliseconds read as seconds are caught by their magnitude (a warning).

Several rows may time one network (repeated measurements, or NAS-Bench-201 strings that differ
only on dead edges). `Timings.per_arch` gives one point per distinct canonical arch: the median
of its rows written in canonical form, or of all its rows when none is (a repeated measurement
is evidence about one network, not a second network: a fit that counted it twice would hold out
a row while its twin stays in training). Timings of one arch more than `FAR_OFF` times apart are
reported (a warning naming the lines): one of them is likely a mistake. Rows written
differently (dead edges) may differ more: a runtime may run the dead edges.
"""
from __future__ import annotations

import json
import math
import statistics
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nas.core.arch import Arch, arch_id, read_arch_file
from nas.core.csv_rows import read_csv
from nas.core.errors import ArchError, ConfigError, clip
from nas.core.files import not_text
from search_spaces.base import ArchSpace

ARCH_COLUMN = "arch"
DEFAULT_COLUMN = "latency_ms"
ID_LIMIT = 20_000          # arch ids are resolved by listing spaces of at most this many raw archs
SECONDS_LIKE_MS = 0.05     # a median below this many ms reads as seconds (no whole network runs in 50 us)
MICROSECONDS_LIKE_MS = 1e5  # a median above this (100 s per forward pass) reads as microseconds
MAX_PROBLEMS = 20
FAR_OFF = 2.0              # timings of one arch this many times apart are reported


@dataclass
class Timings:
    """Canonical archs and their milliseconds, in file order (`raw`: the archs as written,
    `lines`: their lines in the file, when read from one)."""

    path: Path
    column: str
    archs: list[Arch]
    ms: list[float]
    raw: list[Arch]
    lines: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.archs)

    def per_arch(self) -> "ArchTimings":
        """One point per distinct canonical arch (module docstring), in order of first
        appearance; warns of archs written alike whose timings lie more than `FAR_OFF` times apart."""
        rows: dict[str, list[int]] = {}
        for index, arch in enumerate(self.archs):
            rows.setdefault(arch_id(arch), []).append(index)
        archs, ms, counts, far_off = [], [], [], []
        for indices in rows.values():
            spelt = [i for i in indices if dict(self.raw[i]) == self.archs[i]]
            archs.append(self.archs[indices[0]])
            ms.append(statistics.median(self.ms[i] for i in spelt or indices))
            counts.append(len(indices))
            far_off += self._far_off(indices)
        if far_off:
            warnings.warn(f"{self.path}: {len(far_off)} archs are timed more than {FAR_OFF:g}x apart in rows "
                          f"written alike (first: {far_off[0]}); their median is used: check the outlying timings")
        return ArchTimings(archs, ms, counts)

    def _far_off(self, indices: list[int]) -> list[str]:
        """The description of each written form among `indices` timed more than `FAR_OFF` times apart."""
        forms: dict[str, list[int]] = {}
        for i in indices:
            forms.setdefault(arch_id(self.raw[i]), []).append(i)
        found = []
        for same in forms.values():
            values = [self.ms[i] for i in same]
            if max(values) > FAR_OFF * min(values):
                where = ", ".join(f"line {self.lines[i]}: {self.ms[i]:g} ms" if self.lines else f"{self.ms[i]:g} ms"
                                  for i in same[:5])
                found.append(f"arch {arch_id(self.archs[same[0]])}, {where}")
        return found


@dataclass(frozen=True)
class ArchTimings:
    """One point per distinct canonical arch: its milliseconds (a median, see `Timings.per_arch`)
    and how many rows timed it."""

    archs: list[Arch]
    ms: list[float]
    counts: list[int]

    def __len__(self) -> int:
        return len(self.archs)


def read_timings(path: str | Path, space: ArchSpace, column: str = DEFAULT_COLUMN, flag: str = "timings") -> Timings:
    """The timings of `path` (a CSV as described in the module docstring) for `space`.

    Raises `ConfigError` (one line per bad row, `FILE: line N: ...`) for a missing file or
    column, archs of another space, unknown archs, and missing, non-numeric, zero or negative
    values; warns when the values look like seconds or microseconds.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{flag}: {path}: no such file")
    try:
        header, rows = read_csv(path)
    except UnicodeDecodeError as e:
        raise ConfigError(f"{flag}: {path}: {not_text(e)}; timings are a CSV file") from None
    for needed in (ARCH_COLUMN, column):
        if needed not in header:
            raise ConfigError(f"{flag}: {path}: no column '{needed}' (columns: {', '.join(header) or 'none'})")
    if not rows:
        raise ConfigError(f"{flag}: {path}: no timings (only a header)")
    resolver = ArchResolver(space, path.parent)
    archs, raw, ms, lines, problems = [], [], [], [], []
    for line, row in enumerate(rows, start=2):
        try:
            arch = resolver(row.get(ARCH_COLUMN) or "")
            value = _milliseconds(row.get(column), column)
        except (ArchError, ConfigError) as e:
            problems.append(f"{path}: line {line}: {str(e).splitlines()[0]}")
            continue
        raw.append(arch)
        archs.append(space.canonical(arch))
        ms.append(value)
        lines.append(line)
    if problems:
        if resolver.foreign == len(rows):
            raise ConfigError(f"{flag}: {path}: its archs belong to another space, not '{space.name}' "
                              f"(first row: {problems[0].split(': ', 2)[-1]})")
        raise ConfigError(problems[:MAX_PROBLEMS] + ([f"... {len(problems) - MAX_PROBLEMS} more bad rows"]
                                                      if len(problems) > MAX_PROBLEMS else []))
    warn_units(ms, f"{path} column '{column}'")
    return Timings(path, column, archs, ms, raw, lines)


def warn_units(ms: list[float], where: str) -> None:
    """Warn when the median of `ms` reads as seconds or microseconds rather than milliseconds."""
    median = statistics.median(ms)
    if median < SECONDS_LIKE_MS:
        warnings.warn(f"{where}: median {median:.3g} ms is implausibly fast for a whole network; "
                      "were these seconds? the column must be in milliseconds (multiply seconds by 1000)")
    elif median > MICROSECONDS_LIKE_MS:
        warnings.warn(f"{where}: median {median:.3g} ms is over 100 s per forward pass; were these "
                      "microseconds? the column must be in milliseconds (divide microseconds by 1000)")


def _milliseconds(text: Any, column: str) -> float:
    if text is None or not str(text).strip():
        raise ConfigError(f"{column}: missing value")
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{column}: {text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{column}: must be a finite number of milliseconds > 0, got {text.strip()}")
    return value


class ArchResolver:
    """An arch cell of a timings file (id, JSON, arch file, NAS-Bench-201 string) -> an arch of `space`."""

    def __init__(self, space: ArchSpace, folder: Path):
        self.space, self.folder = space, folder
        self.foreign = 0       # cells whose keys are another space's
        self._ids: dict[str, Arch] | None = None

    def __call__(self, cell: str) -> Arch:
        text = cell.strip()
        if not text:
            raise ArchError("arch: missing")
        if text.startswith("{"):
            arch = self._parse_json(text)
        elif text.startswith("|"):
            arch = self.space.arch_from_text(text)
            if arch is None:
                self.foreign += 1
                raise ArchError(f"arch: {clip(text)!r} is a NAS-Bench-201 string, which only a cell201 space reads "
                                f"(this space is '{self.space.name}')")
        elif (self.folder / text).suffix in (".yaml", ".yml", ".json"):
            arch = read_arch_file(self.folder / text)
        else:
            return self._by_id(text)
        self._check_keys(arch)
        self.space.validate(arch)
        return arch

    def _parse_json(self, text: str) -> Arch:
        try:
            arch = json.loads(text)
        except json.JSONDecodeError as e:
            raise ArchError(f"arch: not valid JSON ({e.msg})") from None
        if not isinstance(arch, dict):
            raise ArchError("arch: JSON must be a mapping of choice names to values")
        return arch

    def _check_keys(self, arch: Arch) -> None:
        expected = set(self.space.choices())
        if set(arch) != expected:
            if not set(arch) & expected:
                self.foreign += 1
            missing, extra = sorted(expected - set(arch)), sorted(set(arch) - expected)
            raise ArchError(f"arch: keys do not match space '{self.space.name}' (missing {missing[:3]}, "
                            f"unknown {extra[:3]})")

    def _by_id(self, text: str) -> Arch:
        if self._ids is None:
            if self.space.raw_size() > ID_LIMIT:
                raise ArchError(f"arch: {text!r}: arch ids are resolved only in spaces of at most {ID_LIMIT} "
                                f"archs; give the arch as JSON or an arch file")
            self._ids = {arch_id(a): a for a in map(self.space.canonical, self.space.enumerate())}
        if text not in self._ids:
            raise ArchError(f"arch: {text!r} is no arch id of space '{self.space.name}'")
        return dict(self._ids[text])


def split_spec(spec: str) -> tuple[Path, str | None]:
    """`PATH` or `PATH:COLUMN` -> (path, column or None); a `.json` path is a table file."""
    path, sep, column = str(spec).rpartition(":")
    if sep and path and column and not Path(spec).exists():
        return Path(path), column
    return Path(spec), None
