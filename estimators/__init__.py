"""Estimators: scores that rank subnets by predicted standalone accuracy (registered by name)."""
from estimators import (  # noqa: F401  (registration)
    calibrated, grad_norm, jacov, macs, naswot, params, snip, supernet, synflow, zico)
from estimators.base import ESTIMATOR_BATCH_SIZE, ESTIMATOR_BATCHES, Estimator, EstimatorContext
from estimators.calibrated import Calibration, calibration_path, fit_calibrated
from estimators.fused import Fused, is_fusion
from nas.core.errors import ConfigError
from nas.core.registry import ESTIMATORS

__all__ = ["ESTIMATOR_BATCHES", "ESTIMATOR_BATCH_SIZE", "Calibration", "Estimator", "EstimatorContext", "Fused",
           "build_estimator", "calibration_path", "fit_calibrated"]


def build_estimator(spec: str) -> Estimator:
    """The estimator a `--score` value names: a registered name, or a rank fusion such as
    `2*supernet+naswot` (`estimators/fused.py`); an unknown name is a `RegistryError` naming
    `--score` with a did-you-mean."""
    spec = spec.strip()
    if is_fusion(spec):
        return Fused.from_spec(spec)
    if spec == "fused":
        raise ConfigError("--score: a fusion names its components: write e.g. 2*supernet+naswot+synflow")
    return ESTIMATORS.get(spec).obj()
