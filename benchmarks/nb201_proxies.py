"""Zero-cost proxies on NAS-Bench-201: parity with NASLib's own scores, rank agreement with the
benchmark's accuracies (with intervals, beside the published figures), and the default score
chosen on one half of the archs and graded on the other.

Reads the per-arch score files `benchmarks.nb201_scores` writes (`--scores`, one initialisation
and batch each; NASLib's archs and random ones), and optionally files of the same archs scored
with another batch (`--other-batch`) or another initialisation (`--other-init`), which measure
how much of a disagreement with NASLib those two alone explain. Prints four tables and one JSON
line:

- parity: Spearman between our score and NASLib's score of the same proxy on its 725 archs
  (all, and those without dead edges, which nas prunes and NASLib's network runs), beside the
  Spearman between two of our own scorings that differ only in the batch or the initialisation;
- accuracy: Spearman and Kendall tau-b of each proxy with the table's CIFAR-10 test accuracy over
  NASLib's archs, the random ones and all, with 90% bootstrap intervals; and on NASLib's archs,
  against NASLib's `val_accuracy` (what the published figures are measured against), ours beside
  NASLib's own;
- the default: every candidate of `benchmarks.default_score` (each proxy, MACs fused with one or
  two proxies, equal-weight rank fusions) on the CHOOSE half, NASLib's archs; the best Spearman
  there chosen; every candidate graded on the REPORT half, the random archs.

    python -m benchmarks.nb201_proxies --scores benchmarks/nb201/scores_naslib_b0_i0.csv \\
        benchmarks/nb201/scores_random_b0_i0.csv --other-batch benchmarks/nb201/scores_naslib_b1_i0.csv \\
        --other-init benchmarks/nb201/scores_naslib_b0_i1.csv
"""
from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path

import numpy as np

from benchmarks import common
from benchmarks.default_score import candidates, fused
from benchmarks.nb201_data import TABLE, naslib_arch, naslib_records, paper_space
from benchmarks.nb201_scores import PROXIES
from estimators.table import read_table
from nas.core.arch import arch_id
from nas.engine.fidelity.rank_stats import bootstrap_interval, kendall_tau_b, macs_terciles, spearman_rho, \
    within_bin_tau

NASLIB_NAMES = {"synflow": "synflow", "snip": "snip", "grad_norm": "grad_norm", "jacov": "jacov",
                "naswot": "nwot", "macs": "flops", "params": "params"}
# Published Spearman with CIFAR-10 validation accuracy (../shared/data/README.md): Abdelfattah et
# al. (ICLR 2021, all 15,625 archs) and NAS-Bench-Suite-Zero (NeurIPS 2022, 1,000 random archs).
PUBLISHED = {"synflow": (0.737, 0.73), "snip": (0.596, 0.58), "grad_norm": (0.594, 0.58), "jacov": (0.731, 0.75),
             "naswot": (None, 0.77), "macs": (None, 0.69), "params": (None, 0.72), "zico": (None, None)}
BOOTSTRAP_SEED = 0


def naslib_score(record: dict, name: str) -> float | None:
    """NASLib's score of proxy `name` in one of its records (None where the file lacks it: one
    arch has no synflow)."""
    value = record.get(NASLIB_NAMES[name])
    return value["score"] if isinstance(value, dict) else value


def read_scores(paths: list[Path]) -> dict[str, dict]:
    """arch id -> its row (`arch`, `source`, one float per proxy), over every file in order."""
    rows: dict[str, dict] = {}
    for path in paths:
        with path.open(newline="") as f:
            for row in csv.DictReader(f):
                if row.get(PROXIES[-1]) not in (None, ""):
                    rows[row["arch_id"]] = {"arch": row["arch"], "source": row["source"],
                                            **{p: float(row[p]) for p in PROXIES}}
    return rows


def with_interval(statistic, x, y) -> dict:
    value = statistic(x, y)
    low, high = bootstrap_interval(statistic, [x, y], BOOTSTRAP_SEED)
    return {"value": round(value, 3), "interval": [round(low, 3), round(high, 3)]}


def parity(scores: dict[str, dict], other_batch: dict[str, dict], other_init: dict[str, dict]) -> dict:
    """Per proxy: ours vs NASLib's on its archs (all, live), and ours vs ours with another batch or init."""
    space, records = paper_space(), naslib_records()
    keys = [k for k in records if arch_id(space.canonical(naslib_arch(k))) in scores]
    ids = [arch_id(space.canonical(naslib_arch(k))) for k in keys]
    live = [i for i, k in enumerate(keys) if space.canonical(naslib_arch(k)) == naslib_arch(k)]
    out = {}
    for name in PROXIES:
        row: dict = {}
        if name in NASLIB_NAMES:
            theirs = [naslib_score(records[k], name) for k in keys]
            have = [n for n, t in enumerate(theirs) if t is not None]
            alive = [n for n in have if n in set(live)]
            ours = [scores[i][name] for i in ids]
            row["naslib_all"] = round(spearman_rho([ours[n] for n in have], [theirs[n] for n in have]), 3)
            row["naslib_live"] = round(spearman_rho([ours[n] for n in alive], [theirs[n] for n in alive]), 3)
            row["archs"], row["live"] = len(have), len(alive)
        for label, other in (("other_batch", other_batch), ("other_init", other_init)):
            shared = [i for i in ids if i in other]
            if len(shared) > 2:
                row[label] = round(spearman_rho([scores[i][name] for i in shared], [other[i][name] for i in shared]), 3)
                row[label + "_archs"] = len(shared)
        out[name] = row
    return out


def accuracy(scores: dict[str, dict], table: dict[str, float]) -> dict:
    """Per proxy: Spearman and Kendall with the test accuracy (naslib, random, all, with intervals),
    and Spearman with NASLib's validation accuracy on its archs, ours and NASLib's own."""
    groups = {"naslib": [i for i, r in scores.items() if r["source"] == "naslib"],
              "random": [i for i, r in scores.items() if r["source"] == "random"], "all": list(scores)}
    space, records = paper_space(), naslib_records()
    by_id = {arch_id(space.canonical(naslib_arch(k))): k for k in records}
    val_ids = [i for i in groups["naslib"] if i in by_id]
    val = [records[by_id[i]]["val_accuracy"] for i in val_ids]
    out = {}
    for name in PROXIES:
        row: dict = {}
        for group, ids in groups.items():
            if len(ids) < 3:
                continue
            x, y = [scores[i][name] for i in ids], [table[i] for i in ids]
            row[group] = {"archs": len(ids), "spearman": with_interval(spearman_rho, x, y),
                          "kendall": with_interval(kendall_tau_b, x, y)}
        if val_ids:
            row["naslib_val"] = {"ours": round(spearman_rho([scores[i][name] for i in val_ids], val), 3)}
            if name in NASLIB_NAMES:
                pairs = [(naslib_score(records[by_id[i]], name), v) for i, v in zip(val_ids, val)]
                pairs = [(t, v) for t, v in pairs if t is not None]
                row["naslib_val"]["naslib"] = round(spearman_rho(*zip(*pairs)), 3)
        row["published"] = PUBLISHED.get(name)
        out[name] = row
    return out


def choose_default(scores: dict[str, dict], table: dict[str, float]) -> dict:
    """Every candidate's Spearman on the CHOOSE half (NASLib's archs, a sample someone else drew);
    the best chosen; every candidate graded on the REPORT half (the random archs, which took no part
    in the choice): Spearman with its interval, Kendall, and Kendall within MACs terciles (what
    ranking inside a budget needs)."""
    ids = sorted(scores)
    columns = {p: [scores[i][p] for i in ids] for p in PROXIES}
    truth = [table[i] for i in ids]
    choose = [n for n, i in enumerate(ids) if scores[i]["source"] == "naslib"]
    report = [n for n, i in enumerate(ids) if scores[i]["source"] == "random"]
    if len(choose) < 3 or len(report) < 3:
        return {}
    bins = macs_terciles([columns["macs"][i] for i in report])
    rows = {}
    for spec in candidates(list(PROXIES)):
        x_choose, x_report = fused(spec, columns, choose), fused(spec, columns, report)
        y_report = [truth[i] for i in report]
        rows[spec] = {"choose_spearman": round(spearman_rho(x_choose, [truth[i] for i in choose]), 4),
                      "report_spearman": with_interval(spearman_rho, x_report, y_report),
                      "report_kendall": round(kendall_tau_b(x_report, y_report), 3),
                      "report_within_tercile_kendall": round(within_bin_tau(x_report, y_report, bins), 3)}
    chosen = max(rows, key=lambda s: rows[s]["choose_spearman"])
    return {"archs": len(ids), "choose": len(choose), "report": len(report), "chosen": chosen, "candidates": rows}


def print_tables(result: dict) -> None:
    print("parity: Spearman of our score with NASLib's (its archs; live = no dead edge), and with ours "
          "under another batch / initialisation")
    for name, row in result["parity"].items():
        print(f"  {name:10s} NASLib all {row.get('naslib_all', '-')!s:6s} live {row.get('naslib_live', '-')!s:6s} "
              f"other batch {row.get('other_batch', '-')!s:6s} other init {row.get('other_init', '-')!s:6s}")
    print("accuracy: Spearman [90% interval] with the table's test accuracy; NASLib's val accuracy: ours / NASLib's")
    for name, row in result["accuracy"].items():
        cells = [f"{g} {row[g]['spearman']['value']:.3f} {row[g]['spearman']['interval']}" for g in
                 ("naslib", "random", "all") if g in row]
        val = row.get("naslib_val", {})
        print(f"  {name:10s} " + "  ".join(cells) + f"  val {val.get('ours', '-')} / {val.get('naslib', '-')}"
              f"  published {row['published']}")
    default = result["default"]
    if not default:
        return
    print(f"default: chosen on {default['choose']} archs, graded on {default['report']}: {default['chosen']}")
    best = sorted(default["candidates"].items(), key=lambda kv: -kv[1]["choose_spearman"])[:12]
    for spec, row in best:
        print(f"  {spec:28s} choose {row['choose_spearman']:.3f}  report {row['report_spearman']['value']:.3f} "
              f"{row['report_spearman']['interval']}  tau {row['report_kendall']:.3f}  "
              f"within-tercile tau {row['report_within_tercile_kendall']:.3f}")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scores", type=Path, nargs="+", required=True, help="files of benchmarks.nb201_scores")
    parser.add_argument("--other-batch", type=Path, nargs="*", default=[])
    parser.add_argument("--other-init", type=Path, nargs="*", default=[])
    args = parser.parse_args(argv)
    scores = read_scores(args.scores)
    if len(scores) < 4:
        raise SystemExit(f"--scores: {len(scores)} scored archs; at least 4 are needed")
    table = read_table(f"table:{TABLE}", paper_space())
    result = {"archs": len(scores),
              "naslib": sum(r["source"] == "naslib" for r in scores.values()),
              "parity": parity(scores, read_scores(args.other_batch), read_scores(args.other_init)),
              "accuracy": accuracy(scores, table), "default": choose_default(scores, table)}
    print_tables(result)
    common.emit("nb201_proxies", result, argv)
    return result


if __name__ == "__main__":
    common.run(main)
