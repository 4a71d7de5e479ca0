"""Estimators: scores that rank subnets by predicted standalone accuracy (registered by name)."""
from estimators import (  # noqa: F401  (registration)
    calibrated, grad_norm, jacov, macs, naswot, params, snip, supernet, synflow, zico)
from estimators.base import Estimator, EstimatorContext
from estimators.fused import Fused, is_fusion
from nas.core.registry import ESTIMATORS

__all__ = ["Estimator", "EstimatorContext", "Fused", "build_estimator"]


def build_estimator(spec: str) -> Estimator:
    """The estimator a `--score` value names: a registered name, or a rank fusion such as
    `2*supernet+naswot` (`estimators/fused.py`); an unknown name is a `RegistryError` naming
    `--score` with a did-you-mean."""
    spec = spec.strip()
    if is_fusion(spec):
        return Fused.from_spec(spec)
    return ESTIMATORS.get(spec).obj()
