"""Evolution's first generation reaches the costs near the budget, which uniform draws seldom reach
(a 40-trial search at 50% of the MACs range used to evaluate nothing above 82% of its budget)."""
from __future__ import annotations

import json
import random

from nas.core.arch import arch_id
from nas.engine.searching.costs import Constraints
from nas.engine.searching.loop import run_search
from nas.engine.searching.request import WINDOW_SHARE, SearchRequest
from searchers.base import SearchContext
from searchers.evolution import EvolutionOptions, EvolutionSearcher
from tests.conftest import make_space
from tests.searchers.stub import search_dir  # noqa: F401  (fixture)
from tests.support.figures import no_figures  # noqa: F401  (fixture)


def _half_budget(space) -> tuple[float, float]:
    """The budget at 50% of the MACs range and the low edge of its default window."""
    low, high = space.macs(space.min()), space.macs(space.max())
    budget = low + 0.5 * (high - low)
    return budget, budget - WINDOW_SHARE * (budget - low)


def test_window_draws_land_where_uniform_draws_seldom_do():
    space = make_space("mobilenetv3")      # the default space: too large to list
    budget, edge = _half_budget(space)
    context = SearchContext(space, 40, 0, window={"macs": (edge, budget)},
                            cost_of=lambda arch: {"macs": space.macs(arch)})
    searcher = EvolutionSearcher(context, EvolutionOptions())
    uniform = [space.macs(space.sample(random.Random(seed))) for seed in range(200)]
    drawn = [space.macs(searcher.window_arch(random.Random(seed))) for seed in range(40)]
    assert sum(edge <= m <= budget for m in uniform) / len(uniform) < 0.15
    assert sum(edge <= m <= budget for m in drawn) / len(drawn) >= 0.9


def test_every_other_arch_of_the_first_generation_is_drawn_near_the_budget(search_dir, no_figures):
    space = make_space("mobilenetv3")
    budget, edge = _half_budget(space)
    request = SearchRequest("evolution", search_dir, {"population": 10}, 10, 0, constraints=Constraints(budget),
                            progress=False, tensorboard=False)
    result = run_search(space, lambda arch: {"val_top1": 0.5}, request)      # a flat score: no parent leads
    records = [json.loads(line) for line in (search_dir / "results.jsonl").read_text().splitlines()]
    assert len(records) == result.evaluated == 10 == len({r["arch_id"] for r in records})
    near = [edge <= r["macs"] <= budget for r in records]
    assert sum(near[1::2]) >= 4 and max(r["macs"] for r in records) / budget > 0.95
    assert all(arch_id(space.canonical(r["arch"])) == r["arch_id"] for r in records)
