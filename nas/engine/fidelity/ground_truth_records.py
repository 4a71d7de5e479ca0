"""The fields of a ground-truth cache record (`nas.engine.fidelity.ground_truth`), checked one by one on read.

A record is trusted only when every field a training writes is present, of its type and in
its range, and names the (arch, seed) its file stands for, with the arch's analytic costs and
the optimiser steps its recipe trains (a record of another length is another training):
a cache shared by several users (or copied from elsewhere) may hold files written by another
version, cut short, or edited by hand, and a wrong number in one would silently move every
statistic computed from it.

How the training ran (`memory_format`, `compiled`, `precision`: `nas.engine.fidelity.variant`)
is checked when present; records written before those fields existed were trained eager, in the
memory format of their recipe's `train.channels_last` and the precision of its `train.precision`,
and stay valid without them. A compiled training differs from an eager one in more than the
last bits (by up to 0.5 points of top-1 on short runs), so compiled records are kept apart
(`compiled/`, `nas.engine.fidelity.ground_truth`), and so are bf16 trainings (`bf16/`, only
of a recipe saying `train.precision: bf16`: ground truths stay fp32 under `train.accelerate:
auto`); a record must say the variant its file stands for.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nas.core.arch import Arch, arch_id


@dataclass(frozen=True)
class Expected:
    """What the record of one (arch, seed) must say."""

    arch: Arch
    seed: int
    train_seed: int
    macs: int
    params: int
    steps: int
    compiled: bool = False
    precision: str = "fp32"           # what the training ran: "fp32" or "bf16" autocast
    recipe_precision: str = "fp32"    # its recipe's `train.precision`: what records without the field ran


def _is_int(value: Any, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _is_number(value: Any, low: float, high: float = math.inf) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and low <= value <= high)


def _field_problem(record: Mapping[str, Any], expected: Expected) -> str | None:
    """The first problem of `record`'s fields, without the file name."""
    want = {"arch_id": arch_id(expected.arch), "seed": expected.seed, "train_seed": expected.train_seed,
            "macs": expected.macs, "params": expected.params}
    for key in ("arch_id", "arch", "seed", "train_seed", "macs", "params", "test_top1", "test_top5", "steps",
                "seconds", "threads", "torch"):
        if key not in record:
            return f"no '{key}'"
    checks = {"arch_id": isinstance(record["arch_id"], str), "arch": isinstance(record["arch"], dict),
              "seed": _is_int(record["seed"], 0), "train_seed": _is_int(record["train_seed"], 0),
              "macs": _is_int(record["macs"], 1), "params": _is_int(record["params"], 1),
              "test_top1": _is_number(record["test_top1"], 0.0, 1.0),
              "test_top5": _is_number(record["test_top5"], 0.0, 1.0), "steps": _is_int(record["steps"], 1),
              "seconds": _is_number(record["seconds"], 0.0), "threads": _is_int(record["threads"], 1),
              "torch": isinstance(record["torch"], str)}
    ranges = {"seed": "an integer >= 0", "train_seed": "an integer >= 0", "macs": "an integer >= 1",
              "params": "an integer >= 1", "test_top1": "a fraction in [0, 1]", "test_top5": "a fraction in [0, 1]",
              "steps": "an integer >= 1", "seconds": "a finite number >= 0", "threads": "an integer >= 1",
              "arch": "a mapping", "arch_id": "a string", "torch": "a string"}
    for key, ok in checks.items():
        if not ok:
            return f"'{key}' must be {ranges[key]}, got {json_text(record[key])}"
    variant = _variant_problem(record)
    if variant is not None:
        return variant
    if record["test_top5"] < record["test_top1"]:
        return f"'test_top5' {record['test_top5']} is below 'test_top1' {record['test_top1']}"
    if arch_id(record["arch"]) != want["arch_id"]:
        return f"'arch' is another arch ({arch_id(record['arch'])}) than this file's {want['arch_id']}"
    for key, value in want.items():
        if record[key] != value:
            return f"'{key}' is {json_text(record[key])}, this file's (arch, seed) has {value}"
    if record["steps"] != expected.steps:
        return f"'steps' is {record['steps']}, this file's recipe trains {expected.steps} steps"
    if record.get("compiled", False) != expected.compiled:
        return (f"'compiled' is {json.dumps(record.get('compiled', False))}, this file's training runs "
                + ("compiled" if expected.compiled else "eager (compiled ones are kept in compiled/)"))
    precision = record.get("precision", expected.recipe_precision)
    if precision != expected.precision:
        return (f"'precision' is {json_text(precision)}, this file's training runs {expected.precision}"
                + (" (bf16 ones are kept in bf16/)" if expected.precision == "fp32" else ""))
    return None


def _variant_problem(record: Mapping[str, Any]) -> str | None:
    """The first problem of the optional fields saying how the training ran."""
    if "memory_format" in record and record["memory_format"] not in ("channels_last", "contiguous"):
        return f"'memory_format' must be 'channels_last' or 'contiguous', got {json_text(record['memory_format'])}"
    if "compiled" in record and not isinstance(record["compiled"], bool):
        return f"'compiled' must be true or false, got {json_text(record['compiled'])}"
    if "precision" in record and record["precision"] not in ("fp32", "bf16"):
        return f"'precision' must be 'fp32' or 'bf16', got {json_text(record['precision'])}"
    return None


def record_problem(record: Any, expected: Expected) -> str | None:
    """Why `record` (parsed JSON) is not a valid result of `expected`'s training, or None."""
    if not isinstance(record, dict):
        return f"not a JSON object ({type(record).__name__})"
    return _field_problem(record, expected)


def json_text(value: Any, limit: int = 40) -> str:
    """A short rendering of a JSON value for a one-line message."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."
