"""What the finalists stage (`nas search --finalists K`) buys: its measure against the supernet's
score, both judged by the committed standalone ground truth of the run's space.

For every arch of a ground-truth folder (cached `<arch_id>-s<k>.json` trainings), it measures
the supernet score (BN-recalibrated validation top-1) and the finalists' measure (a fine-tune of
the arch alone from the shared weights, `nas.engine.searching.finalists.finetune_top1`), with the
seconds each took, appending one line per arch to `--out` (a rerun continues). It then prints
the Kendall tau of each measure against the mean standalone test top-1, and for each MACs budget
(35/50/75% of the way from the cheapest to the dearest arch) the standalone rank of the arch a
search by the supernet score would answer and of the finalists' answer (the K best by the score,
re-measured).

    python -m benchmarks.finalists_gain RUN benchmarks/ground_truth/<space>/<recipe> --out rows.jsonl
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from benchmarks import common
from nas import api
from nas.core.ranks import kendall_tau_b
from nas.engine.searching.finalists import Finetune, finetune_top1


def ground_truth(folder: Path) -> dict[str, dict]:
    """Mean standalone test top-1 of every arch cached in `folder`, with its arch and MACs."""
    archs: dict[str, dict] = {}
    for path in sorted(folder.glob("*-s*.json")):
        record = json.loads(path.read_text())
        entry = archs.setdefault(record["arch_id"], {"arch": record["arch"], "macs": record["macs"], "seeds": []})
        entry["seeds"].append(record["test_top1"])
    return {key: {**entry, "truth": statistics.fmean(entry["seeds"])} for key, entry in archs.items()}


def measure(run: api.Run, truth: dict[str, dict], out: Path, steps: int) -> list[dict]:
    """One row per arch (cached in `out`): the truth, the supernet score, the finalists' measure."""
    rows = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    done = {row["arch_id"] for row in rows}
    for key, entry in sorted(truth.items(), key=lambda item: item[1]["macs"]):
        if key in done:
            continue
        arch = run.space.canonical(entry["arch"])
        start = time.perf_counter()
        supernet = run.evaluator.evaluate(arch, "val").top1
        middle = time.perf_counter()
        finetuned = finetune_top1(run, arch, Finetune(steps=steps))["finalist_top1"]
        row = {"arch_id": key, "macs": entry["macs"], "truth": entry["truth"], "supernet": supernet,
               "finetuned": finetuned, "supernet_s": round(middle - start, 1),
               "finetuned_s": round(time.perf_counter() - middle, 1)}
        with out.open("a") as f:
            f.write(json.dumps(row) + "\n")
        rows.append(row)
    return rows


def budget_picks(rows: list[dict], ks: tuple[int, ...]) -> list[dict]:
    """Per budget: the crowd's best and median, and the standalone rank of each measure's answer."""
    low, high = min(r["macs"] for r in rows), max(r["macs"] for r in rows)
    picks = []
    for percent in (35, 50, 75):
        crowd = [r for r in rows if r["macs"] <= low + percent / 100 * (high - low)]
        order = sorted(crowd, key=lambda r: -r["truth"])
        by_score = sorted(crowd, key=lambda r: (-r["supernet"], r["macs"]))
        pick = {"budget_pct": percent, "feasible": len(crowd), "best": order[0]["truth"],
                "median": statistics.median(r["truth"] for r in crowd),
                "supernet": {"arch_id": by_score[0]["arch_id"], "truth": by_score[0]["truth"],
                             "rank": order.index(by_score[0]) + 1}}
        for k in ks:
            winner = max(by_score[:k], key=lambda r: r["finetuned"])
            pick[f"finalists_k{k}"] = {"arch_id": winner["arch_id"], "truth": winner["truth"],
                                       "rank": order.index(winner) + 1}
        picks.append(pick)
    return picks


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run")
    parser.add_argument("ground_truth", type=Path, help="a recipe folder of cached standalone trainings")
    parser.add_argument("--out", type=Path, required=True, help="rows (JSON lines), continued by a rerun")
    parser.add_argument("--steps", type=int, default=Finetune.steps, help="the finalists' fine-tune steps")
    args = parser.parse_args(argv)
    common.use_threads(1)
    rows = measure(api.load_run(args.run), ground_truth(args.ground_truth), args.out, args.steps)
    truth = [r["truth"] for r in rows]
    summary = {"archs": len(rows), "steps": args.steps,
               "tau": {m: kendall_tau_b([r[m] for r in rows], truth) for m in ("macs", "supernet", "finetuned")},
               "seconds": {m: statistics.median(r[f"{m}_s"] for r in rows) for m in ("supernet", "finetuned")},
               "budgets": budget_picks(rows, (3, 5))}
    for pick in summary["budgets"]:
        print(f"{pick['budget_pct']}% MACs: {pick['feasible']} feasible, best {100 * pick['best']:.2f}, median "
              f"{100 * pick['median']:.2f}; supernet answer rank {pick['supernet']['rank']}; finalists K=3 rank "
              f"{pick['finalists_k3']['rank']}, K=5 rank {pick['finalists_k5']['rank']}")
    return common.emit("finalists_gain", summary, argv)


if __name__ == "__main__":
    common.run(main)
