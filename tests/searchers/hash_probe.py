"""Prints, as JSON, what every space method and searcher draws from fixed seeds, so that
test_hash_order.py can compare processes started with different PYTHONHASHSEED values.

    python -m tests.searchers.hash_probe all DIR [RESUME N]   every space method and searcher (and an
                                                                evolution search run or resumed to N in RESUME)
    python -m tests.searchers.hash_probe evolution DIR N       an evolution search run or resumed to N
"""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from nas.core.arch import arch_id
from nas.core.registry import SEARCHERS as REGISTERED
from nas.engine.searching.costs import Constraints
from nas.engine.searching.loop import run_search
from nas.engine.searching.request import SearchRequest
from tests.conftest import make_space
from tests.searchers.stub import MAX_MACS, StubEvaluator, small_space, target_arch, untrained_generator

TARGET = target_arch(small_space())
# every registered searcher with its defaults, and evolution's other mode
SEARCHERS = {**{name: {} for name in REGISTERED.names()}, "evolution-pareto": {"mode": "pareto"}}


def space_draws(name: str) -> list[str]:
    """arch ids of samples, mutations, crossovers and the first listed archs of a small space."""
    space, rng = make_space(name, small=True), random.Random(0)
    draws = [space.sample(rng) for _ in range(4)]
    for _ in range(8):
        draws.append(space.mutate(rng.choice(draws), 0.5, rng))
        draws.append(space.crossover(rng.choice(draws), rng.choice(draws), rng))
    ids = [arch_id(a) for a in draws]
    layer_keys = [layer.key for layer in space.layers(draws[-1])]
    listed = [arch_id(a) for a in space.enumerate()[:20]] if space.raw_size() <= 20_000 else []
    return ids + layer_keys + listed


def search_ids(searcher: str, out: Path, trials: int) -> list[str]:
    """arch ids, in evaluation order, of a search of the stub problem (resumed if `out` holds one)."""
    space = small_space()
    name = searcher.split("-pareto")[0]
    request = SearchRequest(name, out, SEARCHERS[searcher], trials, seed=3, constraints=Constraints(max_macs=MAX_MACS),
                            progress=False, tensorboard=False)
    run_search(space, StubEvaluator(space, TARGET), request, generator=untrained_generator(space))
    return [json.loads(line)["arch_id"] for line in (out / "results.jsonl").read_text().splitlines()]


def main(argv: list[str]) -> None:
    mode, out = argv[0], Path(argv[1])
    if mode == "evolution":
        print(json.dumps(search_ids("evolution", out, int(argv[2]))))
        return
    report = {f"space:{name}": space_draws(name) for name in ("mobilenetv3", "vit", "cell201")}
    report.update({f"search:{s}": search_ids(s, out / s, 12) for s in SEARCHERS})
    if len(argv) > 2:
        report["resumable"] = search_ids("evolution", Path(argv[2]), int(argv[3]))
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1:])
