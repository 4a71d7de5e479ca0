"""Estimators: scores that rank subnets by predicted standalone accuracy (registered by name)."""
from estimators import (  # noqa: F401  (registration)
    calibrated, grad_norm, jacov, macs, naswot, params, snip, supernet, synflow, zico)
from estimators.base import ESTIMATOR_BATCH_SIZE, ESTIMATOR_BATCHES, Estimator, EstimatorContext
from estimators.calibrated import Calibration, calibration_path, fit_calibrated
from estimators.fused import Fused
from estimators.score_spec import build_component, canonical_spec, parse_spec

__all__ = ["ESTIMATOR_BATCHES", "ESTIMATOR_BATCH_SIZE", "Calibration", "Estimator", "EstimatorContext", "Fused",
           "build_estimator", "calibration_path", "canonical_spec", "fit_calibrated"]


def build_estimator(spec: str, param: str = "score") -> Estimator:
    """The estimator a `score` value names: a registered name, or a rank fusion such as
    `2*supernet+naswot` (grammar in `estimators/score_spec.py`; a spec of one component is that
    estimator); a spec outside the grammar or an unknown name (with a did-you-mean) is one line
    naming `param` (the caller's parameter the spec came from)."""
    components = parse_spec(spec, param)
    if len(components) == 1:
        return build_component(components[0][1], param)
    return Fused(components)
