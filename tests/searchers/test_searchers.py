"""What each search algorithm does beyond the contract (`test_searcher_contract.py`), on a stub
evaluator with a known optimum (no training)."""
from __future__ import annotations

import json

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from nas.core.errors import ConfigError, SearchError
from nas.core.registry import SEARCHERS
from nas.engine.searching.costs import Constraints
from nas.engine.searching.loop import parse_searcher_options, run_search
from nas.engine.searching.request import SearchRequest
from searchers.evolution import EvolutionOptions, EvolutionSearcher
from searchers.optuna_searcher import (
    NSGA2Options,
    NSGA2Searcher,
    TPEOptions,
    TPESearcher,
)
from tests.conftest import make_space
from tests.searchers.stub import (  # noqa: F401
    MAX_MACS,
    StubEvaluator,
    search_dir,
    small_space,
    target_arch,
)

BUDGET = Constraints(max_macs=MAX_MACS)
# Evaluations each searcher gets to find the optimum (478 archs are feasible). Random search
# gets more than the feasible archs, so it must evaluate every one of them.
FIND_TRIALS = {"random": 600, "evolution": 100, "optuna-tpe": 120, "optuna-nsga2": 200}
NO_OPTIMUM_TEST = {"generator": "proposes what the run's trained generator proposes: its quality is the "
                                "generator's (tests/supernets/test_shiftnas_generate.py)"}


@pytest.fixture(scope="module")
def space():
    return small_space()


@pytest.fixture(scope="module")
def target(space):
    return target_arch(space)


def _search(space, target, out_dir, name, trials, seed=0, searcher_options=None, **study):
    evaluate = StubEvaluator(space, target)
    result = run_search(space, evaluate, SearchRequest(name, out_dir, searcher_options, trials, seed,
                                                       constraints=BUDGET, progress=False, tensorboard=False,
                                                       **study))
    return result, evaluate


def _results(out_dir):
    return [json.loads(line) for line in (out_dir / "results.jsonl").read_text().splitlines()]


def test_every_registered_searcher_is_asked_to_find_the_optimum_or_says_why_not():
    assert set(FIND_TRIALS) | set(NO_OPTIMUM_TEST) == set(SEARCHERS.names())
    assert not set(FIND_TRIALS) & set(NO_OPTIMUM_TEST)


@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.slow) if name == "optuna-nsga2" else name
                                  for name in sorted(FIND_TRIALS)])     # nsga2: the most trials
def test_finds_the_optimum_feasibly_without_repeats(space, target, search_dir, name):
    result, evaluate = _search(space, target, search_dir, name, FIND_TRIALS[name])
    assert result.best == target and result.val_top1 == pytest.approx(0.95)
    assert len(evaluate.calls) == len(set(evaluate.calls)) == result.evaluated
    records = _results(search_dir)
    assert [r["arch_id"] for r in records] == evaluate.calls
    assert all(space.macs(r["arch"]) == r["macs"] <= MAX_MACS for r in records)
    if name == "random":
        assert result.evaluated == 478 and "only 478" in result.notes[0]
    else:
        assert result.evaluated == FIND_TRIALS[name]


def test_defaults_derived_from_trials_give_several_generations():
    evolution = EvolutionSearcher.resolve_options(EvolutionOptions(), 20)
    assert evolution.population == 6  # a random first generation of 6, then 2-3 more
    assert EvolutionSearcher.resolve_options(EvolutionOptions(), 60).population == 20
    assert EvolutionSearcher.resolve_options(EvolutionOptions(), 8).population == 4
    assert EvolutionSearcher.resolve_options(EvolutionOptions(generations=3), 40).population == 10
    assert EvolutionSearcher.resolve_options(EvolutionOptions(), 10_000).population == 100
    assert TPESearcher.resolve_options(TPEOptions(), 20).n_startup_trials == 4
    assert TPESearcher.resolve_options(TPEOptions(), 1000).n_startup_trials == 10
    assert NSGA2Searcher.resolve_options(NSGA2Options(), 40).population_size == 8
    assert NSGA2Searcher.resolve_options(NSGA2Options(population_size=6), 40).population_size == 6


def test_bad_options_name_the_key():
    with pytest.raises(ConfigError, match="search.options.populaton: unknown key .*did you mean 'population'"):
        parse_searcher_options("evolution", {"populaton": 8})
    with pytest.raises(ConfigError, match="search.options.mutation_prob: must be in"):
        parse_searcher_options("evolution", {"mutation_prob": 2.0})


def test_evolution_pareto_mode_and_generation_limit(space, target, search_dir):
    options = {"mode": "pareto", "population": 6, "generations": 3}
    result, evaluate = _search(space, target, search_dir, "evolution", 100, searcher_options=options)
    assert result.evaluated == len(set(evaluate.calls)) == 24
    assert any("generations" in note for note in result.notes)


def test_optuna_prunes_infeasible_and_duplicate_suggestions(space, target, search_dir):
    result, _ = _search(space, target, search_dir, "optuna-tpe", 40)
    storage = JournalStorage(JournalFileBackend(str(search_dir / "optuna.journal")))
    study = optuna.load_study(study_name="search", storage=storage)
    trials = study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    assert len(complete) == 40 and len(trials) == 40 + len(pruned)
    assert all(t.constraints["macs"] <= 0 for t in complete)
    assert {t.user_attrs["record"]["arch_id"] for t in complete} == {r["arch_id"] for r in _results(search_dir)}
    reasons = [t.user_attrs["reason"] for t in pruned]
    assert any(r.startswith("macs ") for r in reasons) and any(r.startswith("duplicate of trial") for r in reasons)
    for t in pruned:
        assert (t.constraints["macs"] > 0) == t.user_attrs["reason"].startswith("macs ")


def test_resumed_local_search_continues_exactly(space, target, search_dir):
    options = {"population": 6}
    _search(space, target, search_dir / "whole", "evolution", 30, searcher_options=options)
    _search(space, target, search_dir / "split", "evolution", 13, searcher_options=options)
    lines = (search_dir / "split" / "results.jsonl").read_text()
    (search_dir / "split" / "results.jsonl").write_text(lines + lines.splitlines()[0][:25])  # a torn line
    _search(space, target, search_dir / "split", "evolution", 30, searcher_options=options)
    whole, split = _results(search_dir / "whole"), _results(search_dir / "split")
    assert [r["arch_id"] for r in whole] == [r["arch_id"] for r in split]


def test_resume_with_other_settings_fails(space, target, search_dir):
    _search(space, target, search_dir, "evolution", 5, seed=0)
    with pytest.raises(SearchError, match="seed 0 there, 1 now"):
        _search(space, target, search_dir, "evolution", 5, seed=1)
    with pytest.raises(SearchError, match="population 4 there, 8 now"):
        _search(space, target, search_dir, "evolution", 5, searcher_options={"population": 8})


def test_unsatisfiable_budget_names_the_cheapest_subnet(space, target, search_dir):
    with pytest.raises(SearchError, match=r"^max_macs: 0.3M is below the cheapest subnet \(min: 0.335M MACs\)"):
        run_search(space, StubEvaluator(space, target),
                   SearchRequest("random", search_dir, trials=5, constraints=Constraints(max_macs=3e5), progress=False,
                                 tensorboard=False))


def test_a_budget_that_admits_few_archs_answers_the_min_subnet_or_a_feasible_arch(search_dir):
    """0.1% above the min subnet's MACs in a space too large to list: random proposals almost
    never fit; after `max_rejections` in a row the min subnet is queued, and after as many again
    the search ends with what it evaluated (before: "20 suggestions in a row were infeasible",
    an error)."""
    space = make_space("mobilenetv3")
    budget = Constraints(max_macs=space.macs(space.min()) * 1.001)
    evaluate = StubEvaluator(space, space.min())
    result = run_search(space, evaluate, SearchRequest("random", search_dir, trials=5, constraints=budget,
                                                       progress=False, tensorboard=False, max_rejections=20))
    assert space.min() in [r["arch"] for r in result.trials] and result.arch_id == evaluate.calls[0]
    assert all(r["macs"] <= budget.max_macs for r in result.trials) and 1 <= result.evaluated < 5
    assert any(note.startswith(f"stopped after {result.evaluated} of 5 evaluations: 20 suggestions in a row were "
                               "infeasible") for note in result.notes)


def test_storage_needs_an_optuna_searcher(space, target, search_dir):
    with pytest.raises(ConfigError, match="^storage: only the optuna searchers share a study"):
        _search(space, target, search_dir, "random", 5, storage=f"sqlite:///{search_dir}/s.db")
