"""MACs bins: equal-width intervals of a space's MACs range, shared by the samplers that draw
per bin, the MACs-stratified arch selection and the per-bin rank statistics."""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class MacsBins:
    """`count` equal-width MACs intervals from `low` (the min arch) to `high` (the max arch)."""

    low: int
    high: int
    count: int

    def index(self, macs: float) -> int:
        """The bin of `macs` (values outside the range go to the end bins)."""
        width = (self.high - self.low) / self.count
        if width <= 0:
            return 0
        return min(max(math.floor((macs - self.low) / width), 0), self.count - 1)

    def bounds(self, b: int) -> tuple[float, float]:
        """The MACs interval of bin `b`."""
        width = (self.high - self.low) / self.count
        return self.low + b * width, self.low + (b + 1) * width
