"""Search quality and cost on a trained run.

1. Searchers side by side: random, evolution and optuna-tpe, each with the same number of
   evaluations, at the budget halfway between the min and max subnets' MACs, over several
   seeds; reports the best feasible VALIDATION top-1 of each (median over seeds).
2. Evaluation rate: candidates per minute, cold (BN recalibration + validation pass on the
   supernet) and cached (the evaluator's cache), and the ratio of the cold supernet cost to
   the same work (recalibration + validation forward passes) on the exported static subnets.
3. Latency lookup table (CPU, batch 1): mean absolute percentage error of its predictions
   against measurements of random subnets.

    python -m benchmarks.search_quality RUN [--runs-dir runs] [--seeds 5] [--trials 60] [--table-archs 30]
        [--threads 2] [--skip searchers rate latency]
        [--searchers random evolution optuna-tpe]
"""
from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

import torch

from benchmarks import common
from nas import api
from nas.core.preprocessing import resize
from nas.core.registry import SUPERNET_SCORE
from nas.core.rng import python_rng
from nas.engine.bn import recalibrate_bn
from nas.engine.evaluator import accuracy
from nas.engine.latency.measure import measure
from nas.engine.latency.table import LatencyTable, table_filename

SEARCHERS = ("random", "evolution", "optuna-tpe")


def compare_searchers(run, seeds: int, trials: int, out: Path, searchers=SEARCHERS) -> dict:
    results = {name: [] for name in searchers}
    for seed in range(seeds):
        for name in searchers:
            found = api.search(run, name, max_macs="50%", trials=trials, seed=seed,
                               out=out / f"{name}-s{seed}", progress=False, score=SUPERNET_SCORE)
            results[name].append(found.val_top1)
            print(f"seed {seed} {name:11s} best val top-1 {found.val_top1:.4f} ({found.arch_id}, "
                  f"{found.macs / 1e6:.2f} MMACs)", flush=True)
    return {name: {"per_seed": values, "median": statistics.median(values)} for name, values in results.items()}


def evaluation_rate(run, count: int = 10) -> dict:
    rng = python_rng(123, "bench-eval-rate")
    archs = [run.space.sample(rng) for _ in range(count)]
    evaluator = run.evaluator
    start = time.perf_counter()
    for arch in archs:
        evaluator.evaluate(arch, "val")
    cold = time.perf_counter() - start
    start = time.perf_counter()
    for arch in archs:
        evaluator.evaluate(arch, "val")
    cached = time.perf_counter() - start
    fmt = torch.channels_last if run.config.train.channels_last else torch.contiguous_format
    calibration = evaluator.calibration_inputs()
    start = time.perf_counter()
    for arch in archs:
        static = run.export_model(arch).to(memory_format=fmt)
        size = run.space.input_size(arch)
        prepare = lambda x: resize(x, size).contiguous(memory_format=fmt)  # noqa: E731
        recalibrate_bn(static, [prepare(x) for x in calibration])
        accuracy(static.eval(), evaluator.batches("val"), prepare=prepare)
    static_seconds = time.perf_counter() - start
    return {"archs": count, "val_images": len(run.splits.val_labels),
            "cold_per_min": 60 * count / cold, "cached_per_min": 60 * count / max(cached, 1e-9),
            "static_per_min": 60 * count / static_seconds, "ratio_cold_to_static": cold / static_seconds}


def percentage_errors(predicted: list[float], measured: list[float]) -> dict:
    """Mean and median absolute percentage error of predictions against measurements."""
    if not measured or len(predicted) != len(measured) or min(measured) <= 0:
        raise ValueError("needs as many predictions as measurements, all measurements > 0")
    errors = [abs(p - m) / m for p, m in zip(predicted, measured)]
    return {"mape_pct": 100 * statistics.mean(errors), "median_ape_pct": 100 * statistics.median(errors)}


def table_error(run, count: int, threads: int | None, device: str = "cpu", batch: int = 1) -> dict:
    """Build (if missing) the run's latency table on `device`, then compare its predictions with
    measurements of `count` random exported subnets."""
    path = run.dir.root / "latency" / table_filename(device, batch)
    if not path.is_file():
        api.latency_table(run, device, batch, threads=threads, progress=False)
    table = LatencyTable.load(path)
    rng = random.Random(7)
    predicted, measured = [], []
    for _ in range(count):
        arch = run.space.sample(rng)
        size = run.space.input_size(arch)
        measured.append(measure(run.export_model(arch), device, batch, (run.space.in_chans, size, size),
                                threads=threads).median_ms)
        predicted.append(table.predict(run.space, arch))
    return {"archs": count, **percentage_errors(predicted, measured), "device": device, "batch": batch,
            "threads": threads, "entries": len(table.entries), "constant_ms": table.constant_ms}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run")
    parser.add_argument("--runs-dir", default="runs")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--trials", type=int, default=60)
    parser.add_argument("--table-archs", type=int, default=30)
    parser.add_argument("--table-threads", type=int, default=1)
    parser.add_argument("--skip", nargs="*", default=[], choices=["searchers", "rate", "latency"])
    common.threads_argument(parser, default=2)
    parser.add_argument("--searchers", nargs="+", default=list(SEARCHERS), choices=SEARCHERS)
    args = parser.parse_args(argv)
    common.use_threads(args.threads)
    run = api.load_run(args.run, args.runs_dir)
    out = run.dir.root / "search" / "bench"
    report = {"run": str(run.dir.root), "trials": args.trials}
    if "rate" not in args.skip:
        rate = report["evaluation_rate"] = evaluation_rate(run)
        print(f"evaluation rate over {rate['archs']} archs, candidates/min: cold {rate['cold_per_min']:.1f}, cached "
              f"{rate['cached_per_min']:.0f}, static exports {rate['static_per_min']:.1f}; cold / static "
              f"{rate['ratio_cold_to_static']:.2f}", flush=True)
    if "latency" not in args.skip:
        table = report["latency_table"] = table_error(run, args.table_archs, args.table_threads)
        print(f"latency table ({table['entries']} entries): MAPE {table['mape_pct']:.1f}%, median APE "
              f"{table['median_ape_pct']:.1f}% over {table['archs']} subnets", flush=True)
    if "searchers" not in args.skip:
        report["searchers"] = compare_searchers(run, args.seeds, args.trials, out, args.searchers)
        for name, data in report["searchers"].items():
            print(f"{name:11s} median best val top-1 over {args.seeds} seeds: {data['median']:.4f}")
    return common.emit("search_quality", report, argv)


if __name__ == "__main__":
    common.run(main)
