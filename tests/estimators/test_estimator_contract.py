"""The contract every registered estimator keeps, on the small test spaces.

Parametrised over the registry, so a newly registered estimator is held to it at once (or
listed in `SKIP` with the reason it cannot run here). Each gets a full context: fixed random
batches, a stand-in for the supernet's top-1, and a run folder holding a calibrated model
fitted on the space. An estimator is registered under its own name and declares only known
needs; it gives one finite float per arch that is a pure function of the context (a fresh
context gives the same scores; the global RNGs and the batches are left as they were);
permuting the archs permutes the scores, and a non-population score does not depend on the
other archs; a context lacking what it needs is a one-line error naming it.
"""
from __future__ import annotations

import math
import random

import pytest
import torch

from estimators import EstimatorContext, build_estimator
from estimators.calibrated import calibration_path, fit_calibrated
from nas.core.arch import arch_id
from nas.core.errors import ConfigError
from nas.core.registry import ESTIMATORS
from tests.conftest import SMALL_OPTIONS, check_contract_coverage, make_space, shipped_names

SKIP: dict[str, str] = {}      # estimator -> why it cannot run in this suite
CONTRACT = [name for name in shipped_names(ESTIMATORS) if name not in SKIP]
NEEDS = {"batches", "supernet_top1", "run_dir"}     # what `EstimatorContext` offers
SPACES = sorted(SMALL_OPTIONS)


def _supernet_top1(arch) -> float:
    """A stand-in for the trained supernet's top-1: a fixed fraction per arch."""
    return int(arch_id(arch)[:8], 16) % 1000 / 1000


def _batches():
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(8, 1, 28, 28, generator=g), torch.randint(0, 10, (8,), generator=g)) for _ in range(2)]


def _archs(space, count: int = 3):
    """The max arch and seeded draws, distinct, each with a path from input to output."""
    live = getattr(space, "is_live", lambda arch: True)
    archs, rng = [space.max()], random.Random(1)
    while len(archs) < count:
        arch = space.sample(rng)
        if live(arch) and arch not in archs:
            archs.append(arch)
    return archs


@pytest.fixture(scope="module")
def contexts(tmp_path_factory):
    """space name -> (space, its archs, a function making a fresh full context)."""
    made = {}
    for name in SPACES:
        space = make_space(name, small=True)
        run_dir = tmp_path_factory.mktemp(f"run-{name}")
        ground_truth = _archs(space, 10)
        fit_calibrated(ground_truth, [space.macs(a) / space.macs(space.max()) for a in ground_truth],
                       EstimatorContext(space), features=(), ground_truth="contract").save(calibration_path(run_dir))

        def fresh(space=space, run_dir=run_dir):
            return EstimatorContext(space, _batches(), _supernet_top1, init_seeds=1, seed=5, run_dir=run_dir)

        made[name] = space, _archs(space), fresh
    return made


def test_every_registered_estimator_is_checked_or_skipped_with_a_reason():
    check_contract_coverage(ESTIMATORS, CONTRACT, SKIP)


@pytest.mark.parametrize("name", CONTRACT)
def test_registered_under_its_name_with_known_needs(name):
    estimator = build_estimator(name)
    assert type(estimator) is ESTIMATORS.get(name).obj and estimator.name == name
    assert estimator.needs <= NEEDS, estimator.needs - NEEDS
    assert isinstance(estimator.cheap, bool) and isinstance(estimator.population, bool)


@pytest.mark.parametrize("space_name", SPACES)
@pytest.mark.parametrize("name", CONTRACT)
def test_one_finite_score_per_arch_a_pure_function_of_the_context(contexts, name, space_name):
    _, archs, fresh = contexts[space_name]
    context = fresh()
    batches = [(x.clone(), y.clone()) for x, y in context.batches]
    torch_state, python_state = torch.get_rng_state(), random.getstate()
    scores = build_estimator(name).scores(archs, context)
    assert len(scores) == len(archs) and all(type(s) is float and math.isfinite(s) for s in scores), scores
    assert build_estimator(name).scores(archs, fresh()) == scores
    assert torch.equal(torch.get_rng_state(), torch_state) and random.getstate() == python_state
    assert all(torch.equal(x, x0) and torch.equal(y, y0) for (x, y), (x0, y0) in zip(context.batches, batches))


@pytest.mark.parametrize("name", CONTRACT)
def test_scores_follow_their_archs(contexts, name):
    _, archs, fresh = contexts["cell201"]
    estimator, context = build_estimator(name), fresh()
    scores = estimator.scores(archs, context)
    same = lambda values: pytest.approx(values, rel=1e-12)  # noqa: E731  (a batched matmul may round differently)
    assert estimator.scores(archs[::-1], context) == same(scores[::-1])
    if not estimator.population:
        assert [estimator.score(arch, context) for arch in archs] == same(scores)


@pytest.mark.parametrize("name", CONTRACT)
def test_a_context_without_its_needs_is_a_one_line_error_naming_it(contexts, name):
    space, archs, _ = contexts["cell201"]
    estimator, bare = build_estimator(name), EstimatorContext(space, init_seeds=1)
    if not estimator.needs:
        assert all(math.isfinite(s) for s in estimator.scores(archs, bare))
        return
    with pytest.raises(ConfigError) as error:
        estimator.scores(archs, bare)
    message = str(error.value)
    assert f"'{name}'" in message and "\n" not in message, message
