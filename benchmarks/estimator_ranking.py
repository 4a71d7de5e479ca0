"""Free baselines and zero-cost proxies against a standalone ground truth, without any supernet.

Reads the ground truth that `nas fidelity` and `benchmarks/ranking.py` cache (`--ground-truth
DIR`, the config's own recipe): the `--archs` archs stratified over the MACs range, each with
the mean standalone test top-1 of its `--seeds` seeds. Nothing is trained: archs whose seeds
are not all cached are left out and counted (`--min-archs` refuses a table over fewer). Every
estimator that needs no trained run (default: every cheap one, `--estimators` to choose) scores
the archs in one context (2 seeded batches of 64 training images, `--init-seeds`
initialisations); prints, per estimator, Kendall tau-b and tau within MACs terciles with 90%
bootstrap intervals and the top-k overlap, the ground truth's own seed-to-seed figures (with 2
seeds) as the ceiling, and one JSON line.

    python -m benchmarks.estimator_ranking --ground-truth DIR --config fashion_mnist_cell201 --archs 24 --seeds 2
        [--extends M]

`--extends M`: the archs of `nas fidelity --archs N --extends M` (the M-arch selection grown to N;
M may be a lineage like 48-ext24).
"""
from __future__ import annotations

import argparse
import time

from benchmarks import common
from estimators import ESTIMATOR_BATCH_SIZE, ESTIMATOR_BATCHES, EstimatorContext
from nas import api
from nas.core.arch import arch_id
from nas.core.registry import SUPERNET_SCORE
from nas.engine.fidelity.runner import plan, standalone_record
from nas.engine.fidelity.estimators import build_estimators, default_names, needs_batches
from nas.engine.fidelity.report import estimator_summary, format_estimators, seed_agreement
from nas.engine.fidelity.ground_truth import recipe_source


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ground-truth", required=True, metavar="DIR", help="cache of standalone trainings")
    parser.add_argument("--config", default="fashion_mnist_cell201", help="config whose space and recipe to use")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="config overrides")
    parser.add_argument("--archs", type=int, default=24)
    parser.add_argument("--extends", metavar="M", help="the --archs selection grown from M archs (M, or a "
                        "lineage like 48-ext24, as nas fidelity --extends)")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--estimators", metavar="A,B,...", help="default: every cheap estimator but supernet")
    parser.add_argument("--init-seeds", type=int, default=3)
    parser.add_argument("--min-archs", type=int, default=6, help="refuse a table over fewer cached archs")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = _arguments(argv)
    config = api.load_config(args.config, args.set)
    space = api.build_space(config)
    measured = plan(config, space, api.standalone_model, args.ground_truth, archs=args.archs, epochs=None,
                    seeds=args.seeds, recipe=None, extends=args.extends)
    records = []
    for arch in measured.archs:
        seeds = [measured.truth.cached(arch, k) for k in range(args.seeds)]
        if all(s is not None for s in seeds):
            records.append(standalone_record(arch, seeds))
    if len(records) < args.min_archs:
        raise SystemExit(f"--ground-truth: only {len(records)} of the {len(measured.archs)} archs have all "
                         f"{args.seeds} seed(s) cached in {measured.truth.folder}; fewer than --min-archs "
                         f"{args.min_archs}")
    names = ([n.strip() for n in args.estimators.split(",")] if args.estimators
             else [n for n in default_names() if n != SUPERNET_SCORE])
    estimators = build_estimators(names)
    context = EstimatorContext(space, init_seeds=args.init_seeds, seed=0)
    if needs_batches(estimators):
        context.batches = recipe_source(measured.recipe.data).sample_batches("train", ESTIMATOR_BATCHES,
                                                                             ESTIMATOR_BATCH_SIZE, 0)
    archs = [r["arch"] for r in records]
    started = time.perf_counter()
    for name, estimator in estimators.items():
        for record, value in zip(records, estimator.scores(archs, context)):
            record.setdefault("estimators", {})[name] = value
    summary = {**estimator_summary(records, list(estimators), seed=0), "top_k": max(1, len(records) // 4),
               **seed_agreement(records, args.seeds)}
    summary["verdict"] = "no supernet in this comparison (run-free estimators only)"
    print(f"ground truth {measured.truth.folder}: {len(records)} of {len(measured.archs)} archs with "
          f"{args.seeds} seed(s) cached; standalone test top-1 "
          f"{100 * min(r['standalone_test_top1'] for r in records):.2f}-"
          f"{100 * max(r['standalone_test_top1'] for r in records):.2f}%")
    print(format_estimators(summary))
    return common.emit("estimator_ranking", {
        "config": args.config, "overrides": args.set, "ground_truth": str(measured.truth.folder),
        "archs": len(records), "archs_planned": len(measured.archs), "seeds": args.seeds,
        "arch_ids": [arch_id(a) for a in archs], "init_seeds": args.init_seeds,
        "scoring_s": round(time.perf_counter() - started, 1), **summary}, argv)


if __name__ == "__main__":
    common.run(main)
