"""`one_shot`: weight-sharing training with a sampler and in-place distillation (BigNAS).

Filled in by the training issue; registered here so configs validate.
"""
from __future__ import annotations

from dataclasses import dataclass

from nas.errors import ConfigError
from nas.registry import STRATEGIES


@dataclass(frozen=True)
class OneShotOptions:
    label_smoothing: float = 0.1   # on the labels of the max subnet (teacher), BigNAS/AttentiveNAS

    def __post_init__(self) -> None:
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ConfigError(f"label_smoothing: must be in [0, 1), got {self.label_smoothing}")


@STRATEGIES.register("one_shot", options=OneShotOptions)
class OneShotStrategy:
    """Placeholder until the training issue lands."""
