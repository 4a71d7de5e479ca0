"""`supernet`: the trained supernet's accuracy of an arch (inherited weights, BN recalibrated)."""
from __future__ import annotations

from collections.abc import Sequence

from estimators.base import Estimator, EstimatorContext
from nas.core.arch import Arch
from nas.core.errors import ConfigError
from nas.core.registry import ESTIMATORS


@ESTIMATORS.register("supernet")
class SupernetAccuracy(Estimator):
    """Top-1 of the arch inside the trained supernet after BN recalibration (what `nas search`
    ranked by before estimators existed): validation split in a search, test in `nas fidelity`."""

    name = "supernet"
    needs = frozenset({"supernet_top1"})
    cheap = False      # a BN recalibration and a pass over the split per arch: seconds

    def scores(self, archs: Sequence[Arch], context: EstimatorContext) -> list[float]:
        if context.supernet_top1 is None:
            raise ConfigError("--score: 'supernet' needs a trained run")
        return [float(context.supernet_top1(arch)) for arch in archs]
