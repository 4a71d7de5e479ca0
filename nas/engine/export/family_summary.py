"""A family at a glance (`nas summary FAMILY_DIR`): one row per member, read from the records.

Each member's row comes from family.json (budget, arch, costs) and from the `shipped.json` its
export wrote into the member's search folder (shipped and inherited test top-1, how it was
shipped, the min subnet it was compared with). A member not exported yet is shown as such,
with the command that exports the family. A member that is not above the min subnet on
validation (validation decides, the test split reports) is flagged: the cheaper min subnet
would serve that budget as well. `family.png` plots the shipped test top-1 against MACs (and
against latency where the family was searched with a latency table), the min and max subnets
marked with their accuracy in the supernet (recorded by the family export).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from nas.core.amounts import format_amount, format_share
from nas.core.errors import SearchError, plural
from nas.core.schema import to_plain
from nas.engine.export.family import read_family_file
from nas.engine.export.family_command import export_command, export_target
from nas.engine.export.family_record import read_family_export
from nas.engine.export.scratch import cheaper_path_note
from nas.engine.export.shipped import shipped_status
from nas.engine.plotting import pyplot, save_png
from nas.engine.searching.family import FAMILY

FIGURE = "family.png"


def _how(shipped: Mapping[str, Any]) -> str:
    """How a member was shipped, in a few words."""
    tuned = shipped.get("finetune")
    if shipped.get("shipped") == "scratch":
        return "trained alone"
    if isinstance(tuned, Mapping):
        distilled = " +distill" if tuned.get("distill") else ""
        return f"fine-tuned {format_share(tuned.get('fraction_of_run', 0))}{distilled}"
    return "inherited"


def _member_row(folder: Path, member: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("index", "budget", "budget_spec", "arch_id", "macs", "params", "latency_ms")
    row = {key: member.get(key) for key in keys}
    shipped, stale = shipped_status(folder / member["dir"], member["arch_id"])
    if shipped is None:
        return {**row, "exported": False, "stale": stale}
    min_subnet = next((c for c in shipped.get("cheaper") or [] if c.get("source") == "min subnet"), None)
    below = (min_subnet is not None and isinstance(min_subnet.get("val_top1"), (int, float))
             and min_subnet["val_top1"] >= shipped["val_top1"])
    return {**row, "exported": True, "export_dir": shipped.get("export_dir"), "shipped": shipped.get("shipped"),
            "how": _how(shipped), "val_top1": shipped.get("val_top1"), "test_top1": shipped.get("test_top1"),
            "inherited_test_top1": (shipped.get("inherited") or {}).get("test_top1"),
            "finetune": shipped.get("finetune"), "min_subnet": min_subnet if below else None,
            "other_weights": shipped.get("other_weights")}


def family_summary(folder: str | Path) -> dict[str, Any]:
    """The family in `folder` as plain data: what was asked, one row per member (`exported`
    False until its export; `min_subnet` set when the member is not above it on validation), the
    min and max subnets from the family export, and the command that exports what is missing."""
    folder = Path(folder)
    family = read_family_file(folder, "SEARCH_DIR")
    rows = [_member_row(folder, member) for member in family["members"]]
    record = read_family_export(folder)
    exported = to_plain(record) if record is not None else {}
    source = family.get("source") if isinstance(family.get("source"), Mapping) else None
    run = export_target(family, exported, rows)
    missing = [row["index"] for row in rows if not row["exported"]]
    scratch = any(row.get("shipped") == "scratch" for row in rows)
    return {"folder": str(folder), "cost": family["cost"], "budget_specs": family["budget_specs"],
            "searcher": family["searcher"], "score": family["score"], "evaluations": family["evaluations"],
            "trials": family["trials"], "source": source, "latency_table": family.get("latency_table"),
            "run": run, "members": rows, "min_subnet": exported.get("min_subnet"),
            "max_subnet": exported.get("max_subnet"),
            "finetune": exported.get("finetune"), "not_exported": missing,
            "export_command": export_command(folder, family, exported, rows) if missing else None,
            "note": None if scratch or not Path(run).is_dir() else _run_note(Path(run))}


def check_family_json_kept(folder: str | Path) -> None:
    """Raise `SearchError` naming family.json when `folder` holds family members' search folders
    (`m<k>-...` with their search.json) but neither family.json nor a search's own summary.json:
    a family whose family.json was deleted, not an unfinished search."""
    folder = Path(folder)
    if (folder / FAMILY).is_file() or (folder / "summary.json").is_file():
        return
    members = sorted(p.name for p in folder.glob("m[0-9]*-*") if (p / "search.json").is_file())
    if members:
        raise SearchError(f"SEARCH_DIR: {folder} holds no family.json, beside the member folders "
                          f"{', '.join(members[:3])}{' ...' if len(members) > 3 else ''}: a family search's folder whose "
                          "family.json is gone; run the same family search again into this folder to write it, or "
                          f"summarise one member (nas summary {folder / members[0]})")


def _run_note(run: Path) -> str | None:
    """`cheaper_path_note` of the run's config, None where it cannot be read."""
    from nas.core.config import load_config
    from nas.core.errors import NasError

    try:
        return cheaper_path_note(load_config(run / "config.yaml"), run / "config.yaml")
    except (NasError, OSError):
        return None


def _pct(value: Any) -> str:
    return f"{100 * value:.2f}%" if isinstance(value, (int, float)) else "-"


def format_family_summary(summary: Mapping[str, Any]) -> str:
    """The family as a compact table with the min and max subnets, flags and what is left to export."""
    rows = summary["members"]
    latency = any(row.get("latency_ms") is not None for row in rows)
    header = ["#", "budget", "arch", "MACs", "params"] + (["ms"] if latency else []) + ["test top-1", "shipped",
                                                                                        "inherited"]
    table = [header]
    for row in rows:
        cells = [str(row["index"]), str(row["budget_spec"]), str(row["arch_id"]), format_amount(row["macs"]),
                 format_amount(row["params"])] + ([f"{row['latency_ms']:.2f}" if row.get("latency_ms") is not None
                                                    else "-"] if latency else [])
        if row["exported"]:
            flag = " !" if row.get("min_subnet") else ""
            cells += [_pct(row["test_top1"]) + flag, row["how"], _pct(row["inherited_test_top1"])]
        else:
            cells += ["-", "not exported", "-"]
        table.append(cells)
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    lines = [f"family {summary['folder']}: {plural(len(rows), 'member')} on {summary['cost']} budgets "
             f"{', '.join(summary['budget_specs'])} ({summary['searcher']}, score {summary['score']}, "
             f"{summary['evaluations']} archs evaluated)"]
    lines += ["  " + "  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in table]
    ends = [f"{name} subnet {end['arch_id']} ({format_amount(end['macs'])} MACs): test {_pct(end['test_top1'])}"
            for name, end in (("min", summary.get("min_subnet")), ("max", summary.get("max_subnet"))) if end]
    if ends:
        lines.append("  beside the " + "; the ".join(ends) + " (inherited weights)")
    for row in rows:
        low = row.get("min_subnet")
        if low:
            ship_min = f"nas export {summary['run']} --arch min"
            lines.append(f"  ! member {row['index']} is not above the cheaper min subnet {low['arch_id']} on "
                         f"validation ({_pct(row['val_top1'])} vs {_pct(low['val_top1'])}; its test "
                         f"{_pct(low.get('test_top1'))}): "
                         f"its budget is served as well by the min subnet ({ship_min})")
    for row in rows:
        if row.get("stale"):
            lines.append(f"  member {row['index']}: not exported now: {row['stale']}")
        if row.get("other_weights"):
            lines.append(f"  member {row['index']}: note: {row['other_weights']}")
    if summary["not_exported"]:
        lines.append(f"not exported yet: member{'s' if len(summary['not_exported']) > 1 else ''} "
                     f"{', '.join(map(str, summary['not_exported']))}; export with: {summary['export_command']}")
    if summary.get("note"):
        lines.append(f"note: {summary['note']}")
    if summary.get("figure"):
        lines.append(f"figure: {summary['figure']}")
    return "\n".join(lines)


def plot_family(summary: Mapping[str, Any], path: str | Path) -> Path | None:
    """family.png: shipped test top-1 of the exported members against MACs (and against latency
    where members have one), the min and max subnets marked; None when nothing is exported."""
    shipped = [row for row in summary["members"] if row["exported"]]
    if not shipped:
        return None
    axes_of = ["macs"] + (["latency_ms"] if all(row.get("latency_ms") is not None for row in shipped) else [])
    plt = pyplot()
    fig, axes = plt.subplots(1, len(axes_of), figsize=(5.5 * len(axes_of), 4), squeeze=False)
    for ax, cost in zip(axes[0], axes_of):
        xs = [row[cost] / (1e6 if cost == "macs" else 1) for row in shipped]
        ax.plot(xs, [100 * row["test_top1"] for row in shipped], "o-", label="members (shipped)")
        for x, row in zip(xs, shipped):
            ax.annotate(f"m{row['index']}", (x, 100 * row["test_top1"]), textcoords="offset points", xytext=(4, 4))
        if cost == "macs":
            for name, marker in (("min", "v"), ("max", "^")):
                end = summary.get(f"{name}_subnet")
                if end:
                    ax.plot([end["macs"] / 1e6], [100 * end["test_top1"]], marker, label=f"{name} subnet (inherited)")
        ax.set_xlabel("MMACs" if cost == "macs" else "latency (ms)")
        ax.set_ylabel("test top-1 (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"family {Path(summary['folder']).name}", fontsize=9)
    path = Path(path)
    save_png(fig, path)
    return path


def summarise_family(folder: str | Path) -> dict[str, Any]:
    """`family_summary` of `folder`, with `figure`: family.png written there (None until a member is exported)."""
    summary = family_summary(folder)
    figure = plot_family(summary, Path(folder) / FIGURE)
    return {**summary, "figure": str(figure) if figure else None}


__all__ = ["FIGURE", "check_family_json_kept", "family_summary", "format_family_summary", "plot_family",
           "summarise_family"]
