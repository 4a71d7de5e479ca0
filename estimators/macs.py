"""`macs`: the free baseline of counting an arch's multiply-accumulates (more = predicted better)."""
from __future__ import annotations

from collections.abc import Sequence

from estimators.base import Estimator, EstimatorContext
from nas.core.arch import Arch
from nas.core.registry import ESTIMATORS


@ESTIMATORS.register("macs")
class Macs(Estimator):
    """Analytic MACs of the arch (`ArchSpace.macs`): no data, no weights."""

    name = "macs"

    def scores(self, archs: Sequence[Arch], context: EstimatorContext) -> list[float]:
        return [float(context.space.macs(arch)) for arch in archs]
