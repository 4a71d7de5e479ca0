"""The calibrated ridge: recovers a planted function, refuses small ground truths, round-trips JSON."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from estimators import EstimatorContext, build_estimator
from estimators.calibrated import MIN_ARCHS, Calibration, calibration_path, fit_calibrated
from nas.core.errors import ConfigError
from nas.core.ranks import kendall_tau_b
from tests.conftest import make_space


def _ground_truth(count: int, seed: int = 0):
    """`count` distinct archs of a small cell space (drawn with `seed`), and a planted linear
    function of their encodings (the same for every seed) as targets."""
    space = make_space("cell201", small=True)
    rng = random.Random(seed)
    archs, seen = [], set()
    while len(archs) < count:
        arch = space.sample(rng)
        code = tuple(space.encode(arch).tolist())
        if code not in seen:
            seen.add(code)
            archs.append(arch)
    width = len(space.encode(archs[0]))
    weights = torch.linspace(-1, 1, width)[torch.randperm(width, generator=torch.Generator().manual_seed(0))]
    targets = [0.5 + 0.1 * float(space.encode(a) @ weights) for a in archs]
    return space, archs, targets


def test_recovers_a_planted_linear_function_of_the_encoding():
    space, archs, targets = _ground_truth(40)
    calibration = fit_calibrated(archs, targets, EstimatorContext(space=space), features=(), ground_truth="planted")
    assert calibration.loo_kendall_tau > 0.9
    assert kendall_tau_b(calibration.loo_predictions, targets) == pytest.approx(calibration.loo_kendall_tau)
    fresh_space, fresh, fresh_targets = _ground_truth(60, seed=1)
    predicted = calibration.predict(fresh, EstimatorContext(space=fresh_space))
    assert kendall_tau_b(predicted, fresh_targets) > 0.9


def test_estimator_features_enter_as_ranks_and_save_load_round_trips(tmp_path):
    space, archs, targets = _ground_truth(12)
    context = EstimatorContext(space=space, init_seeds=1)
    calibration = fit_calibrated(archs, targets, context, features=("macs", "synflow"), ground_truth="gt-1")
    path = calibration.save(calibration_path(tmp_path))
    data = json.loads(path.read_text())
    assert data["ground_truth"] == "gt-1" and data["features"] == ["macs", "synflow"]
    assert data["feature_names"][-2:] == ["macs", "synflow"]
    assert len(data["feature_names"]) == len(data["model"]["coef"]) == len(data["model"]["mean"])
    assert data["model"]["rank_maps"]["macs"]["ranks"][0] == 0 and data["model"]["rank_maps"]["macs"]["ranks"][-1] == 1
    loaded = Calibration.load(path)
    others = [space.sample(random.Random(7)) for _ in range(5)]
    for batch in (archs, others):
        assert np.array_equal(loaded.predict(batch, context), calibration.predict(batch, context))
    run_context = EstimatorContext(space=space, run_dir=tmp_path, init_seeds=1)
    assert build_estimator("calibrated").scores(others, run_context) == calibration.predict(others, context).tolist()


def test_rank_features_use_the_ground_truths_scores():
    # a feature that is a monotone transform of the target: its rank dominates the fit, and a
    # new score beyond the ground truth's range is placed at the top rank
    space, archs, targets = _ground_truth(20)
    context = EstimatorContext(space=space)
    given = [float(np.exp(30 * t)) for t in targets]
    calibration = fit_calibrated(archs, targets, context, features=("macs",), feature_scores={"macs": given})
    assert calibration.loo_kendall_tau > 0.8
    coef = np.abs(calibration.model.coef)
    assert coef[-1] == coef.max()
    top = calibration.predict(archs[:1], context, {"macs": [max(given)]})
    assert calibration.predict(archs[:1], context, {"macs": [1e30]}) == pytest.approx(top)


def test_too_few_archs_are_refused_in_one_line():
    space, archs, targets = _ground_truth(MIN_ARCHS - 1)
    with pytest.raises(ConfigError, match=f"archs: calibrated needs a ground truth of at least {MIN_ARCHS} archs"):
        fit_calibrated(archs, targets, EstimatorContext(space=space), features=())


def test_a_missing_model_names_score_and_how_to_fit_it(tmp_path):
    space = make_space("cell201", small=True)
    with pytest.raises(ConfigError, match=r"score: 'calibrated' has no fitted model .*`nas\.api\.fidelity\(RUN, "
                                          r"estimators='\.\.\.,calibrated'\)`$"):
        build_estimator("calibrated").scores([space.max()], EstimatorContext(space=space, run_dir=tmp_path))
    with pytest.raises(ConfigError, match="score: 'calibrated' needs a trained run"):
        build_estimator("calibrated").scores([space.max()], EstimatorContext(space=space))
    calibration_path(tmp_path).parent.mkdir(parents=True)
    calibration_path(tmp_path).write_text("{not json")
    with pytest.raises(ConfigError, match="score: cannot read the calibrated model"):
        build_estimator("calibrated").scores([space.max()], EstimatorContext(space=space, run_dir=tmp_path))
