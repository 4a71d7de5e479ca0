"""Estimator cost: seconds per arch of every registered estimator but `supernet`.

For each config (default: the shipped fashion_mnist_cell201 and fashion_mnist_mbv3 spaces),
draws `--archs` archs stratified over the MACs range (the archs `nas fidelity` would pick),
builds one estimator context with `--batches` fixed batches of `--batch-size` real training
images and `--init-seeds` initialisations, and times each estimator on one arch at a time
(the first call, which also builds the seeded supernets, is timed apart as `setup_s`). Prints
a table of median wall and CPU seconds per arch (CPU time is what a busy machine does not
inflate) and one JSON line. One thread, as the `cheap` flag assumes.

    OMP_NUM_THREADS=1 python -m benchmarks.estimator_cost [--config fashion_mnist_cell201 ...]
        [--archs 8] [--init-seeds 3] [--batch-size 64] [--batches 2]
"""
from __future__ import annotations

import argparse
import statistics
import time

from benchmarks import common
from estimators import EstimatorContext, build_estimator
from nas import api
from nas.core.registry import ESTIMATORS, SUPERNET_SCORE
from nas.engine.fidelity.arch_selection import select_archs
from nas.engine.data.batches import normalize


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", nargs="+", default=["fashion_mnist_cell201", "fashion_mnist_mbv3"])
    parser.add_argument("--archs", type=int, default=8)
    parser.add_argument("--init-seeds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--batches", type=int, default=2, help="fixed batches in the context (zico reads all)")
    parser.add_argument("--estimators", nargs="+", help="names to time (default: all but supernet)")
    return parser.parse_args(argv)


def _context(config_name: str, args: argparse.Namespace) -> tuple[EstimatorContext, list]:
    config = api.load_config(config_name)
    space = api.build_space(config)
    splits = api.load_splits(config)
    count = args.batches * args.batch_size
    images = normalize(splits.train_images[:count], splits.mean, splits.std)
    labels = splits.train_labels[:count]
    batches = [(images[i:i + args.batch_size], labels[i:i + args.batch_size]) for i in range(0, count, args.batch_size)]
    context = EstimatorContext(space=space, batches=batches, init_seeds=args.init_seeds, seed=0)
    return context, select_archs(space, args.archs, seed=0)


def _time(name: str, context: EstimatorContext, archs: list) -> dict:
    estimator = build_estimator(name)
    started = time.perf_counter()
    estimator.scores(archs[:1], context)
    setup = time.perf_counter() - started
    wall, cpu = [], []
    for arch in archs:
        started, started_cpu = time.perf_counter(), time.process_time()
        estimator.scores([arch], context)
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    return {"median_s": statistics.median(wall), "max_s": max(wall), "median_cpu_s": statistics.median(cpu),
            "setup_s": setup}


def main(argv: list[str] | None = None) -> dict:
    args = _arguments(argv)
    common.use_threads(1)
    names = args.estimators or [n for n in ESTIMATORS.names() if n not in (SUPERNET_SCORE, "calibrated", "fused")]
    report = {"archs": args.archs, "init_seeds": args.init_seeds, "batch_size": args.batch_size,
              "batches": args.batches, "configs": {}}
    for config_name in args.config:
        context, archs = _context(config_name, args)
        rows = report["configs"][config_name] = {}
        print(f"\n{config_name}: {len(archs)} archs, {args.init_seeds} init seeds, batch {args.batch_size}")
        print(f"{'estimator':<12}{'median s/arch':>15}{'median cpu s':>14}{'max s':>10}{'first call s':>14}  cheap")
        for name in names:
            row = rows[name] = {**_time(name, context, archs), "cheap": ESTIMATORS.get(name).obj.cheap}
            print(f"{name:<12}{row['median_s']:>15.3f}{row['median_cpu_s']:>14.3f}{row['max_s']:>10.3f}"
                  f"{row['setup_s']:>14.3f}  {row['cheap']}", flush=True)
    return common.emit("estimator_cost", report, argv)


if __name__ == "__main__":
    common.run(main)
