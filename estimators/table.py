"""`table:PATH[:COLUMN]`: measured results read from a CSV file, as a score or a ground truth.

A table of results someone measured (NAS-Bench-201's 15,625 CIFAR-10 accuracies, a colleague's
trainings) ranks archs at zero cost: `nas search --score table:nb201_cifar10.csv` searches it
as NAS-Bench users do, `nas fidelity --ground-truth table:...` measures estimators against it.

The file is a CSV with a header row. The arch of a row is its `arch` column, a string of the
space's own notation (cell201: a NAS-Bench-201 string such as `|nor_conv_3x3~0|+|...|`) or a
YAML/JSON mapping of the choices (`{edge1<-0: conv_3x3, ...}`); without an `arch` column, its
`arch_id` column. The score is COLUMN, or the one column that is neither of those nor `index`
(several such columns: name one). PATH is everything after `table:` when no file is named by the
part before the last `:` (a `+` inside PATH is part of it when the file exists: see
`estimators/score_spec.py`).

Rows of archs with choices outside the space (a table of a wider space, or of another space's
notation: a NAS-Bench-201 string for a MobileNetV3 run) are skipped, and counted: a table none
of whose rows is an arch of the space is an error saying so. A malformed row, or a file that is
not UTF-8 text, is an error naming it.

One value per arch. Rows are read as the space's canonical archs. Two rows that write one arch
alike (the same string, mapping or id) must agree: if their values differ the table is an
error naming the lines and the arch, since a silent choice would make a search's answer depend
on row order and hide a merged file or a repeated run that the user must settle. Rows that
write one network differently (NAS-Bench-201 spells a network once per spelling of its dead
edges, each trained on its own) give the value of the row spelt canonically, or else the mean
of the spellings. An arch the table lacks is an error naming it, never a silent zero.
"""
from __future__ import annotations

import hashlib
import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path

from estimators.base import Estimator, EstimatorContext
from nas.core.yaml_io import loads as load_yaml
from nas.core.arch import Arch, arch_id
from nas.core.csv_rows import read_csv
from nas.core.errors import ArchError, ConfigError, clip
from nas.core.files import not_text
from search_spaces.base import ArchSpace

PREFIX = "table:"
KEY_COLUMNS = ("arch", "arch_id")
_loaded: dict[tuple, "TableValues"] = {}     # (path, mtime, size, column, space fingerprint) -> values


class TableValues(dict):
    """Arch id -> value of a table for one space; `skipped` counts rows of archs outside it,
    `scale` says how the values read as accuracies (`accuracy_scale`)."""

    def __init__(self, values: dict[str, float], skipped: int = 0, scale: float | None = None):
        super().__init__(values)
        self.skipped = skipped
        self.scale = scale


def is_table_spec(name: str) -> bool:
    """Whether a score name is a table (`table:PATH[:COLUMN]`)."""
    return isinstance(name, str) and name.startswith(PREFIX)


def named_file(spec: str) -> tuple[Path, str | None] | None:
    """(PATH, COLUMN or None) of `table:PATH[:COLUMN]` when PATH is an existing file, else None."""
    body = spec[len(PREFIX):]
    head, sep, column = body.rpartition(":")
    if sep and head and Path(head).is_file():
        return Path(head), column or None
    return (Path(body), None) if Path(body).is_file() else None


def split_spec(spec: str, param: str = "score") -> tuple[Path, str | None]:
    """(PATH, COLUMN or None) of `table:PATH[:COLUMN]`; a missing file is one line naming `param`."""
    named = named_file(spec)
    if named is None:
        raise ConfigError(f"{param}: {clip(spec)}: no such table file (write table:PATH.csv or table:PATH.csv:COLUMN)")
    return named


def _read(path: Path, param: str) -> tuple[list[str], list[dict[str, str]]]:
    """(header, rows) of the table file (`nas.core.csv_rows`: a byte-order mark and spaces after
    commas are read through)."""
    try:
        header, rows = read_csv(path)
    except UnicodeDecodeError as e:
        raise _not_text(path, param, e) from None
    if not header:
        raise ConfigError(f"{param}: {path}: an empty file; a table needs a header row")
    return header, rows


def _not_text(path: Path, param: str, error: UnicodeDecodeError) -> ConfigError:
    return ConfigError(f"{param}: {path}: {not_text(error)}; a table is a CSV file")


def check_spec(spec: str, param: str = "score") -> tuple[Path, str, str]:
    """(path, key column, score column) of a table spec, checked against its header row."""
    path, column = split_spec(spec, param)
    header = _read(path, param)[0]
    keys = [k for k in KEY_COLUMNS if k in header]
    if not keys:
        raise ConfigError(f"{param}: {path}: no arch column (the header needs 'arch' or 'arch_id'; it has "
                          f"{clip(', '.join(header))})")
    if column is None:
        values = [c for c in header if c not in (*KEY_COLUMNS, "index")]
        if len(values) != 1:
            raise ConfigError(f"{param}: {path}: name the score column (table:{path}:COLUMN), one of "
                              f"{clip(', '.join(values)) or '(none)'}")
        column = values[0]
    if column not in header:
        raise ConfigError(f"{param}: {path}: no column {column!r}; columns: {clip(', '.join(header))}")
    return path, keys[0], column


def _row_arch(space: ArchSpace, key_column: str, text: str, where: str) -> tuple[str, str, bool] | None:
    """(arch id, id of the arch as written, whether the row spells the arch canonically) of a
    row's key; None for a well-formed arch of other choices (a table of a wider space) or of
    another space's notation: the search never meets it."""
    if key_column == "arch_id":
        return text, text, True
    try:
        arch = space.arch_from_text(text)
        if arch is None and text.startswith("|"):
            return None           # a NAS-Bench-201 string, and this space is no cell201
        if arch is None:
            arch = load_yaml(text, where)
        if not isinstance(arch, dict):
            raise ArchError(f"{clip(text)!r} is no arch of space '{space.name}' (a notation of the space or a "
                            "mapping of its choices)")
    except (ArchError, ConfigError) as e:
        problem = str(e).splitlines()[0].removeprefix(f"{where}: ")
        raise ArchError(f"{where}: {problem}") from None
    try:
        canonical = space.canonical(arch)
    except ArchError:
        return None
    return arch_id(canonical), arch_id(dict(arch)), canonical == dict(arch)


def read_table(spec: str, space: ArchSpace, param: str = "score") -> TableValues:
    """Arch id -> value of a table spec for `space` (module docstring); read once per file state."""
    path, key_column, column = check_spec(spec, param)
    stat = path.stat()
    cache_key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size, column, space.fingerprint())
    if cache_key not in _loaded:
        _loaded[cache_key] = _read_rows(path, key_column, column, space, param)
    return _loaded[cache_key]


def _read_rows(path: Path, key_column: str, column: str, space: ArchSpace, param: str) -> TableValues:
    rows: dict[str, list[tuple[str, bool, float, int]]] = {}
    skipped, first_skipped = 0, None
    for line, row in enumerate(_read(path, param)[1], start=2):
        where = f"{path}: line {line}"
        text = (row.get(key_column) or "").strip()
        key = _row_arch(space, key_column, text, where)
        if key is None:
            skipped, first_skipped = skipped + 1, first_skipped or f"line {line}: {clip(text)}"
            continue
        ident, written, spelt = key
        try:
            value = float(row.get(column) or "")
        except ValueError:
            raise ConfigError(f"{where}: {column}: {clip(row.get(column))!r} is not a number") from None
        if not math.isfinite(value):
            raise ConfigError(f"{where}: {column}: {value} is not a finite number")
        rows.setdefault(ident, []).append((written, spelt, value, line))
    if not rows:
        raise ConfigError(f"{param}: {path}: " + (
            f"none of its {skipped} rows is an arch of space '{space.name}' (rows of other spaces or choices are "
            f"skipped; {first_skipped})" if skipped else "no rows (only a header)"))
    values = {ident: _one_value(found, ident, path, param) for ident, found in rows.items()}
    return TableValues(values, skipped, accuracy_scale(values, f"{param}: {path}: column '{column}'"))


def accuracy_scale(values: Mapping[str, float], where: str) -> float | None:
    """How a column's values read as accuracies: 100 for percentages, 1 for fractions, None
    for values that are no accuracies (one lies outside [0, 100]: a loss, a latency). Fractions
    when every value lies in [0, 1]; percentages (NAS-Bench-201's 94.37) when every value lies
    in [0, 100] and most exceed 1 (a few below 1 are accuracies under 1%, a dead network's on
    many classes). Values above 1 in a minority are a mixed column (a fraction table with stray
    percentages), which ranks and reads wrongly whatever rule is applied: `ConfigError` naming
    `where` and two archs, for a score and a ground truth alike."""
    if any(not 0 <= v <= 100 for v in values.values()):
        return None
    above = [ident for ident, v in values.items() if v > 1]
    if not above:
        return 1.0
    if 2 * len(above) > len(values):
        return 100.0
    below = next(ident for ident, v in values.items() if v <= 1)
    raise ConfigError(f"{where}: mixes fractions and percentages ({len(above)} of {len(values)} values above 1, "
                      f"e.g. arch {above[0]}: {values[above[0]]:g}; arch {below}: {values[below]:g}); give every "
                      "value on one scale")


def _one_value(found: list[tuple[str, bool, float, int]], ident: str, path: Path, param: str) -> float:
    """The value of one arch's rows `(written id, spelt canonically, value, line)` (module
    docstring): rows written alike must agree; then the canonically spelt row's value, else the
    mean over the spellings."""
    spellings: dict[str, tuple[bool, float]] = {}
    for written, spelt, value, _ in found:
        if written in spellings and spellings[written][1] != value:
            alike = [(line, v) for w, _, v, line in found if w == written]
            raise ConfigError(f"{param}: {path}: lines {', '.join(str(line) for line, _ in alike)} give arch {ident} "
                              f"different values ({', '.join(f'{v:g}' for _, v in alike)}); keep one row per arch")
        spellings.setdefault(written, (spelt, value))
    canonical = [value for spelt, value in spellings.values() if spelt]
    return canonical[0] if canonical else statistics.fmean(value for _, value in spellings.values())


def digest(path: Path) -> str:
    """First 10 hex digits of sha1 of the file's bytes: which table a measurement read."""
    return hashlib.sha1(path.read_bytes()).hexdigest()[:10]


def lookup(values: dict[str, float], arch: Arch, space: ArchSpace, spec: str) -> float:
    """The table's value of `arch`; one line naming the arch (and the table) when it lacks it."""
    ident = arch_id(space.canonical(arch))
    if ident not in values:
        label = space.arch_label(arch)
        skipped = getattr(values, "skipped", 0)
        raise ArchError(f"{spec}: arch {ident}{f' ({label})' if label else ''} is not in the table "
                        f"({len(values)} archs of space '{space.name}'"
                        + (f"; {skipped} rows of other spaces or choices skipped)" if skipped else ")"))
    return values[ident]


class TableScore(Estimator):
    """The value a CSV table gives each arch (module docstring): no data, no weights."""

    needs = frozenset()
    cheap = True

    def __init__(self, spec: str, param: str = "score"):
        check_spec(spec, param)
        self.name = spec

    def scores(self, archs: Sequence[Arch], context: EstimatorContext) -> list[float]:
        values = read_table(self.name, context.space)
        return [lookup(values, arch, context.space, self.name) for arch in archs]
