"""`pareto.json` and `pareto.png` of a search: the fronts of accuracy against each cost."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from nas.core.costs import BY_NAME, COST_NAMES
from nas.core.files import write_json
from nas.core.pareto import OBJECTIVE, Record, front
from nas.engine.plotting import pyplot, save_png

_POINT_KEYS = ("trial", "arch_id", OBJECTIVE, *COST_NAMES)


def _point(record: Record) -> dict[str, Any]:
    return {key: record[key] for key in _POINT_KEYS if key in record}


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
    write_json(out_dir / "pareto.json", data)
    if plot and records:
        plot_pareto(out_dir / "pareto.png", records, costs, budgets)
    return data


def plot_pareto(path: Path, records: Sequence[Record], costs: Sequence[str],
                budgets: Mapping[str, float | None]) -> None:
    """`pareto_figure` saved as a PNG."""
    save_png(pareto_figure(records, costs, budgets), path)


def pareto_figure(records: Sequence[Record], costs: Sequence[str], budgets: Mapping[str, float | None]) -> Any:
    """One panel per cost: every result grey, the front highlighted, the budget dashed."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(costs), figsize=(5 * len(costs), 4), squeeze=False)
    for ax, cost in zip(axes[0], costs):
        label, scale = (BY_NAME[cost].label, BY_NAME[cost].scale) if cost in BY_NAME else (cost, 1.0)
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
    return fig
