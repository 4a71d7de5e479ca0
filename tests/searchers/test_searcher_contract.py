"""The contract every registered searcher keeps, on the stub problem (no training).

Parametrised over the registry, so a newly registered searcher is held to it at once (or
listed in `SKIP` with the reason it cannot run here). Every searcher gets the same plan,
with an untrained architecture generator of the small space for those that read one:
options parse to the registered defaults; a search evaluates exactly `trials` distinct archs
within the budget and reports the best of them; the same seed repeats the same archs and
another seed does not; re-running a finished search evaluates nothing and raising `trials`
continues it; a budget that admits only the min subnet among millions of archs answers it.
"""
from __future__ import annotations

import json

import pytest

from nas.core.arch import arch_id
from nas.core.registry import SEARCHERS
from nas.engine.searching.costs import Constraints
from nas.engine.searching.loop import parse_searcher_options, run_search
from nas.engine.searching.request import SearchRequest
from tests.conftest import check_contract_coverage, make_space, shipped_names
from tests.searchers.stub import MAX_MACS, StubEvaluator, small_space, target_arch, untrained_generator
from tests.searchers.stub import search_dir  # noqa: F401  (fixture)

SKIP: dict[str, str] = {}      # searcher -> why it cannot run in this suite
CONTRACT = [name for name in shipped_names(SEARCHERS) if name not in SKIP]


@pytest.fixture(scope="module")
def space():
    return small_space()


@pytest.fixture(scope="module")
def generator(space):
    return untrained_generator(space)


@pytest.fixture(scope="module")
def search(space, generator):
    """`search(out_dir, name, trials, seed=0, target=None)` -> (result, stub evaluator)."""
    best = target_arch(space)

    def run(out_dir, name, trials, seed=0, target=None):
        evaluate = StubEvaluator(space, target if target is not None else best)
        request = SearchRequest(name, out_dir, None, trials, seed, constraints=Constraints(max_macs=MAX_MACS),
                                progress=False, tensorboard=False)
        result = run_search(space, evaluate, request, generator=generator)
        return result, evaluate

    return run


def _records(out_dir):
    return [json.loads(line) for line in (out_dir / "results.jsonl").read_text().splitlines()]


def test_every_registered_searcher_is_checked_or_skipped_with_a_reason():
    check_contract_coverage(SEARCHERS, CONTRACT, SKIP)


@pytest.mark.parametrize("name", CONTRACT)
def test_options_parse_to_the_registered_defaults(name):
    assert parse_searcher_options(name) == SEARCHERS.get(name).options()


@pytest.mark.parametrize("name", CONTRACT)
def test_evaluates_distinct_feasible_archs_and_reports_the_best(space, search, search_dir, name):
    result, evaluate = search(search_dir, name, 12)
    records = _records(search_dir)
    assert len(evaluate.calls) == len(set(evaluate.calls)) == result.evaluated == 12
    assert [r["arch_id"] for r in records] == evaluate.calls
    assert all(space.macs(r["arch"]) == r["macs"] <= MAX_MACS for r in records)
    best = max(r["val_top1"] for r in records)
    assert result.val_top1 == best and arch_id(result.best) in {r["arch_id"] for r in records if r["val_top1"] == best}


@pytest.mark.parametrize("name", CONTRACT)
def test_the_same_seed_repeats_the_same_archs(search, search_dir, name):
    runs = [search(search_dir / f"run{i}", name, 10, seed=seed)[1].calls
            for i, seed in enumerate((3, 3, 4))]
    assert runs[0] == runs[1] and runs[0] != runs[2]


@pytest.mark.parametrize("name", CONTRACT)
def test_a_rerun_evaluates_nothing_and_more_trials_continue(search, search_dir, name):
    first, _ = search(search_dir, name, 8)
    again, evaluate = search(search_dir, name, 8)
    assert evaluate.calls == [] and again.evaluated == 8 and again.best == first.best
    more, evaluate = search(search_dir, name, 12)
    assert len(evaluate.calls) == 4 and more.evaluated == 12
    assert len({r["arch_id"] for r in _records(search_dir)}) == 12


@pytest.mark.parametrize("name", [name for name in CONTRACT if name != "generator"])
def test_a_budget_that_admits_only_the_min_subnet_answers_it(search_dir, name):
    """A space of millions of archs under a budget only the min subnet meets (`--max-macs 0%`):
    the searcher's proposals fail `max_rejections` times in a row, then the min subnet, queued,
    is evaluated and answered; when proposals fail again the search ends with a note."""
    space = make_space("mobilenetv3")
    low = space.canonical(space.min())
    evaluate = StubEvaluator(space, low)
    request = SearchRequest(name, search_dir, None, 5, constraints=Constraints(max_macs=space.macs(low)),
                            progress=False, tensorboard=False, max_rejections=20)
    result = run_search(space, evaluate, request)
    assert evaluate.calls == [arch_id(low)] and result.arch_id == arch_id(low) and result.evaluated == 1
    assert [n for n in result.notes if n.startswith("stopped after 1 of 5 evaluations: 20 suggestions in a row")]
