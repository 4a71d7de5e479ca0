"""`calibrated`: a ridge model fitted on a fidelity ground truth, predicting standalone top-1.

Features of an arch: its one-hot encoding (`space.encode`) and, for each chosen estimator,
the rank of its score among the ground truth's scores of that estimator (normalised to
[0, 1]; a new arch's score is placed by linear interpolation between them, clamped), so a
log-determinant and a MAC count weigh alike. The features are standardised and a ridge
regression (scikit-learn `RidgeCV`, its penalty chosen by its own efficient leave-one-out
over `ALPHAS`) maps them to the standalone test top-1. The honest measure of such a model is
its leave-one-out Kendall tau: every arch predicted by a model fitted (rank maps, scaler and
penalty included) without it. With tens of labels a ridge on ranks is about as good as an
unweighted rank fusion; the LOO tau says whether it is better on this space.

The model is stored as JSON (no pickle) at `RUN/estimators/calibrated.json`, which the
registered estimator reads; `nas fidelity RUN --estimators ...,calibrated` fits it.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from estimators.base import Estimator, EstimatorContext
from estimators.fused import is_fusion
from nas.core.arch import Arch
from nas.core.errors import ConfigError
from nas.core.files import write_json
from nas.core.ranks import average_ranks, kendall_tau_b
from nas.core.registry import ESTIMATORS
from nas.core.wording import command

# Leave-one-out over fewer archs leaves too few pairs to tell a fit from chance (at 8 archs,
# 28 pairs, a tau must pass about 0.57 to be significant at 5%), and the ridge would have
# fewer labels than the smallest space's encoding has free choices.
MIN_ARCHS = 8
DEFAULT_FEATURES = ("macs", "naswot", "synflow")
ALPHAS = tuple(float(a) for a in np.logspace(-3, 3, 13))
FORMAT = 1


def calibration_path(run_dir: Path) -> Path:
    """Where a run's calibrated model is stored."""
    return Path(run_dir) / "estimators" / "calibrated.json"


@dataclass
class RankMap:
    """Places a score among reference scores: the normalised average rank (0 lowest, 1 highest)
    of a reference score, linear in between, clamped outside."""

    scores: list[float]     # distinct reference scores, ascending
    ranks: list[float]      # their normalised average ranks

    @classmethod
    def of(cls, reference: Sequence[float]) -> RankMap:
        values = np.asarray(reference, dtype=float)
        ranks = (average_ranks(values) - 1) / max(len(values) - 1, 1)
        distinct, first = np.unique(values, return_index=True)
        return cls([float(v) for v in distinct], [float(r) for r in ranks[first]])

    def __call__(self, values: Sequence[float]) -> np.ndarray:
        return np.interp(np.asarray(values, dtype=float), self.scores, self.ranks)


@dataclass
class _Ridge:
    """A fitted model: rank maps of the estimator features, the scaler and the ridge."""

    rank_maps: dict[str, RankMap]
    mean: list[float]
    scale: list[float]
    coef: list[float]
    intercept: float
    alpha: float

    def predict(self, encodings: np.ndarray, scores: Mapping[str, Sequence[float]]) -> np.ndarray:
        x = _design(encodings, scores, self.rank_maps)
        return (x - np.asarray(self.mean)) / np.asarray(self.scale) @ np.asarray(self.coef) + self.intercept


def _design(encodings: np.ndarray, scores: Mapping[str, Sequence[float]], maps: Mapping[str, RankMap]) -> np.ndarray:
    columns = [maps[name](scores[name])[:, None] for name in maps]
    return np.hstack([encodings, *columns])


def _fit_ridge(encodings: np.ndarray, scores: Mapping[str, Sequence[float]], targets: np.ndarray) -> _Ridge:
    from sklearn.linear_model import RidgeCV   # imported on use: only fitting needs scikit-learn
    from sklearn.preprocessing import StandardScaler

    maps = {name: RankMap.of(values) for name, values in scores.items()}
    x = _design(encodings, scores, maps)
    scaler = StandardScaler().fit(x)
    ridge = RidgeCV(alphas=ALPHAS).fit(scaler.transform(x), targets)
    return _Ridge(maps, scaler.mean_.tolist(), scaler.scale_.tolist(), ridge.coef_.tolist(),
                  float(ridge.intercept_), float(ridge.alpha_))


@dataclass
class Calibration:
    """A ridge model of standalone top-1, with how well it ranks held-out archs.

    Attributes:
        space: Fingerprint of the space it was fitted on.
        ground_truth: The caller's id of the ground truth (e.g. its cache folder and recipe digest).
        features: Names of the estimators whose ranks are features (beside the encoding).
        model: The ridge fitted on every arch of the ground truth.
        loo_kendall_tau: Kendall tau-b of `loo_predictions` against the targets (None if undefined).
        loo_predictions: Each arch's prediction by the model fitted without it.
        targets: The standalone test top-1 it was fitted on.
        context: The seed and init seeds its proxy features were computed with.
    """

    space: str
    ground_truth: str
    features: tuple[str, ...]
    model: _Ridge
    loo_kendall_tau: float | None
    loo_predictions: list[float]
    targets: list[float]
    context: dict = field(default_factory=dict)

    @property
    def feature_names(self) -> list[str]:
        """Column names: `encode[i]` for the encoding, then the estimators' names."""
        width = len(self.model.coef) - len(self.features)
        return [f"encode[{i}]" for i in range(width)] + list(self.features)

    def predict(self, archs: Sequence[Arch], context: EstimatorContext,
                feature_scores: Mapping[str, Sequence[float]] | None = None) -> np.ndarray:
        """Predicted standalone top-1 of `archs`; `feature_scores` may hold precomputed scores."""
        scores = _feature_scores(self.features, archs, context, feature_scores)
        return self.model.predict(_encodings(archs, context), scores)

    def save(self, path: str | Path) -> Path:
        """Write the model as JSON (coefficients, scaler, rank maps, feature names, ground truth id)."""
        data = {"format": FORMAT, **asdict(self), "feature_names": self.feature_names}
        data["features"] = list(self.features)
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        return write_json(path, data)

    @classmethod
    def load(cls, path: str | Path) -> Calibration:
        """Read a model `save` wrote; anything else is a `ConfigError` naming `score` and the path."""
        try:
            data = json.loads(Path(path).read_text())
            if data.get("format") != FORMAT:
                raise ValueError(f"format {data.get('format')!r}, expected {FORMAT}")
            model = data["model"]
            model["rank_maps"] = {k: RankMap(**v) for k, v in model["rank_maps"].items()}
            return cls(data["space"], data["ground_truth"], tuple(data["features"]), _Ridge(**model),
                       data["loo_kendall_tau"], data["loo_predictions"], data["targets"], data["context"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            raise ConfigError(f"score: cannot read the calibrated model {path}: {error}") from error


def _encodings(archs: Sequence[Arch], context: EstimatorContext) -> np.ndarray:
    return np.stack([context.space.encode(arch).double().numpy() for arch in archs])


def _feature_scores(features: Sequence[str], archs: Sequence[Arch], context: EstimatorContext,
                    given: Mapping[str, Sequence[float]] | None) -> dict[str, list[float]]:
    scores = {}
    for name in features:
        if given is not None and name in given:
            values = [float(v) for v in given[name]]
        else:
            values = ESTIMATORS.get(name).obj().scores(archs, context)
        if len(values) != len(archs) or not all(math.isfinite(v) for v in values):
            raise ConfigError(f"calibrated: feature '{name}' must give one finite score per arch")
        scores[name] = values
    return scores


def fit_calibrated(archs: Sequence[Arch], targets: Sequence[float], context: EstimatorContext,
                   features: Sequence[str] = DEFAULT_FEATURES, ground_truth: str = "",
                   feature_scores: Mapping[str, Sequence[float]] | None = None) -> Calibration:
    """Fit the ridge on a ground truth and measure it by leave-one-out.

    Args:
        archs: The ground truth's archs (at least `MIN_ARCHS`).
        targets: Their standalone test top-1, in order.
        context: The estimator context the features are computed in.
        features: Registered estimator names whose ranks join the encoding (not fusions, not
            `calibrated`).
        ground_truth: An id of the ground truth, stored with the model.
        feature_scores: Scores of some features already computed for `archs` (by name).
    """
    if len(archs) != len(targets):
        raise ValueError(f"{len(archs)} archs but {len(targets)} targets")
    if len(archs) < MIN_ARCHS:
        raise ConfigError(f"archs: calibrated needs a ground truth of at least {MIN_ARCHS} archs to fit and "
                          f"measure by leave-one-out, got {len(archs)}")
    for name in features:
        if name == "calibrated" or is_fusion(name):
            raise ConfigError(f"calibrated: feature '{name}' must be one registered estimator other than calibrated")
        ESTIMATORS.get(name)
    y = np.asarray(targets, dtype=float)
    encodings = _encodings(archs, context)
    scores = _feature_scores(features, archs, context, feature_scores)
    loo = []
    for i in range(len(archs)):
        keep = np.arange(len(archs)) != i
        fold = _fit_ridge(encodings[keep], {n: np.asarray(v)[keep] for n, v in scores.items()}, y[keep])
        loo.append(float(fold.predict(encodings[i:i + 1], {n: [v[i]] for n, v in scores.items()})[0]))
    tau = kendall_tau_b(loo, y)
    return Calibration(context.space.fingerprint(), ground_truth, tuple(features), _fit_ridge(encodings, scores, y),
                       tau if math.isfinite(tau) else None, loo, y.tolist(),
                       {"seed": context.seed, "init_seeds": context.init_seeds})


@ESTIMATORS.register("calibrated")
class Calibrated(Estimator):
    """The predictions of `RUN/estimators/calibrated.json` (module docstring), fitted by
    `nas fidelity RUN --estimators ...,calibrated`. Reads what its feature estimators read."""

    name = "calibrated"
    needs = frozenset({"run_dir", "batches"})
    cheap = False      # costs its features, and is only defined once fitted

    def scores(self, archs: Sequence[Arch], context: EstimatorContext) -> list[float]:
        return [float(v) for v in load_calibration(context).predict(archs, context)]

    def check(self, context: EstimatorContext) -> None:
        load_calibration(context)


def load_calibration(context: EstimatorContext) -> Calibration:
    """The run's calibrated model (read once per context); a missing one is a one-line error
    saying how to fit it."""
    how = f"fit it on a fidelity ground truth with `{command('fidelity', 'RUN', estimators='...,calibrated')}`"
    if context.run_dir is None:
        raise ConfigError(f"score: 'calibrated' needs a trained run with a fitted model; {how}")
    path = calibration_path(context.run_dir)
    key = ("calibration", str(path))
    if key not in context.cache:
        if not path.is_file():
            raise ConfigError(f"score: 'calibrated' has no fitted model ({path} is missing); {how}")
        calibration = Calibration.load(path)
        if calibration.space != context.space.fingerprint():
            raise ConfigError(f"score: {path} was fitted on another space (fingerprint {calibration.space}, "
                              f"this run's is {context.space.fingerprint()}); {how}")
        context.cache[key] = calibration
    return context.cache[key]
