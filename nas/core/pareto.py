"""Pareto fronts of search results: accuracy (maximised) against costs (minimised).

`front(records, cost)` is the non-dominated set of `(cost, objective)` that `pareto.json`
stores per constrained cost; `ranks` and `crowding` are the non-dominated sorting and
crowding distance of NSGA-II (Deb et al., 2002) that the evolution searcher's Pareto mode
uses to pick parents. Pure functions of plain records; the files live in
`nas.engine.searching.pareto_report`.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

Record = Mapping[str, Any]
OBJECTIVE = "score_value"
ACCURACY = "val_top1"


def objective(record: Record) -> float:
    """What a search maximises: the value of the record's score (`score_value`; the supernet's
    validation top-1 when the score is `supernet`), or `val_top1` in records written before
    searches had a score."""
    return record[OBJECTIVE] if OBJECTIVE in record else record[ACCURACY]


def front(records: Sequence[Record], cost: str) -> list[Record]:
    """Records not dominated in (lower `cost`, higher objective), sorted by increasing cost.

    Of records with equal cost and objective only the earliest trial is kept, so costs and
    objectives both rise strictly along the front.
    """
    ordered = sorted(records, key=lambda r: (r[cost], -objective(r), r["trial"]))
    kept: list[Record] = []
    for record in ordered:
        if not kept or objective(record) > objective(kept[-1]):
            kept.append(record)
    return kept


def _dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))


def ranks(points: Sequence[Sequence[float]]) -> list[int]:
    """Non-domination rank of each point (0 = the front), every coordinate minimised."""
    result = [-1] * len(points)
    remaining = set(range(len(points)))
    rank = 0
    while remaining:
        layer = {i for i in remaining
                 if not any(_dominates(points[j], points[i]) for j in remaining if j != i)}
        for i in layer:
            result[i] = rank
        remaining -= layer
        rank += 1
    return result


def crowding(points: Sequence[Sequence[float]]) -> list[float]:
    """NSGA-II crowding distance of each point within its set (boundary points: infinity)."""
    n = len(points)
    distance = [0.0] * n
    if n == 0:
        return distance
    for axis in range(len(points[0])):
        order = sorted(range(n), key=lambda i: points[i][axis])
        low, high = points[order[0]][axis], points[order[-1]][axis]
        distance[order[0]] = distance[order[-1]] = math.inf
        if high == low:
            continue
        for k in range(1, n - 1):
            distance[order[k]] += (points[order[k + 1]][axis] - points[order[k - 1]][axis]) / (high - low)
    return distance
