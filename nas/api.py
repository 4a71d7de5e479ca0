"""The Python API: each function is one stage of YAML -> supernet -> train -> search -> export.

This is the only module that imports the plugin packages and wires the stages together; the
CLI is a thin layer over it.
"""
from __future__ import annotations

from typing import Any

import torch

from nas.config import RunConfig, load_config
from nas.costs import format_amount
from nas.data import dataset_info
from nas.registry import SPACES, load_plugins
from search_spaces.base import ArchSpace, Supernet

__all__ = ["build_space", "build_supernet", "load_config", "space_summary"]


def build_space(config: RunConfig) -> ArchSpace:
    """The architecture space a config describes (channels and classes from its dataset)."""
    load_plugins()
    entry = SPACES.get(config.space.name)
    in_chans, num_classes, _ = dataset_info(config.data.name, config.data.root, config.data.image_size)
    return entry.obj(config.space.options, in_chans, num_classes)


def build_supernet(config: RunConfig) -> Supernet:
    """A freshly initialised supernet, seeded by `train.seed` (global RNG state untouched)."""
    space = build_space(config)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.train.seed)
        return space.build_supernet()


def space_summary(config: RunConfig) -> dict[str, Any]:
    """Size, choices and min/max costs of a config's space (what `nas space` prints)."""
    space = build_space(config)
    low, high = space.min(), space.max()
    return {"space": config.space.name, "size": space.size(), "raw_size": space.raw_size(),
            "macs": {"min": space.macs(low), "max": space.macs(high)},
            "params": {"min": space.params(low), "max": space.params(high)},
            "choices": {k: list(v) for k, v in space.choices().items()}}


def format_space_summary(summary: dict[str, Any]) -> str:
    """Human-readable rendering of `space_summary`."""
    lines = [f"space {summary['space']}: {summary['size']:,} distinct architectures "
             f"({summary['raw_size']:,} raw choice combinations)",
             f"MACs   min {format_amount(summary['macs']['min'])}  max {format_amount(summary['macs']['max'])}",
             f"params min {format_amount(summary['params']['min'])}  max {format_amount(summary['params']['max'])}",
             f"{len(summary['choices'])} choices:"]
    lines += [f"  {key}: {values}" for key, values in summary["choices"].items()]
    return "\n".join(lines)
