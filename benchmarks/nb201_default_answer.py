"""The default `nas search` with no training at all, graded by NAS-Bench-201's published accuracies.

Each cell is what a user types on the paper-scale config with CIFAR-10 images and nothing
trained: `nas search cifar10_nb201 --set data.name=imagefolder data.root=DIR data.image_size=32
--out OUT --seed K [--max-macs P%]` (the default searcher, trials and `--score auto`, which
without a fidelity summary is the space's default zero-cost score). The answer is graded by the
benchmark's CIFAR-10 test accuracy and by its percentile among the distinct archs (canonical
networks) of the benchmark within the same MACs budget: the share of them it is at least as
accurate as. Prints one row per budget (mean and sd over seeds, each seed's answer), then one
JSON line.

    python -m benchmarks.nb201_default_answer --images /tmp/cifar [--budgets none,35%,50%,75%] [--seeds 5]

`--images` is an image folder with `train/<class>/*.jpg` (e.g. the shared JPEGs extracted); a
few hundred images suffice: the default score reads two batches of 64 (`--val-size` of them
are held out as the config's validation split, which no zero-cost score reads).
"""
from __future__ import annotations

import argparse
import csv
import json
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks import common
from benchmarks.nb201_data import TABLE, paper_space
from estimators.table import read_table
from nas import api
from nas.core.arch import arch_id
from search_spaces.cell201 import from_nb201_string, to_nb201_string


def budget_accuracies(table: dict[str, float], macs: dict[str, int], budget: float | None) -> list[float]:
    """The table's accuracies of the distinct archs within `budget` MACs (None: all)."""
    return [acc for key, acc in table.items() if budget is None or macs[key] <= budget]


def percentile(value: float, population: list[float]) -> float:
    """The share (%) of `population` that `value` is at least as high as."""
    return 100.0 * sum(p <= value for p in population) / len(population)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=Path, required=True, help="an image folder holding train/<class>/*.jpg")
    parser.add_argument("--budgets", default="none,35%,50%,75%", help="MACs budgets (none: unconstrained)")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--val-size", type=int, default=100)
    args = parser.parse_args(argv)
    space = paper_space()
    table = read_table(f"table:{TABLE}", space)
    macs = macs_of_table(space, table)
    config = api.load_config("cifar10_nb201", ["data.name=imagefolder", f"data.root={args.images}",
                                               "data.image_size=32", f"data.val_size={args.val_size}",
                                               "data.workers=0"])
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for budget in args.budgets.split(","):
            found, limit = [], None
            start = time.perf_counter()
            for seed in range(args.seeds):
                out = Path(tmp) / f"{budget.rstrip('%')}-s{seed}"
                run = api.untrained_run(config, out, "cpu")
                result = api.search(run, seed=seed, out=out, progress=False,
                                    max_macs=None if budget == "none" else budget)
                limit = json.loads((result.dir / "summary.json").read_text())["budgets"].get("macs")
                population = budget_accuracies(table, macs, limit)
                accuracy = table[result.arch_id]
                found.append({"seed": seed, "arch_id": result.arch_id, "arch": to_nb201_string(result.best),
                              "macs": result.macs, "accuracy": accuracy,
                              "percentile": round(percentile(accuracy, population), 2),
                              "within_budget": len(population), "score": result.score})
            accuracies = [f["accuracy"] for f in found]
            population = budget_accuracies(table, macs, limit)
            rows[budget] = {"found": found, "budget_macs": limit, "mean": statistics.fmean(accuracies),
                            "sd": statistics.stdev(accuracies) if len(found) > 1 else 0.0,
                            "mean_percentile": statistics.fmean(f["percentile"] for f in found),
                            "min_percentile": min(f["percentile"] for f in found),
                            "within_budget": len(population), "best_within_budget": max(population),
                            "seconds": round(time.perf_counter() - start, 1)}
            r = rows[budget]
            print(f"{budget:5s} {r['mean']:.2f} +- {r['sd']:.2f}  percentile mean {r['mean_percentile']:.1f} "
                  f"(min {r['min_percentile']:.1f}) of {r['within_budget']} archs, best {r['best_within_budget']:.2f}"
                  f"  [{r['seconds']} s]  " + " ".join(f"{f['arch_id']} {f['accuracy']:.2f}" for f in found),
                  flush=True)
    return common.emit("nb201_default_answer", {"rows": rows, "score": found[0]["score"]}, argv)


def macs_of_table(space, table: dict[str, float]) -> dict[str, int]:
    """arch id -> MACs (the space's count) of every arch the table holds."""
    macs = {}
    with TABLE.open(newline="") as f:
        for row in csv.DictReader(f):
            arch = space.canonical(from_nb201_string(row["arch"]))
            macs.setdefault(arch_id(arch), space.macs(arch))
    return macs


if __name__ == "__main__":
    common.run(main)
