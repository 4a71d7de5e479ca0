"""The statistics, files and printout of a fidelity measurement (`nas.engine.fidelity.runner`).

Statistics over the N measured archs (supernet test top-1 x, standalone test top-1 y, the
mean over seeds): Kendall tau-b and Spearman rho of x against y, top-k overlap with
k = max(1, N // 4), and for 5 equal-width bins over the archs' MACs the mean and max of y - x
in points. With two or more seeds, `seed_kendall_tau` compares the standalone seeds 0 and 1
with each other: the ceiling any supernet can reach against this ground truth
(`seed_within_bin_tau` the same within MACs bins).

Per estimator (`"estimators"`), its score against y: Kendall tau-b, tau within MACs bins (the
pairs of archs in one of 3 equal-count MACs bins of the measured archs: what a search under a
budget must tell apart), each with a 90% percentile bootstrap interval over resampled archs
(the same resamples for every estimator), and top-k overlap, over the archs it has a finite
score of (`"archs"`; the others listed under `"unscored"`). `"within_bin_pairs"` counts the
pairs inside bins that neither score ties; below `MIN_WITHIN_BIN_PAIRS` the within-bin interval
is the whole [-1, 1] (so few pairs cannot tell a ranking from chance: a verdict never calls it
a win beyond the intervals, and `--score auto` flags a choice made on it as weak). `"verdict"`: whether the
supernet's within-bin tau beats the better free baseline's (`macs` or `params`), by how much,
and whether beyond both intervals.
"""
from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nas.core.files import write_json
from nas.core.registry import SUPERNET_SCORE
from nas.engine.fidelity.estimators import BASELINES
from nas.engine.plotting import pyplot, save_png
from nas.engine.fidelity.rank_stats import (
    bin_gaps,
    bootstrap_interval,
    finite_or_none,
    kendall_tau_b,
    macs_terciles,
    spearman_rho,
    top_k_overlap,
    MIN_WITHIN_BIN_PAIRS,
    within_bin_pairs,
    within_bin_tau,
)

GAP_BINS = 5
TAU_BINS = 3


def seed_agreement(records: Sequence[Mapping[str, Any]], seeds: int) -> dict[str, float | None]:
    """Kendall tau (overall and within MACs bins) and Spearman rho of standalone seed 0 against
    seed 1 (None with one seed)."""
    if seeds < 2 or len(records) < 2:
        return {"seed_kendall_tau": None, "seed_spearman_rho": None, "seed_within_bin_tau": None}
    first = [r["standalone_test_top1_seeds"][0] for r in records]
    second = [r["standalone_test_top1_seeds"][1] for r in records]
    bins = macs_terciles([r["macs"] for r in records], TAU_BINS)
    return {"seed_kendall_tau": finite_or_none(kendall_tau_b(first, second)),
            "seed_spearman_rho": finite_or_none(spearman_rho(first, second)),
            "seed_within_bin_tau": finite_or_none(within_bin_tau(first, second, bins))}


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


def _interval(values: tuple[float | None, float | None]) -> list[float | None]:
    return [values[0], values[1]]


def estimator_stats(scores: Sequence[float], standalone: Sequence[float], bins: Sequence[int], k: int,
                    seed: int) -> dict[str, Any]:
    """The agreement of one estimator's `scores` with standalone top-1 (module docstring)."""
    x, y, b = list(scores), list(standalone), list(bins)
    if len(x) < 2:
        return {"archs": len(x), "kendall_tau": None, "kendall_tau_ci90": [None, None], "within_bin_tau": None,
                "within_bin_tau_ci90": [None, None], "within_bin_pairs": 0, "top_k_overlap": None}
    tau, pairs = finite_or_none(within_bin_tau(x, y, b)), within_bin_pairs(x, y, b)
    if tau is not None and pairs < MIN_WITHIN_BIN_PAIRS:
        within = [-1.0, 1.0]
    else:
        within = _interval(bootstrap_interval(within_bin_tau, [x, y, b], seed))
    return {"archs": len(x),
            "kendall_tau": finite_or_none(kendall_tau_b(x, y)),
            "kendall_tau_ci90": _interval(bootstrap_interval(kendall_tau_b, [x, y], seed)),
            "within_bin_tau": tau, "within_bin_tau_ci90": within, "within_bin_pairs": pairs,
            "top_k_overlap": top_k_overlap(x, y, min(k, len(x)))}


def estimator_summary(records: Sequence[Mapping[str, Any]], names: Sequence[str], seed: int) -> dict[str, Any]:
    """`{"estimators": {name: estimator_stats}, "verdict": line}` over the archs each scored;
    an estimator without a finite score of some archs lists them under `"unscored"`."""
    bins = macs_terciles([r["macs"] for r in records], TAU_BINS)
    k = max(1, len(records) // 4)
    stats = {}
    for name in names:
        rows = [i for i, r in enumerate(records) if r.get("estimators", {}).get(name) is not None]
        stats[name] = estimator_stats([records[i]["estimators"][name] for i in rows],
                                      [records[i]["standalone_test_top1"] for i in rows], [bins[i] for i in rows], k,
                                      seed)
        if len(rows) < len(records):
            stats[name]["unscored"] = [r["arch_id"] for i, r in enumerate(records) if i not in rows]
    return {"estimators": stats, "verdict": verdict(stats)}


def verdict(stats: Mapping[str, Mapping[str, Any]]) -> str:
    """One line: does the supernet's within-bin tau beat the better free baseline's, by how much,
    and is the difference beyond both 90% intervals."""
    shared = stats.get(SUPERNET_SCORE, {})
    baselines = [(n, stats[n]) for n in BASELINES if stats.get(n, {}).get("within_bin_tau") is not None]
    if shared.get("within_bin_tau") is None or not baselines:
        return ("undecided: the within-bin tau of the supernet or of both free baselines is undefined "
                "(too few archs, or only ties, inside the MACs bins)")
    name, best = max(baselines, key=lambda pair: pair[1]["within_bin_tau"])
    ours, theirs = shared["within_bin_tau"], best["within_bin_tau"]
    (low, high), (base_low, base_high) = shared["within_bin_tau_ci90"], best["within_bin_tau_ci90"]
    beats = ours > theirs
    separated = None not in (low, high, base_low, base_high) and (low > base_high if beats else high < base_low)
    where = ("beyond both 90% intervals" if separated else
             f"within the 90% intervals ([{_number(low, 2)}, {_number(high, 2)}] vs "
             f"[{_number(base_low, 2)}, {_number(base_high, 2)}])")
    return (f"the supernet {'beats' if beats else 'does not beat'} the best free baseline ({name}) within MACs "
            f"bins: tau {ours:.3f} vs {theirs:.3f} ({ours - theirs:+.3f}), {where}")


def write_report(out_dir: Path, summary: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> None:
    """summary.json, scatter.png, one scatter-<estimator>.png per estimator and TensorBoard
    scalars in `out_dir/tb`."""
    write_json(out_dir / "summary.json", dict(summary))
    plot_scatter(out_dir / "scatter.png", summary, records)
    for name, stats in summary.get("estimators", {}).items():
        plot_estimator(out_dir / f"scatter-{name}.png", name, stats, records)
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(log_dir=str(out_dir / "tb")) as writer:
        for name, stats in summary.get("estimators", {}).items():
            for key in ("kendall_tau", "within_bin_tau", "top_k_overlap"):
                if stats[key] is not None:
                    writer.add_scalar(f"fidelity/estimators/{name}/{key}", stats[key], 0)
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


def plot_estimator(path: Path, name: str, stats: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> None:
    """An estimator's score against standalone test top-1 (%), coloured by MMACs."""
    plt = pyplot()
    rows = [r for r in records if r.get("estimators", {}).get(name) is not None]
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    points = ax.scatter([r["estimators"][name] for r in rows], [100 * r["standalone_test_top1"] for r in rows],
                        c=[r["macs"] / 1e6 for r in rows], cmap="viridis", s=24)
    fig.colorbar(points, ax=ax, label="MMACs")
    ax.set_title(f"{name}: Kendall tau {_number(stats['kendall_tau'])}, within MACs bins "
                 f"{_number(stats['within_bin_tau'])}", fontsize=10)
    ax.set_xlabel(f"{name} score")
    ax.set_ylabel("standalone test top-1 (%)")
    ax.grid(alpha=0.3)
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
    if "estimators" in summary:
        lines += ["", format_estimators(summary)]
    return "\n".join(lines)


def _with_interval(value: float | None, interval: Sequence[float | None]) -> str:
    return f"{_number(value)} [{_number(interval[0], 2)}, {_number(interval[1], 2)}]"


def format_estimators(summary: Mapping[str, Any]) -> str:
    """The per-estimator table (tau and within-bin tau with 90% intervals, top-k overlap) and the verdict."""
    stats = summary["estimators"]
    width = max([9, *map(len, stats)])
    lines = [f"{'estimator':{width}s}  {'Kendall tau [90% CI]':22s}  {'within-bin tau [90% CI]':23s}  "
             f"top-{summary['top_k']} overlap"]
    for name, row in stats.items():
        lines.append(f"{name:{width}s}  {_with_interval(row['kendall_tau'], row['kendall_tau_ci90']):22s}  "
                     f"{_with_interval(row['within_bin_tau'], row['within_bin_tau_ci90']):23s}  "
                     f"{_number(row['top_k_overlap'], 2)}")
    for name, row in stats.items():
        if row.get("unscored"):
            lines.append(f"{name}: over the {row['archs']} archs it has a finite score of; none for "
                         f"{', '.join(row['unscored'])}")
    ceiling = summary.get("seed_within_bin_tau")
    if ceiling is not None:
        lines.append(f"{'(seeds)':{width}s}  {_number(summary['seed_kendall_tau']):22s}  {_number(ceiling):23s}  "
                     f"ground truth seed 0 vs seed 1: the ceiling")
    lines.append(f"verdict: {summary['verdict']}")
    fitted = stats.get("calibrated", {}).get("kendall_tau")
    if fitted is not None and fitted <= 0:
        # Leave-one-out on a target with little signal predicts each arch from the others' mean,
        # which moves away from it: a negative tau is the mark of a model fitted to noise.
        lines.append(f"calibrated: leave-one-out tau {fitted:.3f} is no better than chance: on this ground truth "
                     f"the fitted model learns noise; do not rank with it (nas search --score calibrated)")
    return "\n".join(lines)
