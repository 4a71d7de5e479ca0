"""Ranking fidelity: how well trained supernets rank subnets, against one shared ground truth.

1. Builds (or reuses) the standalone ground truth of a config's space with the machinery of
   `nas fidelity`: `--archs` archs stratified over the MACs range (min and max included),
   each trained alone `--seeds` times with the config's own recipe (`--epochs`, `--recipe`),
   cached under `--ground-truth DIR`, `--workers` trainings at a time (one thread each).
   Prints the ground truth's seed-to-seed Kendall tau: the ceiling any supernet can reach.
2. For each `--run`, measures that run's supernet against the same ground truth (nothing is
   trained again) and prints Kendall tau, Spearman rho, top-k overlap, the per-MACs-bin
   gap table (standalone minus supernet test top-1, in points), and the per-estimator table
   (`--estimators`, default the supernet and every cheap estimator: tau and within-MACs-bin
   tau with 90% bootstrap intervals, top-k overlap) with its verdict against MACs and params.
3. Prints one JSON line with everything.

    python -m benchmarks.ranking --ground-truth DIR --config fashion_mnist_cell201 [--archs 30]
        [--epochs 4] [--seeds 2] [--workers 2] [--recipe FILE] [--set KEY=VALUE ...] [--run RUN_DIR ...]
        [--estimators A,B,...] [--init-seeds 3] [--extends M]

Defaults: 30 archs on cell201, 16 on other spaces; the config's epochs; 2 seeds. `--extends M`:
the M-arch selection grown to `--archs` (as `nas fidelity --extends`), so its trainings are reused.
"""
from __future__ import annotations

import argparse
import statistics
import time

from benchmarks import common
from nas import api
from nas.core.schema import to_plain
from nas.engine.fidelity.report import format_summary

DEFAULT_ARCHS = {"cell201": 30}
FALLBACK_ARCHS = 16


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ground-truth", required=True, metavar="DIR", help="cache of standalone trainings")
    parser.add_argument("--config", default="fashion_mnist_cell201", help="config whose space and recipe to use")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="config overrides")
    parser.add_argument("--archs", type=int, help="archs to measure (default 30 on cell201, else 16)")
    parser.add_argument("--extends", metavar="M", help="grow the M-arch selection to --archs (M, or a lineage "
                        "like 48-ext24, as nas fidelity --extends)")
    parser.add_argument("--epochs", type=int, help="standalone epochs (default: the config's)")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--recipe", help="YAML overrides of the config's train:/data: sections")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--run", nargs="+", default=[], metavar="RUN_DIR", help="trained runs to compare")
    parser.add_argument("--estimators", metavar="A,B,...", help="estimators to report (default: supernet and "
                                                                 "every cheap one; macs and params always)")
    parser.add_argument("--init-seeds", type=int, default=3, help="initialisations proxies average over")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = _arguments(argv)
    config = api.load_config(args.config, args.set)
    archs = args.archs if args.archs is not None else DEFAULT_ARCHS.get(config.space.name, FALLBACK_ARCHS)
    started = time.perf_counter()
    truth = api.ground_truth(config, args.ground_truth, archs=archs, epochs=args.epochs, seeds=args.seeds,
                             recipe=args.recipe, workers=args.workers, extends=args.extends)
    seconds = [s for r in truth.records for s in r["standalone_seconds"]]
    report = {"config": args.config, "overrides": args.set, "ground_truth": str(truth.dir),
              "recipe_digest": truth.recipe_digest, "archs": archs, "extends": args.extends,
              "seeds": args.seeds,
              "length": truth.recipe.length(), "seed_kendall_tau": truth.seed_kendall_tau,
              "seed_spearman_rho": truth.seed_spearman_rho, "trainings_now": truth.new,
              "wall_s": round(time.perf_counter() - started, 1), "standalone_seconds_mean": statistics.fmean(seconds),
              "standalone_seconds_max": max(seconds), "workers": args.workers, "runs": {}}
    tau = truth.seed_kendall_tau
    print(f"ground truth {truth.dir}: {archs} archs x {args.seeds} seeds, {truth.recipe.length()}, "
          f"{truth.new} trainings now; seed-to-seed Kendall tau {'n/a' if tau is None else f'{tau:.3f}'}; "
          f"{statistics.fmean(seconds):.0f} s per training on one thread (max {max(seconds):.0f} s)", flush=True)
    for path in args.run:
        run = api.load_run(path)
        if to_plain(run.config.space) != to_plain(config.space):
            raise SystemExit(f"--run {path}: its space differs from --config {args.config}'s; "
                             f"give a config of the same space")
        result = api.fidelity(run, archs=archs, seeds=args.seeds, recipe=truth.recipe,
                              workers=args.workers, ground_truth_dir=args.ground_truth,
                              estimators=args.estimators, init_seeds=args.init_seeds, extends=args.extends)
        report["runs"][str(path)] = result.summary
        print(f"\n{path} (step {run.step}):\n{format_summary(result.summary)}", flush=True)
    return common.emit("ranking", report, argv)


if __name__ == "__main__":
    common.run(main)
