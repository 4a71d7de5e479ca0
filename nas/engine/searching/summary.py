"""A finished search folder's answer for people (`nas summary`): the chosen subnet, its costs
against the budgets, and how it was chosen (the score, why `auto` chose it, the finalists)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from nas.core.errors import SearchError
from nas.core.records import field_problems, parse_record, read_json
from nas.core.schema import number_in


AGAIN = "run the same nas search again to write it anew"


@dataclass(frozen=True)
class SearchSummaryRecord:
    """The fields of a search's summary.json that `format_search_summary` reads (the file holds
    more: the score's line and reason, the source, the searcher ...), each checked."""

    arch_id: str
    macs: int
    params: int
    dir: str
    val_top1: float | None = None
    latency_ms: float | None = None
    budgets: dict[str, Any] | None = None
    finalists: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        field_problems(macs=(self.macs >= 0, "a count >= 0"), params=(self.params >= 0, "a count >= 0"),
                       val_top1=(self.val_top1 is None or number_in(self.val_top1, 0, 1), "a fraction in [0, 1]"),
                       latency_ms=(self.latency_ms is None or number_in(self.latency_ms, 0), "a number >= 0"),
                       budgets=(self.budgets is None or all(number_in(v, 0) and v > 0 for v in self.budgets.values()),
                                "a mapping of positive budgets"),
                       finalists=(self.finalists is None or _finalists_ok(self.finalists), "null or a finalists "
                                  "stage (measure, winner, search_best, finalists with rank and finalist_top1)"))


def search_summary(folder: str | Path) -> dict[str, Any]:
    """The summary.json of a finished search folder (`nas summary`), read through its typed
    record (`SearchSummaryRecord`: a damaged file is one line naming it and its first bad key),
    with `unfinished` (None, or what a later command left unfinished: more evaluations or a
    finalists stage after the summary was written, e.g. a killed search)."""
    folder = Path(folder)
    path = folder / "summary.json"
    if not path.exists():
        started = _started(folder)
        if started:
            raise SearchError(f"SEARCH_DIR: {folder} holds no summary.json: the search is unfinished (killed, or "
                              f"still running; {started}); run the same nas search again to finish it")
        raise SearchError(f"SEARCH_DIR: {folder} holds no summary.json (not a finished search folder)")
    summary = read_json(path, param="SEARCH_DIR", fix=AGAIN)
    parse_record(SearchSummaryRecord, summary, path, param="SEARCH_DIR", fix=AGAIN, open_keys=True)
    return {**summary, "unfinished": _unfinished(folder, path)}


def _started(folder: Path) -> str:
    """What a search folder without summary.json holds ("" for nothing of a search)."""
    parts = [f"{name} holds {_lines(folder / name)} records" for name in ("results.jsonl", "finalists.jsonl")
             if (folder / name).is_file()]
    return ", ".join(parts)


def _lines(path: Path) -> int:
    return sum(1 for line in path.read_text(errors="replace").splitlines() if line.strip())


def _unfinished(folder: Path, summary_path: Path) -> str | None:
    """What was written after summary.json by a command that did not finish (a search writes
    its summary last), or None."""
    written = summary_path.stat().st_mtime_ns
    later = [name for name in ("results.jsonl", "finalists.jsonl")
             if (folder / name).is_file() and (folder / name).stat().st_mtime_ns > written]
    if not later:
        return None
    what = "a finalists stage" if "finalists.jsonl" in later else "more evaluations"
    return (f"{what} started after this summary was written did not finish ({', '.join(later)} changed since): "
            "this is the answer before it; run the same nas search again to finish it")


def _score_line(summary: Mapping[str, Any]) -> str:
    """The score and its one reason (a summary written before `score_line` existed: the score)."""
    line, score = summary.get("score_line"), summary.get("score", "supernet")
    if isinstance(line, str) and line:
        return line
    if summary.get("score_reason"):
        return f"score auto: {score} (why: score_reason in summary.json)"
    return f"the score {score}"


def _finalists_ok(stage: Any) -> bool:
    if not isinstance(stage, Mapping) or not isinstance(stage.get("finalists"), list):
        return False
    if not isinstance(stage.get("measure"), Mapping) or not number_in(stage["measure"].get("steps"), 1, integer=True):
        return False
    rows = stage["finalists"]
    if not all(isinstance(r, Mapping) and isinstance(r.get("arch_id"), str) and number_in(r.get("finalist_top1"), 0, 1)
               and number_in(r.get("rank"), 1, integer=True) for r in rows):
        return False
    ids = {r["arch_id"] for r in rows}
    return stage.get("winner") in ids and stage.get("search_best") in ids and isinstance(stage.get("changed"), bool)


def format_search_summary(summary: Mapping[str, Any]) -> str:
    """A search's answer in a few short lines: the chosen subnet, its costs against the budgets,
    and how it was chosen (the score and its one reason, what the search evaluated, and the
    finalists stage if any). The evidence behind `auto`'s choice is in `score_reason`."""
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
        source = summary.get("latency_table")
        source = f" ({source.get('table') or 'table'}, {source.get('device')}, batch {source.get('batch')})" \
            if isinstance(source, Mapping) else ""
        costs.append(f"latency {summary['latency_ms']:.3f} ms{source}" + (f" of a {budget:g} ms budget" if budget else ""))
    top1 = f", val top-1 {100 * summary['val_top1']:.2f}% in the supernet" if summary.get("val_top1") is not None else ""
    lines = [f"chosen subnet {summary['arch_id']}: {', '.join(costs)}{top1}"]
    lines.append(f"chosen by: {_score_line(summary)}")
    lines.append(f"searched: {summary.get('evaluated', '?')} archs evaluated"
                 + (f" by {summary['searcher']}" if summary.get("searcher") else "")
                 + (f"; optimised for {summary['optimised_for']}" if isinstance(summary.get("optimised_for"), str)
                    and summary.get("optimised_for") else ""))
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
    elif not summary.get("unfinished"):
        lines.append("no finalists stage: the score's best is the answer (nas search --finalists K measures "
                     "the K best again)")
    if summary.get("unfinished"):
        lines.append(f"unfinished: {summary['unfinished']}")
    lines.append(f"arch file: {Path(summary['dir']) / 'best.yaml'}")
    return "\n".join(lines)
