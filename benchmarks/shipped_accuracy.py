"""What a user ships against the same arch trained alone: inherited and fine-tuned test top-1.

For a trained run and the committed standalone trainings of its space and recipe (every arch with
at least `--min-seeds` seeds under any `--ground-truth` root):
1. each arch's BN-recalibrated test top-1 inside the supernet (what `nas export --finetune 0`
   ships), beside its standalone mean and sd, and the gap (inherited minus standalone, points);
2. the mean gap per MACs bin (`--bins`), and Kendall tau between inherited and standalone accuracy;
3. for the archs named by `--finetune-archs` (e.g. a search's answers): the test top-1 after the
   export's fine-tune (`--finetune`, `--lr`, `--distill`: the `export.finetune` settings), its
   cost as a fraction of one standalone training (steps, and seconds where measured alike), and
   the min subnet's inherited accuracy beside it.
It prints the tables, then one JSON line with everything.

    python -m benchmarks.shipped_accuracy RUN --ground-truth benchmarks/ground_truth \\
        --ground-truth benchmarks/ground_truth_searched [--bins 1.5M,3M,5M] \\
        [--finetune-archs ID,ID,... --finetune 20% --lr 0.03 [--distill]] [--runs-dir runs]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from benchmarks import common
from nas import api
from nas.core.amounts import parse_amount
from nas.core.arch import arch_id
from nas.core.config import FinetuneConfig
from nas.core.errors import NasError
from nas.core.ranks import kendall_tau_b
from nas.engine.export.finetune import finetune_subnet
from nas.engine.fidelity.runner import recipe_ground_truth
from nas.engine.run_dir import DEFAULT_RUNS_DIR


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", metavar="RUN", help="trained run (directory or name under --runs-dir)")
    parser.add_argument("--ground-truth", action="append", required=True, metavar="DIR",
                        help="a standalone cache root (repeat for several)")
    parser.add_argument("--min-seeds", type=int, default=2, help="archs with at least this many trainings")
    parser.add_argument("--bins", default="1.5M,3M,5M", help="MACs bin edges (default 1.5M,3M,5M)")
    parser.add_argument("--finetune-archs", default="", help="arch ids to fine-tune (comma-separated)")
    parser.add_argument("--finetune", default="20%", help="fine-tune length: N, Ne or P%% (default 20%%)")
    parser.add_argument("--lr", type=float, default=0.03, help="fine-tune peak learning rate (default 0.03)")
    parser.add_argument("--distill", action="store_true", help="fine-tune with the max subnet as teacher")
    parser.add_argument("--checkpoint", default="last.pt")
    parser.add_argument("--runs-dir", default=DEFAULT_RUNS_DIR)
    return parser.parse_args(argv)


def standalone_records(run: Any, roots: list[str], min_seeds: int) -> dict[str, dict[str, Any]]:
    """arch id -> {"arch", "macs", "seeds": [test top-1...], "steps", "seconds": [...]} from every root's cache
    of the run's space and recipe."""
    found: dict[str, dict[str, Any]] = {}
    for root in roots:
        truth = recipe_ground_truth(run.config, run.space, api.standalone_model, root, None, None)
        for path in sorted(truth.folder.glob("*-s[0-9]*.json")):
            record = json.loads(path.read_text())
            entry = found.setdefault(record["arch_id"], {"arch": record["arch"], "macs": record["macs"], "seeds": {},
                                                         "steps": record["steps"], "seconds": {}})
            entry["seeds"][record["seed"]] = record["test_top1"]
            entry["seconds"][record["seed"]] = record["seconds"]
    return {key: {**e, "seeds": [e["seeds"][s] for s in sorted(e["seeds"])],
                  "seconds": [e["seconds"][s] for s in sorted(e["seconds"])]}
            for key, e in found.items() if len(e["seeds"]) >= min_seeds}


def bin_label(macs: float, edges: list[float]) -> str:
    low = 0.0
    for edge in edges:
        if macs < edge:
            return f"{low / 1e6:g}-{edge / 1e6:g}M"
        low = edge
    return f">={low / 1e6:g}M"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    started = time.perf_counter()
    run = api.load_run(args.run, args.runs_dir, checkpoint=args.checkpoint, device="cpu")
    records = standalone_records(run, args.ground_truth, args.min_seeds)
    edges = [parse_amount(x, "--bins") for x in args.bins.split(",")]
    rows = []
    for key, entry in sorted(records.items(), key=lambda item: item[1]["macs"]):
        arch = run.space.canonical(entry["arch"])
        inherited = run.evaluator.evaluate(arch, "test").top1
        alone = statistics.fmean(entry["seeds"])
        rows.append({"arch_id": key, "macs": entry["macs"], "bin": bin_label(entry["macs"], edges),
                     "inherited_test_top1": inherited, "standalone_test_top1": alone,
                     "standalone_sd": statistics.stdev(entry["seeds"]) if len(entry["seeds"]) > 1 else 0.0,
                     "gap_points": round(100 * (inherited - alone), 3)})
        print(f"{key} {entry['macs'] / 1e6:6.2f}M inherited {100 * inherited:6.2f} standalone {100 * alone:6.2f} "
              f"gap {rows[-1]['gap_points']:+6.2f}", flush=True)
    bins: dict[str, list[float]] = {}
    for row in rows:
        bins.setdefault(row["bin"], []).append(row["gap_points"])
    per_bin = {label: {"n": len(gaps), "mean_gap_points": round(statistics.fmean(gaps), 3),
                       "min_gap_points": min(gaps)} for label, gaps in bins.items()}
    tau = kendall_tau_b([r["inherited_test_top1"] for r in rows], [r["standalone_test_top1"] for r in rows])
    for label, stats in per_bin.items():
        print(f"bin {label:>10s}: n {stats['n']:2d}, mean gap {stats['mean_gap_points']:+.2f} points "
              f"(worst {stats['min_gap_points']:+.2f})")
    print(f"Kendall tau inherited vs standalone over {len(rows)} archs: {tau:.3f}", flush=True)

    smallest = run.space.min()
    min_test = run.evaluator.evaluate(smallest, "test").top1
    settings = FinetuneConfig(length=args.finetune, lr=args.lr, distill=args.distill)
    tuned_rows = []
    for key in [k for k in args.finetune_archs.split(",") if k]:
        if key not in records:
            raise NasError(f"--finetune-archs: {key} has fewer than {args.min_seeds} standalone trainings here")
        entry = records[key]
        arch = run.space.canonical(entry["arch"])
        tuned = finetune_subnet(run, arch, settings, progress=False)
        row = next(r for r in rows if r["arch_id"] == key)
        tuned_rows.append({**row, "finetuned_test_top1": tuned.test_top1, "finetuned_val_top1": tuned.val_top1,
                           "finetune_steps": tuned.record["steps"], "finetune_seconds": tuned.record["seconds"],
                           "standalone_steps": entry["steps"], "standalone_seconds": entry["seconds"],
                           "cost_fraction_steps": round(tuned.record["steps"] / entry["steps"], 4),
                           "min_inherited_test_top1": min_test,
                           "finetuned_minus_standalone_points": round(100 * (tuned.test_top1 - row["standalone_test_top1"]), 3)})
        print(f"{key}: inherited {100 * row['inherited_test_top1']:.2f}, fine-tuned {100 * tuned.test_top1:.2f} "
              f"({tuned.record['steps']} steps, {tuned.record['seconds']:.0f} s), standalone "
              f"{100 * row['standalone_test_top1']:.2f} +- {100 * row['standalone_sd']:.2f}, min subnet "
              f"{100 * min_test:.2f}", flush=True)
    report = {"run": str(run.dir.root), "step": run.step, "checkpoint": args.checkpoint, "archs": rows,
              "bins": per_bin, "kendall_tau": tau, "min_subnet": {"arch_id": arch_id(smallest), "test_top1": min_test},
              "finetune": {"length": args.finetune, "lr": args.lr, "distill": args.distill}, "finetuned": tuned_rows,
              "wall_s": round(time.perf_counter() - started, 1)}
    return common.emit("shipped_accuracy", report, argv)


if __name__ == "__main__":
    common.run(main)
