"""A family folder planted by hand: ordinary one-budget searches in member subfolders plus the
family.json a family search writes beside them (the family export and summary read only these);
and a planted score whose every answer is known (`favours_max`)."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pytest

from estimators.base import Estimator, EstimatorContext
from nas import api
from nas.core.arch import Arch, arch_id
from nas.core.registry import ESTIMATORS, Entry, NoOptions
from nas.engine.searching.family import member_dir, write_family


class FavoursMax(Estimator):
    """A planted score: the more MACs, the better (each member's answer is the largest arch its
    budget admits); it counts the archs it scores."""

    name = "test-favours-max"
    scored: list[str] = []

    def scores(self, archs: Sequence[Arch], context: EstimatorContext) -> list[float]:
        FavoursMax.scored.extend(arch_id(context.space.canonical(a)) for a in archs)
        return [float(context.space.macs(a)) for a in archs]


@pytest.fixture
def favours_max(monkeypatch):
    monkeypatch.setitem(ESTIMATORS._entries, FavoursMax.name, Entry(FavoursMax.name, FavoursMax, NoOptions))
    FavoursMax.scored = []
    return FavoursMax.scored


def plant_family(run: api.Run, out: Path, budgets: Sequence[str] = ("20%", "80%"), score: str = "macs",
                 trials: int = 6) -> Path:
    """Search `run` once per MACs budget into `out/m<k>-macs<amount>` (random searcher, `score`,
    `trials` each) and write `out/family.json` naming them as members; returns `out`."""
    members, evaluated = [], set()
    source = None
    for index, spec in enumerate(budgets, start=1):
        budget = int(api.resolve_budget(spec, run.space.macs(run.space.min()), run.space.macs(run.space.max()),
                                        "max_macs"))
        folder = member_dir(index, "macs", budget)
        result = api.search(run, "random", max_macs=spec, trials=trials, out=out / folder, progress=False,
                            score=score, seed=index)
        evaluated.update(record["arch_id"] for record in result.trials)
        members.append({"index": index, "budget": budget, "budget_spec": spec, "dir": folder,
                        "arch_id": result.arch_id, "arch": result.best, "macs": result.macs, "params": result.params,
                        "latency_ms": None, "val_top1": result.val_top1, "score": result.score,
                        "score_value": result.score_value})
        if run.step:
            source = {"run": str(run.dir.root), "checkpoint": run.checkpoint.name, "step": run.step,
                      "weights": run.weights}
    family = {"kind": "family", "cost": "macs", "budget_specs": list(budgets),
              "budgets": [m["budget"] for m in members], "other_budgets": {}, "members": members,
              "searcher": "random", "score": score, "score_reason": f"the score {score}", "seed": 0, "trials": trials,
              "evaluations": len(evaluated), "source": source, "latency_table": None, "device": "cpu", "batch": 1}
    write_family(out, family)
    return out
