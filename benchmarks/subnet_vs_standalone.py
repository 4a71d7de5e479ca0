"""Chosen subnets of a trained run, inside the supernet and trained alone: test top-1 of each.

For each `--arch` (max, min, or a YAML/JSON arch file such as a search's best.yaml):
1. its MACs and parameters, and its BN-recalibrated test top-1 inside the supernet (what
   `nas eval RUN --arch A --split test` prints);
2. its test top-1 trained alone with the ground-truth machinery of `nas fidelity` (the run
   config's recipe, or `--recipe`/`--epochs`; `--seeds` seeds; cached under `--ground-truth DIR`,
   by default the run's `fidelity/ground_truth`, so `nas fidelity` and `search_regret.py` share
   the trainings), `--workers` trainings at a time;
3. the gap: standalone mean minus supernet, in points.
It prints one table row per arch, then one JSON line with everything.

    python -m benchmarks.subnet_vs_standalone RUN --arch max --arch runs/RUN/search/NAME/best.yaml
        [--seeds 1] [--ground-truth DIR] [--recipe FILE] [--epochs N] [--workers 2] [--runs-dir runs]
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks import common
from nas import api
from nas.core.arch import Arch, arch_id
from nas.engine.fidelity.runner import arch_record, recipe_ground_truth
from nas.engine.run import resolve_arch
from nas.engine.run_dir import DEFAULT_RUNS_DIR


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", metavar="RUN", help="trained run (directory or name under --runs-dir)")
    parser.add_argument("--arch", action="append", required=True,
                        help="max, min, or a YAML/JSON arch file; repeat for several")
    parser.add_argument("--seeds", type=int, default=1, help="standalone trainings per arch")
    parser.add_argument("--ground-truth", metavar="DIR", help="standalone cache (default RUN/fidelity/ground_truth)")
    parser.add_argument("--recipe", help="YAML overrides of the run config's train:/data: sections")
    parser.add_argument("--epochs", type=int, help="standalone epochs (default: the recipe's)")
    parser.add_argument("--workers", type=int, default=1, help="standalone trainings at a time (1 thread each)")
    parser.add_argument("--checkpoint", default="last.pt", help="checkpoint file name (default last.pt)")
    parser.add_argument("--runs-dir", default=DEFAULT_RUNS_DIR)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    for flag in ("seeds", "workers"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag}: must be >= 1, got {getattr(args, flag)}")
    return args


def format_table(rows: list[dict[str, Any]]) -> str:
    """The table printed for the rows of `main`."""
    lines = [f"{'arch':28s} {'arch_id':10s} {'MACs':>9s} {'params':>9s} {'supernet %':>10s} "
             f"{'standalone %':>15s} {'gap':>6s}"]
    for row in rows:
        seeds = row["standalone_test_top1_seeds"]
        sd = statistics.stdev(seeds) if len(seeds) > 1 else 0.0
        alone = f"{100 * row['standalone_test_top1']:.2f} +- {100 * sd:.2f}"
        lines.append(f"{row['spec'][-28:]:28s} {row['arch_id']:10s} {row['macs'] / 1e6:8.3f}M "
                     f"{row['params'] / 1e3:8.1f}K {100 * row['supernet_test_top1']:10.2f} {alone:>15s} "
                     f"{row['gap_points']:+6.2f}")
    lines.append("gap: standalone mean minus supernet, points of test top-1")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    started = time.perf_counter()
    run = api.load_run(args.run, args.runs_dir, checkpoint=args.checkpoint)
    specs = {spec: resolve_arch(run.space, spec) for spec in args.arch}
    supernet = {spec: api.evaluate(run, arch, split="test").top1 for spec, arch in specs.items()}

    root = Path(args.ground_truth) if args.ground_truth is not None else run.dir.fidelity("ground_truth")
    truth = recipe_ground_truth(run.config, run.space, api.standalone_model, root, args.recipe, args.epochs)
    standalone: dict[str, list[dict[str, Any]]] = {}

    def keep(arch: Arch, results: list[dict[str, Any]]) -> None:
        standalone[arch_id(arch)] = results

    distinct = {arch_id(a): a for a in specs.values()}
    new = truth.collect(list(distinct.values()), args.seeds, args.workers, keep, progress=not args.quiet)
    rows = [{"spec": spec, **arch_record(arch, supernet[spec], standalone[arch_id(arch)])}
            for spec, arch in specs.items()]
    print(format_table(rows), flush=True)
    report = {"run": str(run.dir.root), "step": run.step, "checkpoint": args.checkpoint, "seeds": args.seeds,
              "ground_truth": str(truth.folder), "recipe_digest": truth.digest, "length": truth.recipe.length(),
              "archs": rows, "trainings_now": new, "workers": args.workers,
              "wall_s": round(time.perf_counter() - started, 1)}
    return common.emit("subnet_vs_standalone", report, argv)


if __name__ == "__main__":
    common.run(main)
