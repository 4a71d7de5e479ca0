"""`supernet`: the trained supernet's accuracy of an arch (inherited weights, BN recalibrated)."""
from __future__ import annotations

from collections.abc import Sequence

from estimators.base import Estimator, EstimatorContext
from nas.core.arch import Arch
from nas.core.errors import ConfigError
from nas.core.registry import ESTIMATORS, SUPERNET_SCORE


@ESTIMATORS.register(SUPERNET_SCORE)
class SupernetAccuracy(Estimator):
    """Top-1 of the arch inside the trained supernet after BN recalibration (what `nas search`
    ranked by before estimators existed): validation split in a search, test in `nas fidelity`."""

    name = SUPERNET_SCORE
    needs = frozenset({"supernet_top1"})
    cheap = False      # a BN recalibration and a pass over the split per arch: seconds

    def scores(self, archs: Sequence[Arch], context: EstimatorContext) -> list[float]:
        if context.supernet_top1 is None:
            raise ConfigError(f"score: '{SUPERNET_SCORE}' needs a trained run")
        return [float(context.supernet_top1(arch)) for arch in archs]
