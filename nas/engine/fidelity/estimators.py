"""The estimators a fidelity measurement reports beside the supernet (`estimators` of `fidelity`).

Each estimator (`estimators/`) scores the measured archs once; the scores go into each arch's
line of results.jsonl (`"estimators": {name: score}`), and a resumed measurement computes only
the scores its lines lack (all of them again for a population estimator, whose scores depend
on the archs scored together). A score that is not finite is stored as null and leaves that
arch out of the estimator's statistics. `calibrated` is fitted on the measurement itself
(`calibrated_scores`): its scores are its leave-one-out predictions.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from estimators import Estimator, EstimatorContext, build_estimator, canonical_spec
from estimators.defaults import default_score
from nas.core.arch import Arch, arch_id
from nas.core.errors import ConfigError
from nas.core.registry import ESTIMATORS, SUPERNET_SCORE

BASELINES = ("macs", "params")      # the free baselines the verdict compares the supernet with
CALIBRATED = "calibrated"           # fitted on the measurement itself: only when asked for
PARAM = "estimators"                # the parameter of `fidelity` its errors name


def default_names(space: Any = None) -> list[str]:
    """`supernet` and every registered estimator that is cheap, but `calibrated`; with `space` (an
    `ArchSpace`), also the score `auto` uses for it without a fidelity summary and that score's
    fusion with the supernet, so that the evidence `auto` reads after this measurement covers the
    default it replaces and whether the supernet adds to it."""
    cheap = [n for n in ESTIMATORS.names() if ESTIMATORS.get(n).obj.cheap and n not in (SUPERNET_SCORE, CALIBRATED)]
    names = [SUPERNET_SCORE, *cheap]
    if space is not None:
        spec, _ = default_score(space)
        names += [canonical_spec(spec, PARAM), canonical_spec(f"{SUPERNET_SCORE}+{spec}", PARAM)]
    return list(dict.fromkeys(names))


def parse_names(spec: str | Sequence[str] | None, space: Any = None) -> list[str]:
    """The estimators to report: `spec` (comma-separated names or fusion specs, or a list) or the
    default, each in its canonical spelling (`estimators/score_spec.py`: `b+2*a` and `2.0*a+b`
    are one estimator); `supernet` and the free baselines are always among them (the verdict
    needs them).

    Raises:
        ConfigError: an empty name or a spec outside the grammar (naming `estimators`).
        RegistryError: an unknown name (naming `estimators`).
    """
    if spec is None:
        names = default_names(space)
    else:
        names = [n.strip() for n in (spec.split(",") if isinstance(spec, str) else spec)]
        if not all(names):
            raise ConfigError(f"{PARAM}: expected comma-separated estimator names, got {spec!r}")
        names = [canonical_spec(n, PARAM) for n in names]
    ordered = [SUPERNET_SCORE, *BASELINES, *names]
    return list(dict.fromkeys(ordered))


def build_estimators(names: Sequence[str]) -> dict[str, Estimator]:
    """The estimator of each name (except `calibrated`, which is fitted later); an unknown name
    or a bad fusion is one line naming `estimators`."""
    built = {}
    for name in names:
        if name == CALIBRATED:
            continue
        built[name] = build_estimator(name, PARAM)
    return built


def score_archs(estimators: Mapping[str, Estimator], archs: Sequence[Arch], context: EstimatorContext,
                stored: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, float | None]]:
    """`{arch_id: {name: score}}` for every arch and estimator: the `stored` scores, and the
    missing ones computed now (a population estimator's for every arch again)."""
    scores = {arch_id(a): dict(stored.get(arch_id(a), {})) for a in archs}
    for name, estimator in estimators.items():
        missing = [a for a in archs if name not in scores[arch_id(a)]]
        if not missing:
            continue
        targets = list(archs) if estimator.population else missing
        for arch, value in zip(targets, estimator.scores(targets, context)):
            scores[arch_id(arch)][name] = float(value) if math.isfinite(value) else None
    return scores


def needs_batches(estimators: Mapping[str, Estimator]) -> bool:
    """Whether any of `estimators` reads the context's batches."""
    return any("batches" in e.needs for e in estimators.values())


@dataclass
class Scoring:
    """What a measurement reports beside the supernet: the names in report order (`calibrated`
    included when asked for), the built estimators, and the context they score in."""

    names: list[str]
    estimators: dict[str, Estimator]
    context: EstimatorContext


def scoring(names: Sequence[str], context: EstimatorContext) -> Scoring:
    """A `Scoring` of `names` (see `parse_names`, `build_estimators`)."""
    return Scoring(list(names), build_estimators(names), context)


def calibrated_scores(archs: Sequence[Arch], targets: Sequence[float], scores: Mapping[str, Mapping[str, Any]],
                      context: EstimatorContext, ground_truth: str) -> list[float]:
    """Fit `calibrated` on this measurement (standalone top-1 `targets` of `archs`), save it in
    the run folder with the ground truth's id, and return its leave-one-out predictions: the
    honest scores of a model fitted on the very archs it is judged on."""
    try:     # estimators/calibrated.py comes with the estimators plugins; absent, say so
        from estimators.calibrated import DEFAULT_FEATURES, calibration_path, fit_calibrated
    except ImportError:
        raise ConfigError(f"{PARAM}: 'calibrated' is not available in this installation "
                          "(estimators/calibrated.py is missing)") from None
    if context.run_dir is None:
        raise ConfigError(f"{PARAM}: 'calibrated' is stored in a run folder; measure a run")
    given = {name: [scores[arch_id(a)][name] for a in archs] for name in DEFAULT_FEATURES
             if all(scores[arch_id(a)].get(name) is not None for a in archs)}
    calibration = fit_calibrated(archs, targets, context, ground_truth=ground_truth, feature_scores=given)
    calibration.save(calibration_path(context.run_dir))
    return [float(v) for v in calibration.loo_predictions]
