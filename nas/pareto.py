"""Pareto fronts of search results: accuracy (maximised) against costs (minimised).

`front(records, cost)` is the non-dominated set of `(cost, val_top1)` that `pareto.json`
stores per constrained cost; `ranks` and `crowding` are the non-dominated sorting and
crowding distance of NSGA-II (Deb et al., 2002) that the evolution searcher's Pareto mode
uses to pick parents. matplotlib is imported only when a plot is drawn (Agg backend).
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

Record = Mapping[str, Any]
OBJECTIVE = "val_top1"
_UNITS = {"macs": ("MACs (M)", 1e6), "params": ("parameters (M)", 1e6), "latency_ms": ("latency (ms)", 1.0)}


def front(records: Sequence[Record], cost: str) -> list[Record]:
    """Records not dominated in (lower `cost`, higher val_top1), sorted by increasing cost.

    Of records with equal cost and accuracy only the earliest trial is kept, so costs and
    accuracies both rise strictly along the front.
    """
    ordered = sorted(records, key=lambda r: (r[cost], -r[OBJECTIVE], r["trial"]))
    kept: list[Record] = []
    for record in ordered:
        if not kept or record[OBJECTIVE] > kept[-1][OBJECTIVE]:
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


def _point(record: Record) -> dict[str, Any]:
    keys = ("trial", "arch_id", OBJECTIVE, "macs", "params", "latency_ms")
    return {key: record[key] for key in keys if key in record}


def pareto_data(records: Sequence[Record], costs: Sequence[str], budgets: Mapping[str, float | None]) -> dict:
    """The content of `pareto.json` (see `write_pareto`)."""
    return {"objective": OBJECTIVE, "costs": list(costs),
            "budgets": {cost: budgets.get(cost) for cost in costs},
            "evaluated": len(records),
            "fronts": {cost: [_point(r) for r in front(records, cost)] for cost in costs}}


def write_pareto(out_dir: Path, records: Sequence[Record], costs: Sequence[str],
                 budgets: Mapping[str, float | None], plot: bool = True) -> dict:
    """Write `pareto.json` (and `pareto.png` when `plot`); returns the JSON data.

    `pareto.json` = `{"objective": "val_top1", "costs": [...], "budgets": {cost: budget or
    null}, "evaluated": n, "fronts": {cost: [{"trial", "arch_id", "val_top1", "macs",
    "params", "latency_ms"?}, ...]}}`, each front sorted by increasing cost.
    """
    data = pareto_data(records, costs, budgets)
    tmp = out_dir / f".pareto.json.{os.getpid()}.tmp"  # workers of one study share the directory
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, out_dir / "pareto.json")
    if plot and records:
        plot_pareto(out_dir / "pareto.png", records, costs, budgets)
    return data


def plot_pareto(path: Path, records: Sequence[Record], costs: Sequence[str],
                budgets: Mapping[str, float | None]) -> None:
    """One panel per cost: every result grey, the front highlighted, the budget dashed."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, axes = plt.subplots(1, len(costs), figsize=(5 * len(costs), 4), squeeze=False)
    for ax, cost in zip(axes[0], costs):
        label, scale = _UNITS.get(cost, (cost, 1.0))
        ax.scatter([r[cost] / scale for r in records], [100 * r[OBJECTIVE] for r in records],
                   s=12, color="0.65", label=f"evaluated ({len(records)})")
        best = front(records, cost)
        ax.plot([r[cost] / scale for r in best], [100 * r[OBJECTIVE] for r in best], "o-",
                color="tab:red", markersize=5, label=f"Pareto front ({len(best)})")
        if budgets.get(cost) is not None:
            ax.axvline(budgets[cost] / scale, color="tab:blue", linestyle="--", label="budget")
        ax.set_xlabel(label)
        ax.set_ylabel("validation top-1 (%)")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, path)
