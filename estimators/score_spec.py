"""Score specs (`score` of a search, `estimators` of a fidelity measurement): one parser and one canonical spelling.

Grammar (spaces around `+` and `*` are ignored):

    spec      := component ("+" component)*
    component := [weight "*"] name
    weight    := ASCII decimal number: 2, 0.5, .5, 3e-2, 1.5E3 (no sign, no `_`, no `+` in the
                 exponent, no inf/nan), positive, finite and not denormal; none means 1
    name      := a registered estimator name, or table:PATH[:COLUMN] (`estimators/table.py`)

A `+` inside a table's PATH (`table:runs/a+b.csv`) is part of the path when the file exists:
after `table:`, the longest run of `+`-joined pieces that names an existing table is one
component.

A component appears once (`naswot+2*naswot` is refused rather than merged: give it one
weight). The weights together must sum to a finite number. The canonical spelling sorts the
components by name and writes each weight in its shortest form without a trailing `.0` or an
exponent `+` (`2*naswot` for `2`, `2.0`, `2.00`), leaving out a weight of 1; a spec of one
component is its estimator's name whatever the weight (a fusion of one ranks as its estimator
does), so `2*naswot`, ` naswot` and `naswot` are one score. Searches name their folders,
records and settings by the canonical spelling, so equal specs resume each other.
"""
from __future__ import annotations

import math
import re
import sys

from estimators.base import Estimator
from estimators.table import TableScore, check_spec, is_table_spec, named_file
from nas.core.errors import ConfigError, clip
from nas.core.registry import ESTIMATORS

PARAM = "score"     # the parameter a spec comes from, unless the caller names another
_WEIGHT = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE]-?[0-9]+)?")
_PLUS_EXPONENT = re.compile(r"(?<![A-Za-z0-9_.])[0-9.]+[eE]\+[0-9]+\s*\*")    # `1e+5*`: `+` joins components
_EXAMPLE = "write e.g. 2*supernet+naswot"


def parse_spec(spec: str, param: str = PARAM) -> list[tuple[float, str]]:
    """`(weight, name)` of every component of `spec`, sorted by name (grammar in the module
    docstring); anything outside the grammar, an unknown name (with a did-you-mean) or a
    repeated component is a one-line `ConfigError`/`RegistryError` naming `param`."""
    if not isinstance(spec, str):
        raise ConfigError(f"{param}: expected a score name or spec, got {clip(spec)}")
    if spec.strip() == "fused":
        raise ConfigError(f"{param}: a fusion names its components: write e.g. 2*supernet+naswot+synflow")
    if (plus := _PLUS_EXPONENT.search(spec)) is not None:
        raise ConfigError(f"{param}: '{plus.group().rstrip('*').strip()}' in '{clip(spec)}': write an exponent without "
                          f"'+' (1e5, not 1e+5), since '+' joins components")
    components: dict[str, float] = {}
    for term in _terms(spec):
        weight_text, star, name = term.strip().rpartition("*")
        weight_text, name = weight_text.strip(), name.strip()
        if not name:
            raise ConfigError(f"{param}: empty component in '{clip(spec)}'; {_EXAMPLE}")
        weight = _weight(weight_text, name, spec, param) if star else 1.0
        if is_table_spec(name):
            if "+" in spec and named_file(name) is None:
                raise ConfigError(f"{param}: {clip(name)}: no such table file ('+' joins components: the path of "
                                  f"a table holding '+' must name an existing file)")
            check_spec(name, param)    # a missing file or column: one line naming `param`
        else:
            ESTIMATORS.get(name, param)    # an unknown name: RegistryError naming `param`, with a did-you-mean
        if name in components:
            raise ConfigError(f"{param}: '{name}' appears twice in '{clip(spec)}'; give it one weight instead")
        components[name] = weight
    if not math.isfinite(sum(components.values())):
        raise ConfigError(f"{param}: the weights of '{clip(spec)}' sum beyond the largest float; scale them down")
    return sorted(((w, n) for n, w in components.items()), key=lambda c: c[1])


def _terms(spec: str) -> list[str]:
    """`spec` split at its `+`s, except those inside the path of an existing table file."""
    pieces, terms, start = spec.split("+"), [], 0
    while start < len(pieces):
        end = start + 1
        if is_table_spec(_name(pieces[start])):
            end = next((stop for stop in range(len(pieces), start, -1)
                        if named_file(_name("+".join(pieces[start:stop]))) is not None), end)
        terms.append("+".join(pieces[start:end]))
        start = end
    return terms


def _name(term: str) -> str:
    """The name of a component `[weight*]name`."""
    return term.rpartition("*")[2].strip()


def build_component(name: str, param: str = PARAM) -> Estimator:
    """The estimator of one component's name: a registered estimator or a table."""
    return TableScore(name, param) if is_table_spec(name) else ESTIMATORS.get(name, param).obj()


def _weight(text: str, name: str, spec: str, param: str) -> float:
    """A component's weight from its text (see the grammar)."""
    weight = float(text) if _WEIGHT.fullmatch(text) else math.nan
    if not (math.isfinite(weight) and weight >= sys.float_info.min):
        raise ConfigError(f"{param}: the weight of '{name}' in '{clip(spec)}' must be a positive decimal number "
                          f"such as 2, 0.5 or 1e-3 (finite, not denormal), got '{clip(text)}'")
    return weight


def format_weight(weight: float) -> str:
    """The canonical text of a weight: shortest round-trip digits, no `.0`, no exponent `+`."""
    text = repr(float(weight)).replace("e+", "e")
    return text[:-2] if text.endswith(".0") else text


def format_spec(components: list[tuple[float, str]]) -> str:
    """The canonical spelling of parsed components (module docstring)."""
    if len(components) == 1:
        return components[0][1]
    ordered = sorted(components, key=lambda c: c[1])
    return "+".join(name if weight == 1 else f"{format_weight(weight)}*{name}" for weight, name in ordered)


def canonical_spec(spec: str, param: str = PARAM) -> str:
    """`spec` in its canonical spelling (`format_spec(parse_spec(spec, param))`)."""
    return format_spec(parse_spec(spec, param))
