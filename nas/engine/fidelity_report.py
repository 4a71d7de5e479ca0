"""The statistics, files and printout of a fidelity measurement (`nas.engine.fidelity`).

Statistics over the N measured archs (supernet test top-1 x, standalone test top-1 y, the
mean over seeds): Kendall tau-b and Spearman rho of x against y, top-k overlap with
k = max(1, N // 4), and for 5 equal-width bins over the archs' MACs the mean and max of y - x
in points. With two or more seeds, `seed_kendall_tau` compares the standalone seeds 0 and 1
with each other: the ceiling any supernet can reach against this ground truth.
"""
from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nas.core.files import write_json
from nas.engine.plotting import pyplot, save_png
from nas.engine.rank_stats import bin_gaps, finite_or_none, kendall_tau_b, spearman_rho, top_k_overlap

GAP_BINS = 5


def seed_agreement(records: Sequence[Mapping[str, Any]], seeds: int) -> dict[str, float | None]:
    """Kendall tau and Spearman rho of standalone seed 0 against seed 1 (None with one seed)."""
    if seeds < 2 or len(records) < 2:
        return {"seed_kendall_tau": None, "seed_spearman_rho": None}
    first = [r["standalone_test_top1_seeds"][0] for r in records]
    second = [r["standalone_test_top1_seeds"][1] for r in records]
    return {"seed_kendall_tau": finite_or_none(kendall_tau_b(first, second)),
            "seed_spearman_rho": finite_or_none(spearman_rho(first, second))}


def summarize(records: Sequence[Mapping[str, Any]], seeds: int) -> dict[str, Any]:
    """The statistics of summary.json (see the module docstring); gaps in points."""
    shared = [r["supernet_test_top1"] for r in records]
    alone = [r["standalone_test_top1"] for r in records]
    macs = [r["macs"] for r in records]
    gaps = [100.0 * (a - s) for a, s in zip(alone, shared)]
    k = max(1, len(records) // 4)
    seconds = [t for r in records for t in r["standalone_seconds"]]
    return {"archs": len(records), "seeds": seeds,
            "kendall_tau": finite_or_none(kendall_tau_b(shared, alone)),
            "spearman_rho": finite_or_none(spearman_rho(shared, alone)),
            "top_k": k, "top_k_overlap": top_k_overlap(shared, alone, k),
            **seed_agreement(records, seeds),
            "gap_points_mean": statistics.fmean(gaps), "gap_points_max": max(gaps),
            "bins": bin_gaps(macs, alone, shared, GAP_BINS),
            "standalone_seconds_mean": statistics.fmean(seconds), "standalone_seconds_total": sum(seconds)}


def write_report(out_dir: Path, summary: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> None:
    """summary.json, scatter.png and TensorBoard scalars in `out_dir/tb`."""
    write_json(out_dir / "summary.json", dict(summary))
    plot_scatter(out_dir / "scatter.png", summary, records)
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(log_dir=str(out_dir / "tb")) as writer:
        for key in ("kendall_tau", "spearman_rho", "top_k_overlap", "seed_kendall_tau", "gap_points_mean"):
            if summary.get(key) is not None:
                writer.add_scalar(f"fidelity/{key}", summary[key], 0)
        for b, row in enumerate(summary["bins"]):
            if row["gap_mean"] is not None:
                writer.add_scalar("fidelity/bin_gap_points_mean", row["gap_mean"], b)
                writer.add_scalar("fidelity/bin_gap_points_max", row["gap_max"], b)
        for i, r in enumerate(sorted(records, key=lambda r: r["macs"])):   # step: rank by MACs
            writer.add_scalar("fidelity/supernet_test_top1", r["supernet_test_top1"], i)
            writer.add_scalar("fidelity/standalone_test_top1", r["standalone_test_top1"], i)


def plot_scatter(path: Path, summary: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> None:
    """Supernet against standalone test top-1 (%), coloured by MMACs, with the diagonal."""
    plt = pyplot()
    x = [100 * r["supernet_test_top1"] for r in records]
    y = [100 * r["standalone_test_top1"] for r in records]
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    points = ax.scatter(x, y, c=[r["macs"] / 1e6 for r in records], cmap="viridis", s=24)
    fig.colorbar(points, ax=ax, label="MMACs")
    low, high = min(x + y), max(x + y)
    ax.plot([low, high], [low, high], color="0.6", linestyle="--", linewidth=1, label="standalone = supernet")
    tau = summary.get("kendall_tau")
    ax.set_title(f"{len(records)} archs, Kendall tau {tau if tau is None else round(tau, 3)}", fontsize=10)
    ax.set_xlabel("supernet test top-1 (%)")
    ax.set_ylabel(f"standalone test top-1 (%), mean of {summary['seeds']} seed(s)")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    save_png(fig, path)


def _number(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def format_summary(summary: Mapping[str, Any]) -> str:
    """Human-readable rendering of a fidelity summary."""
    ranking = (f"{summary['archs']} archs, {summary['seeds']} standalone seed(s) each: Kendall tau "
               f"{_number(summary['kendall_tau'])}, Spearman rho {_number(summary['spearman_rho'])}, "
               f"top-{summary['top_k']} overlap {_number(summary['top_k_overlap'], 2)}")
    gaps = (f"standalone minus supernet: mean {summary['gap_points_mean']:+.2f}, max "
            f"{summary['gap_points_max']:+.2f} points")
    lines = [ranking, f"ground truth seed-to-seed Kendall tau (the ceiling): {_number(summary['seed_kendall_tau'])}",
             gaps, "  MMACs          archs  gap mean  gap max (points)"]
    for row in summary["bins"]:
        lines.append(f"  {row['macs_low'] / 1e6:5.2f}-{row['macs_high'] / 1e6:5.2f}  {row['archs']:5d}  "
                     f"{_number(row['gap_mean'], 2):>8s}  {_number(row['gap_max'], 2):>7s}")
    return "\n".join(lines)
