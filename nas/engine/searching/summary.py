"""A finished search folder's answer for people (`nas summary`): the chosen subnet, its costs
against the budgets, and how it was chosen (the score, why `auto` chose it, the finalists)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping


def search_summary(folder: str | Path) -> dict[str, Any]:
    """The summary.json of a finished search folder (`nas summary`)."""
    import json

    from nas.core.errors import SearchError

    path = Path(folder) / "summary.json"
    try:
        summary = json.loads(path.read_text())
    except FileNotFoundError:
        raise SearchError(f"SEARCH_DIR: {folder} holds no summary.json (not a finished search folder)") from None
    except (OSError, ValueError) as e:
        raise SearchError(f"SEARCH_DIR: {path}: cannot read it ({str(e).splitlines()[0]})") from e
    if not isinstance(summary, dict) or not all(key in summary for key in ("arch_id", "macs", "params", "dir")):
        raise SearchError(f"SEARCH_DIR: {path} is not a search summary")
    return summary


def format_search_summary(summary: Mapping[str, Any]) -> str:
    """A search's answer in a few lines: the chosen subnet, its costs against the budgets, and how
    it was chosen (the score, why, and the finalists stage if any)."""
    from nas.core.amounts import format_amount

    budgets = summary.get("budgets") or {}
    costs = []
    for name in ("macs", "params"):
        value = summary[name]
        label = "MACs" if name == "macs" else "params"
        if name in budgets:
            costs.append(f"{label} {format_amount(value)} of a {format_amount(budgets[name])} budget "
                         f"({100 * value / budgets[name]:.0f}%)")
        else:
            costs.append(f"{label} {format_amount(value)}")
    if summary.get("latency_ms") is not None:
        budget = budgets.get("latency_ms")
        costs.append(f"latency {summary['latency_ms']:.3f} ms" + (f" of a {budget:g} ms budget" if budget else ""))
    top1 = f", val top-1 {100 * summary['val_top1']:.2f}% in the supernet" if summary.get("val_top1") is not None else ""
    lines = [f"chosen subnet {summary['arch_id']}: {', '.join(costs)}{top1}"]
    score = summary.get("score", "supernet")
    why = summary.get("score_reason") or f"the score {score}"
    lines.append(f"chosen by: {why}; {summary.get('evaluated', '?')} archs evaluated"
                 + (f" by {summary['searcher']}" if summary.get("searcher") else ""))
    stage = summary.get("finalists")
    if stage:
        finalists = stage["finalists"]
        winner = next(r for r in finalists if r["arch_id"] == stage["winner"])
        first = next(r for r in finalists if r["arch_id"] == stage["search_best"])
        measure = stage["measure"]
        outcome = (f"#{winner['rank']} by the score won with {100 * winner['finalist_top1']:.2f}% "
                   f"(the score's best, {first['arch_id']}, {100 * first['finalist_top1']:.2f}%)"
                   if stage["changed"] else f"the score's best won with {100 * winner['finalist_top1']:.2f}%")
        lines.append(f"then finalists: the {len(finalists)} best by the score fine-tuned alone {measure['steps']} "
                     f"steps each, then validation top-1; {outcome}")
    else:
        lines.append("no finalists stage: the score's best is the answer (nas search --finalists K measures "
                     "the K best again)")
    lines.append(f"arch file: {Path(summary['dir']) / 'best.yaml'}")
    return "\n".join(lines)
