"""Amounts of MACs and parameters as people write them: `20M`, `1.2G`, `150K`.

MACs are multiply-accumulates (FLOPs = 2 x MACs); this module only reads and prints them.
"""
from __future__ import annotations

import math
import re

from nas.core.errors import ConfigError

_SUFFIX = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_AMOUNT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([kKmMgGtT]?)\s*$")


def parse_amount(text: str | float | int, what: str = "amount") -> float:
    """`"20M"` -> 20e6, `"1.2G"` -> 1.2e9, `"1500"` -> 1500; errors name `what`.

    Amounts are finite: `1e400` (which floats read as infinity) is an error, not "no budget"."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        match = _AMOUNT.match(str(text))
        if not match:
            raise ConfigError(f"{what}: cannot read {text!r}; use a number with an optional K/M/G suffix, e.g. 20M")
        value = float(match.group(1)) * _SUFFIX[match.group(2).upper()]
    if not math.isfinite(value):
        raise ConfigError(f"{what}: {text!r} is not a finite amount; give a number such as 20M")
    return value


def format_amount(value: float) -> str:
    """`20_000_000` -> `"20.00M"`."""
    for suffix in ("T", "G", "M", "K"):
        if abs(value) >= _SUFFIX[suffix]:
            return f"{value / _SUFFIX[suffix]:.2f}{suffix}"
    return f"{value:g}"


def format_share(fraction: float) -> str:
    """A share as a percentage that never reads 0% for a non-zero share: `25%`, `1%`, `0.47%`, `0.005%`."""
    percent = 100 * fraction
    if percent == 0 or percent >= 1:
        return f"{percent:.0f}%"
    return f"{percent:.2g}%"
