"""What is shipped, set beside what the same supernet holds for less.

An export records its model's val and test top-1 beside the min subnet's (measured by the
supernet, BN-recalibrated) and beside every cheaper arch the search measured with the supernet
(`val_top1` in its `results.jsonl`). A shipped model less accurate on validation than a cheaper
subnet is said in one line naming that subnet: the user can ship the cheaper one instead.
Validation decides (the test split only reports), as everywhere else in `nas`.

When the arch came from a search folder of the same run, the export also writes `shipped.json`
there (the export's folder and metrics), which `nas summary` shows once checked against the
export folder (`nas.engine.export.shipped_record`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from nas.core.amounts import format_amount, format_share
from nas.core.files import write_json
from nas.core.jsonl import read_records
from nas.engine.export.shipped_record import SHIPPED, read_shipped, search_source, shipped_status

SEARCH_RECORDS = "results.jsonl"


def search_folder(arch_file: str | Path | None) -> Path | None:
    """The search folder an arch file lies in (it holds a search's `summary.json`), or None."""
    if arch_file is None or not isinstance(arch_file, (str, Path)) or str(arch_file) in ("max", "min"):
        return None
    folder = Path(arch_file).resolve().parent
    return folder if (folder / "summary.json").is_file() else None


def measured_by_search(folder: Path | None) -> list[dict[str, Any]]:
    """The search's records that the supernet measured (`val_top1`), one per arch."""
    if folder is None or not (folder / SEARCH_RECORDS).is_file():
        return []
    found: dict[str, dict[str, Any]] = {}
    for record in read_records(folder / SEARCH_RECORDS):
        if isinstance(record.get("val_top1"), (int, float)) and isinstance(record.get("macs"), (int, float)):
            found.setdefault(str(record.get("arch_id")), {"arch_id": str(record.get("arch_id")),
                                                         "macs": int(record["macs"]),
                                                         "val_top1": float(record["val_top1"]), "source": "search"})
    return list(found.values())


def cheaper_subnets(shipped_macs: int, min_subnet: Mapping[str, Any],
                    searched: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The min subnet and the searched archs that cost fewer MACs than the shipped model,
    most accurate on validation first."""
    candidates = [dict(min_subnet, source="min subnet")] + [dict(r) for r in searched
                                                           if r["arch_id"] != min_subnet["arch_id"]]
    cheaper = [c for c in candidates if c["macs"] < shipped_macs]
    return sorted(cheaper, key=lambda c: (-c["val_top1"], c["macs"]))


def below_cheaper(shipped_id: str, shipped_macs: int, shipped_val: float,
                  cheaper: Sequence[Mapping[str, Any]]) -> str | None:
    """One line when a cheaper subnet beats the shipped model on validation, naming the best such
    subnet; None otherwise."""
    better = [c for c in cheaper if c["val_top1"] > shipped_val]
    if not better:
        return None
    best = better[0]
    test = f", test {100 * best['test_top1']:.2f}%" if best.get("test_top1") is not None else ""
    return (f"the shipped {shipped_id} ({format_amount(shipped_macs)} MACs, val top-1 {100 * shipped_val:.2f}%) "
            f"is less accurate than the cheaper {best['source']} {best['arch_id']} ({format_amount(best['macs'])} "
            f"MACs, val top-1 {100 * best['val_top1']:.2f}%{test}): consider shipping that one "
            f"(nas export RUN --arch {'min' if best['source'] == 'min subnet' else best['arch_id']})")


def write_shipped(folder: Path | None, export_dir: Path, record: Mapping[str, Any]) -> None:
    """`shipped.json` in the search folder the arch came from (nothing without one, nor for an
    export that `record["search"]` says is not of the search's run)."""
    if folder is not None and (record.get("search") or {}).get("recorded", True):
        write_json(folder / SHIPPED, {"export_dir": str(Path(export_dir).absolute()), **record})


def format_shipped(shipped: Mapping[str, Any]) -> list[str]:
    """Lines for `nas summary`: what was shipped, how it compares with what it inherited and with
    the cheaper subnets, and the warning when one of them is better."""
    def pct(value: Any) -> str:
        return f"{100 * value:.2f}%" if isinstance(value, (int, float)) else "?"

    how = "inherited weights (no fine-tune)"
    finetune = shipped.get("finetune")
    if isinstance(finetune, Mapping):
        how = (f"fine-tuned alone {finetune.get('steps')} steps ({format_share(finetune.get('fraction_of_run', 0))} of "
               f"the run's training{', distilled from the max subnet' if finetune.get('distill') else ''})")
    inherited = shipped.get("inherited") or {}
    lines = [f"shipped: {shipped.get('arch_id')} in {shipped.get('export_dir')}, {how}: val top-1 "
             f"{pct(shipped.get('val_top1'))}, test {pct(shipped.get('test_top1'))}"
             + (f" (inherited: val {pct(inherited.get('val_top1'))}, test {pct(inherited.get('test_top1'))})"
                if isinstance(finetune, Mapping) else "")]
    for other in (shipped.get("cheaper") or [])[:3]:
        test = f", test {pct(other['test_top1'])}" if other.get("test_top1") is not None else ""
        lines.append(f"  beside the cheaper {other.get('source')} {other.get('arch_id')} "
                     f"({format_amount(other.get('macs', 0))} MACs): val {pct(other.get('val_top1'))}{test}")
    if shipped.get("other_weights"):
        lines.append(f"note: {shipped['other_weights']}")
    lines += [f"warning: {shipped[key]}" for key in ("ignores_input", "warning") if shipped.get(key)]
    return lines


__all__ = ["SHIPPED", "below_cheaper", "cheaper_subnets", "format_shipped", "measured_by_search",
           "read_shipped", "search_folder", "search_source", "shipped_status", "write_shipped"]
