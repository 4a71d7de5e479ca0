"""What `nas space` prints: a config's space (size, choices, min/max costs) and, for a trained
run, its sub-supernets."""
from __future__ import annotations

from typing import Any

from nas.core.amounts import format_amount
from nas.core.config import RunConfig
from nas.engine.run import Run, build_space


def space_summary(config: RunConfig) -> dict[str, Any]:
    """Size, choices and min/max costs of a config's space (what `nas space` prints)."""
    space = build_space(config)
    low, high = space.min(), space.max()
    return {"space": config.space.name, "size": space.size(), "raw_size": space.raw_size(),
            "macs": {"min": space.macs(low), "max": space.macs(high)},
            "params": {"min": space.params(low), "max": space.params(high)},
            "choices": {k: list(v) for k, v in space.choices().items()}}


def run_space_summary(run: Run) -> dict[str, Any]:
    """`space_summary` of a trained run's config plus its sub-supernets (one for a one-shot
    run): each one's split values, its choices that differ from the full space's, and its size."""
    summary = space_summary(run.config)
    full = run.space.choices()
    summary["sub_supernets"] = [
        {"split": {key: list(values) for key, values in route.items()},
         "restricted": {key: list(values) for key, values in space.choices().items() if values != full[key]},
         "size": space.size()} for route, space in run.strategy.sub_spaces()]
    return summary


def format_space_summary(summary: dict[str, Any]) -> str:
    """Human-readable rendering of `space_summary` (and of `run_space_summary`)."""
    lines = [f"space {summary['space']}: {summary['size']:,} distinct architectures "
             f"({summary['raw_size']:,} raw choice combinations)",
             f"MACs   min {format_amount(summary['macs']['min'])}  max {format_amount(summary['macs']['max'])}",
             f"params min {format_amount(summary['params']['min'])}  max {format_amount(summary['params']['max'])}",
             f"{len(summary['choices'])} choices:"]
    lines += [f"  {key}: {values}" for key, values in summary["choices"].items()]
    parts = summary.get("sub_supernets", [])
    if parts:
        lines.append(f"{len(parts)} sub-supernet{'s' if len(parts) > 1 else ''}:")
        for index, part in enumerate(parts):
            restricted = ", ".join(f"{k}: {v}" for k, v in part["restricted"].items()) or "the full space"
            lines.append(f"  [{index}] {part['size']:,} architectures; {restricted}")
    return "\n".join(lines)
