"""The files of a search's answer, each written once, when the search (and its finalists) ended.

- `ranked.jsonl`: every evaluated record with its final `score_value`, the reported best first:
  with finalists, the finalists by their measure (`finalist_top1`, ties to the better rank by
  the score), then the other records; without, by `searchers.base.rank_key` (highest score,
  then fewer MACs, then the earlier trial). For a population score only when the loop
  completed, so that all archs were ranked together.
- `pareto.json` and `pareto.png`: the front of the score against each constrained cost.
- `best.yaml`: the answer, a bare arch mapping (`nas export --arch`).
- `summary.json`: what `nas search --json` prints (with why `auto` chose its score: in one line,
  `score_line`, and with the evidence, `score_reason`), the settings, the best record and the
  finalists stage.

A loop that failed leaves the files of what it evaluated (`write_stopped`), no summary.json.
"""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from nas.core.arch import write_arch_file
from nas.core.costs import LATENCY, MACS
from nas.core.files import write_json
from nas.core.jsonl import write_records
from nas.core.pareto import front as pareto_front
from nas.core.pareto import objective
from nas.engine.searching.pareto_report import write_pareto
from nas.engine.searching.results import RANKED, SearchResult, SearchRun, write_ranked
from searchers.base import Record, best_record, rank_key

if TYPE_CHECKING:
    from nas.engine.searching.finalists import FinalistsResult
    from nas.engine.searching.request import SearchRequest

SUMMARY = "summary.json"


def write_stopped(out_dir: Path, history: Sequence[Record], costs: Sequence[str], budgets: Mapping[str, float],
                  final: bool) -> None:
    """The files of a search stopped by an error or a signal: its Pareto front, best.yaml and,
    when `final` (the scores are final, not a population score's told ones), ranked.jsonl;
    else an earlier run's ranked.jsonl, now stale, is removed."""
    if not history:
        return
    write_pareto(out_dir, history, costs, budgets)
    write_arch_file(best_record(history)["arch"], out_dir / "best.yaml")
    if final:
        write_ranked(out_dir / RANKED, history)
    else:
        (out_dir / RANKED).unlink(missing_ok=True)


def answer(request: SearchRequest, ran: SearchRun, export: Callable[[Any], Any] | None = None,
           finalists: FinalistsResult | None = None, notes: Sequence[str] = ()) -> SearchResult:
    """The search's result and its files: the answer is the finalists' winner when there is a
    finalists stage, else the best record by the score; with a latency table and `export`,
    the answer is measured to report the table's error. `notes` are told the user but not
    recorded in summary.json."""
    history = ran.history
    best = best_record(history)
    if finalists is not None:
        best = dict(next(r for r in history if r["arch_id"] == finalists.winner["arch_id"]))
    out = request.out
    recorded = list(ran.notes)
    check = ran.costs.latency_check(export, best["arch"])
    if check is not None:
        recorded.append(f"latency of the best arch: predicted {check['predicted_ms']:.3f} ms, measured "
                        f"{check['measured_ms']:.3f} ms ({check['error_pct']:+.1f}%)")
    result = SearchResult(best["arch"], best["arch_id"], best.get("val_top1"), best["macs"], best["params"],
                          best.get(LATENCY.name), out, len(history), ran.new, best, check, [*recorded, *notes],
                          pareto_front(history, MACS.name), sorted(history, key=lambda r: r["trial"]),
                          request.score, objective(best), finalists.to_json() if finalists is not None else None,
                          request.objective, request.score_line, request.score_reason,
                          ran.costs.latency_source())
    write_pareto(out, history, ran.costs.names, ran.costs.budgets)
    write_arch_file(best["arch"], out / "best.yaml")
    if ran.final:
        write_records(out / RANKED, ranked(history, finalists))
    else:
        (out / RANKED).unlink(missing_ok=True)
    write_json(out / SUMMARY, {**result.to_json(), "searcher": request.searcher, "options": ran.options,
                               "seed": request.seed, "worker": request.worker, "trials": request.trials,
                               "target": ran.target, "budgets": ran.costs.budgets, "record": best,
                               "notes": recorded,
                               "source": None if request.source is None else asdict(request.source)})
    return result


def ranked(history: Sequence[Record], finalists: FinalistsResult | None = None) -> list[Record]:
    """The records best first, the reported best first (see the module docstring)."""
    order = sorted(history, key=rank_key)
    if finalists is None:
        return order
    measured = {r["arch_id"]: (-r["finalist_top1"], r["rank"]) for r in finalists.finalists}
    first = sorted((r for r in order if r["arch_id"] in measured), key=lambda r: measured[r["arch_id"]])
    return first + [r for r in order if r["arch_id"] not in measured]
