"""Rank fusion: parsing of `--score` specs, ranks by hand, and one component keeping its order."""
from __future__ import annotations

import random

import numpy as np
import pytest

from estimators import EstimatorContext, Fused, build_estimator
from estimators.base import Estimator
from nas.core.errors import ConfigError, RegistryError
from nas.core.registry import ESTIMATORS, Entry, NoOptions
from tests.conftest import make_space


def _fixed(name: str, values: list[float], needs: frozenset = frozenset()) -> type:
    class Fixed(Estimator):
        def scores(self, archs, context):
            return values[:len(archs)]
    Fixed.name, Fixed.needs = name, needs
    return Fixed


@pytest.fixture
def fixed_estimators(monkeypatch):
    for name, values, needs in [("fixed_a", [3, 1, 2, 2], frozenset({"batches"})),
                                ("fixed_b", [10, 20, 30, 40], frozenset({"supernet_top1"}))]:
        monkeypatch.setitem(ESTIMATORS._entries, name, Entry(name, _fixed(name, values, needs), NoOptions))


def test_weighted_fusion_by_hand(fixed_estimators):
    # ranks of a: 4, 1, 2.5, 2.5 -> 1, 0, 1/2, 1/2; of b: 0, 1/3, 2/3, 1; (2 a + b) / 3
    fused = build_estimator("2*fixed_a + fixed_b")
    assert isinstance(fused, Fused) and fused.population
    assert fused.name == "2*fixed_a+fixed_b"
    assert fused.needs == {"batches", "supernet_top1"}
    archs = [{"i": i} for i in range(4)]
    context = EstimatorContext(space=make_space("cell201", small=True))
    assert fused.scores(archs, context) == pytest.approx([2 / 3, 1 / 9, 5 / 9, 2 / 3])


def test_fusion_scores_each_arch_of_a_component_once_per_context(monkeypatch):
    """A search re-ranks its population after every trial: components are not re-run."""
    calls = []

    class Counting(Estimator):
        name = "counting"

        def scores(self, archs, context):
            calls.extend(archs)
            return [float(context.space.macs(a)) for a in archs]

    monkeypatch.setitem(ESTIMATORS._entries, "counting", Entry("counting", Counting, NoOptions))
    space = make_space("cell201", small=True)
    rng = random.Random(1)
    archs = list({str(a): a for a in (space.sample(rng) for _ in range(8))}.values())
    context = EstimatorContext(space=space)
    fused = build_estimator("counting+macs")
    first = fused.scores(archs[:3], context)
    everything = fused.scores(archs, context)
    assert len(calls) == len(archs)          # the first three were not scored again
    assert everything == fused.scores(archs, EstimatorContext(space=space))   # memo changes no value
    assert first == fused.scores(archs[:3], EstimatorContext(space=space))


def test_fusion_of_one_estimator_keeps_its_order():
    space = make_space("cell201", small=True)
    rng = random.Random(0)
    archs = [space.sample(rng) for _ in range(12)]
    context = EstimatorContext(space=space)
    macs = build_estimator("macs").scores(archs, context)
    fused = Fused([(1.0, "macs")]).scores(archs, context)       # a spec of one component is the estimator
    assert len(set(macs)) < len(macs)    # ties among the archs, which must stay tied
    assert np.array_equal(np.sign(np.subtract.outer(fused, fused)), np.sign(np.subtract.outer(macs, macs)))
    assert min(fused) == 0 and max(fused) == 1


def test_unknown_component_is_one_line_naming_score_with_a_did_you_mean():
    with pytest.raises(RegistryError) as error:
        build_estimator("supernet+naswto")
    message = str(error.value)
    assert message.startswith("score: unknown estimator 'naswto' (did you mean 'naswot'?)")
    assert "\n" not in message
    with pytest.raises(RegistryError, match="did you mean 'synflow'"):
        build_estimator("synflw")


@pytest.mark.parametrize("spec, message", [
    ("x*naswot", "score: the weight of 'naswot' in 'x\\*naswot' must be a positive decimal number such as 2, "
                 "0.5 or 1e-3 \\(finite, not denormal\\), got 'x'"),
    ("-1*naswot+macs", "must be a positive decimal number .*, got '-1'"),
    ("naswot+", "score: empty component in 'naswot\\+'"),
    ("naswot+2*naswot", "score: 'naswot' appears twice"),
    ("fused", "score: a fusion names its components: write e.g. 2\\*supernet\\+naswot\\+synflow"),
])
def test_malformed_fusions_are_refused(spec, message):
    with pytest.raises(ConfigError, match=message):
        build_estimator(spec)
