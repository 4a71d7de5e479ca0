"""Archs queued first (`SearchPlan.anchors`): evaluated first by every searcher when queued, and
nothing queued by default, so the min and max subnets compete like any candidate (`nas.search`
queues none: tests/engine/fidelity/test_fidelity.py checks it on a sandwich-trained run)."""
from __future__ import annotations

import json

import optuna
import pytest
from optuna.trial import TrialState

from nas.core.arch import arch_id
from nas.engine.searching.runner import Constraints, SearchOutput, SearchPlan, SharedStudy, run_search
from searchers.optuna_storage import open_storage
from tests.conftest import make_space
from tests.searchers.stub import (  # noqa: F401
    MAX_MACS,
    StubEvaluator,
    search_dir,
    small_space,
    target_arch,
)


# the searchers that propose from the space itself (`generator` proposes what a trained generator makes)
SEARCHERS = ["random", "evolution", "optuna-tpe", "optuna-nsga2"]


@pytest.fixture(scope="module")
def space():
    return small_space()


def _records(out_dir):
    return [json.loads(line) for line in (out_dir / "results.jsonl").read_text().splitlines()]


def _search(space, out_dir, name, trials, target, anchors, budget=MAX_MACS, searcher_options=None, **study):
    evaluate = StubEvaluator(space, target)
    result = run_search(space, evaluate, SearchPlan(name, searcher_options, trials, seed=0, anchors=anchors),
                        SearchOutput(out_dir, progress=False, tensorboard=False),
                        constraints=Constraints(max_macs=budget), study=SharedStudy(**study))
    return result, evaluate


@pytest.mark.parametrize("name", SEARCHERS)
def test_without_queued_archs_the_min_subnet_is_evaluated_only_when_proposed(space, search_dir, name):
    """The stub scores the min arch best, yet nothing evaluates it first: 5 evaluations of the
    478 feasible archs do not meet it, and the answer is the best of what the searcher proposed (ties: fewer MACs)."""
    low = space.min()
    result, evaluate = _search(space, search_dir, name, 5, low, [])
    records = _records(search_dir)
    assert arch_id(low) not in evaluate.calls and not any("anchor" in r for r in records)
    assert result.arch_id == max(records, key=lambda r: (r["val_top1"], -r["macs"], -r["trial"]))["arch_id"] != arch_id(low)
    assert json.loads((search_dir / "summary.json").read_text())["anchors"] == []


def test_both_anchors_under_a_budget_that_admits_them(space, search_dir):
    _search(space, search_dir, "evolution", 4, target_arch(space), [space.max(), space.min()],
            budget=space.macs(space.max()))
    records = _records(search_dir)
    assert [r["arch_id"] for r in records[:2]] == [arch_id(space.max()), arch_id(space.min())]
    assert [r.get("anchor", False) for r in records] == [True, True, False, False]


def test_one_trial_evaluates_only_the_first_anchor(space, search_dir):
    result, evaluate = _search(space, search_dir, "random", 1, target_arch(space), [space.max(), space.min()],
                               budget=space.macs(space.max()))
    assert evaluate.calls == [arch_id(space.max())] and result.evaluated == 1


def test_resumed_search_with_anchors_continues_exactly(space, search_dir):
    anchors = [space.max(), space.min()]
    options = {"population": 6}
    _search(space, search_dir / "whole", "evolution", 20, target_arch(space), anchors, searcher_options=options)
    _search(space, search_dir / "split", "evolution", 7, target_arch(space), anchors, searcher_options=options)
    _, again = _search(space, search_dir / "split", "evolution", 20, target_arch(space), anchors,
                       searcher_options=options)
    assert len(again.calls) == 13 and arch_id(space.min()) not in again.calls
    whole, split = _records(search_dir / "whole"), _records(search_dir / "split")
    assert [r["arch_id"] for r in whole] == [r["arch_id"] for r in split]


def test_optuna_anchors_are_study_trials_evaluated_once_by_two_workers(space, search_dir):
    low = space.min()
    url = f"sqlite:///{search_dir}/study.db"
    for worker in (0, 1):   # one after the other: the second sees the first's anchor as done
        _search(space, search_dir, "optuna-tpe", 4 + 2 * worker, target_arch(space), [space.max(), low],
                storage=url, study="shared", worker=worker)
    study = optuna.load_study(study_name="shared", storage=open_storage(url, search_dir))
    complete = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(complete) == 6
    anchored = [t for t in complete if t.user_attrs["record"].get("anchor")]
    assert len(anchored) == 1 and anchored[0].number == 0
    assert anchored[0].system_attrs["fixed_params"] == low     # enqueued: a real trial the sampler sees
    assert not study.get_trials(states=(TrialState.WAITING,))


def test_dead_cells_stay_searchable(search_dir):
    space = make_space("cell201", small=True, operations=("none", "skip_connect", "conv_1x1"))
    dead = {key: "none" for key in space.choices()}
    assert space.min() != dead and space.is_live(space.min())
    result = run_search(space, lambda arch: {"val_top1": 0.5},
                        SearchPlan("random", trials=10_000, anchors=[space.max(), space.min()]),
                        SearchOutput(search_dir, progress=False, tensorboard=False))
    ids = [r["arch_id"] for r in _records(search_dir)]
    assert arch_id(dead) in ids and len(ids) == len(space.enumerate()) == result.evaluated
