"""`params`: the free baseline of counting an arch's parameters (more = predicted better)."""
from __future__ import annotations

from collections.abc import Sequence

from estimators.base import Estimator, EstimatorContext
from nas.core.arch import Arch
from nas.core.registry import ESTIMATORS


@ESTIMATORS.register("params")
class Params(Estimator):
    """Analytic parameter count of the arch (`ArchSpace.params`): no data, no weights."""

    name = "params"

    def scores(self, archs: Sequence[Arch], context: EstimatorContext) -> list[float]:
        return [float(context.space.params(arch)) for arch in archs]
