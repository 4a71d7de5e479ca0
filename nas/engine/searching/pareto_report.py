"""`pareto.json` and `pareto.png` of a search: the fronts of its score against each cost."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from nas.core.costs import BY_NAME, COST_NAMES
from nas.core.files import write_json
from nas.core.pareto import ACCURACY, OBJECTIVE, Record, front, objective
from nas.core.registry import SUPERNET_SCORE
from nas.engine.plotting import pyplot, save_png

_POINT_KEYS = ("trial", "arch_id", ACCURACY, OBJECTIVE, *COST_NAMES)


def _point(record: Record) -> dict[str, Any]:
    return {key: record[key] for key in _POINT_KEYS if key in record}


def score_name(records: Sequence[Record]) -> str:
    """The score the records were ranked by (`supernet` for records older than scores)."""
    return str(records[0].get("score", SUPERNET_SCORE)) if records else SUPERNET_SCORE


def pareto_data(records: Sequence[Record], costs: Sequence[str], budgets: Mapping[str, float | None]) -> dict:
    """The content of `pareto.json` (see `write_pareto`)."""
    return {"objective": OBJECTIVE, "score": score_name(records), "costs": list(costs),
            "budgets": {cost: budgets.get(cost) for cost in costs},
            "evaluated": len(records),
            "fronts": {cost: [_point(r) for r in front(records, cost)] for cost in costs}}


def write_pareto(out_dir: Path, records: Sequence[Record], costs: Sequence[str],
                 budgets: Mapping[str, float | None], plot: bool = True) -> dict:
    """Write `pareto.json` (and `pareto.png` when `plot`); returns the JSON data.

    `pareto.json` = `{"objective": "score_value", "score": name, "costs": [...], "budgets":
    {cost: budget or null}, "evaluated": n, "fronts": {cost: [{"trial", "arch_id",
    "val_top1"?, "score_value", "macs", "params", "latency_ms"?}, ...]}}`, each front sorted by
    increasing cost (the score's value is the supernet's validation top-1 for `supernet`).
    """
    data = pareto_data(records, costs, budgets)
    write_json(out_dir / "pareto.json", data)
    if plot and records:
        plot_pareto(out_dir / "pareto.png", records, costs, budgets)
    return data


def plot_pareto(path: Path, records: Sequence[Record], costs: Sequence[str],
                budgets: Mapping[str, float | None]) -> None:
    """`pareto_figure` saved as a PNG."""
    save_png(pareto_figure(records, costs, budgets), path)


def pareto_figure(records: Sequence[Record], costs: Sequence[str], budgets: Mapping[str, float | None]) -> Any:
    """One panel per cost: every result's score grey, the front highlighted, the budget dashed."""
    plt = pyplot()
    score = score_name(records)
    factor, ylabel = (100.0, "validation top-1 (%)") if score == SUPERNET_SCORE else (1.0, f"score: {score}")
    fig, axes = plt.subplots(1, len(costs), figsize=(5 * len(costs), 4), squeeze=False)
    for ax, cost in zip(axes[0], costs):
        label, scale = (BY_NAME[cost].label, BY_NAME[cost].scale) if cost in BY_NAME else (cost, 1.0)
        ax.scatter([r[cost] / scale for r in records], [factor * objective(r) for r in records],
                   s=12, color="0.65", label=f"evaluated ({len(records)})")
        best = front(records, cost)
        ax.plot([r[cost] / scale for r in best], [factor * objective(r) for r in best], "o-",
                color="tab:red", markersize=5, label=f"Pareto front ({len(best)})")
        if budgets.get(cost) is not None:
            ax.axvline(budgets[cost] / scale, color="tab:blue", linestyle="--", label="budget")
        ax.set_xlabel(label)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig
