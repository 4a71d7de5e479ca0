"""Estimators: scores that rank subnets by predicted standalone accuracy (registered by name)."""
from estimators import macs, params, supernet  # noqa: F401  (registration)
from estimators.base import Estimator, EstimatorContext
from nas.core.registry import ESTIMATORS

__all__ = ["Estimator", "EstimatorContext", "build_estimator"]


def build_estimator(spec: str) -> Estimator:
    """The estimator a `--score` value names; an unknown name is a `RegistryError` with a
    did-you-mean."""
    return ESTIMATORS.get(spec).obj()
