"""Estimators: scores that rank subnets by predicted standalone accuracy (registered by name)."""
from estimators import grad_norm, jacov, macs, naswot, params, snip, supernet, synflow, zico  # noqa: F401
from estimators.base import Estimator, EstimatorContext
from nas.core.registry import ESTIMATORS

__all__ = ["Estimator", "EstimatorContext", "build_estimator"]


def build_estimator(spec: str) -> Estimator:
    """The estimator a `--score` value names; an unknown name is a `RegistryError` with a
    did-you-mean."""
    return ESTIMATORS.get(spec).obj()
