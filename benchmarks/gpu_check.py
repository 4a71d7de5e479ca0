"""GPU check: the default run on one CUDA device, end to end, with the figures BENCHMARKS.md asks for.

1. Train the default config (fashion_mnist_mbv3) for one epoch on the device (its epoch-end
   evaluation included), then the test top-1 of the min and max subnets.
2. Build the run's latency table on the device (batch 1) and report its error over 30 random
   exported subnets, each measured with CUDA events: MAPE (target <= 5%) and median APE.
3. Elastic step overhead on the device: supernet / static export step time, max, mid and min.
4. Training throughput in fp32 and in bf16 autocast: images/s of full training steps of the
   default config (sandwich rule, batches already on the device), and their ratio.

Under 8 minutes on one GPU. Prints a line per figure and, last, one JSON line. Timed steps
follow 3 untimed ones (common.WARMUP).

    python -m benchmarks.gpu_check [--device cuda:0] [--out DIR] [--archs 30] [--steps 40]
"""
from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

import torch

from benchmarks import common

CONFIG = "fashion_mnist_mbv3"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda:0", help="CUDA device (default cuda:0)")
    parser.add_argument("--out", help="where the run is written (default: a temporary directory)")
    parser.add_argument("--archs", type=int, default=30, help="exported subnets measured against the table")
    parser.add_argument("--steps", type=int, default=40, help="timed steps per overhead/throughput figure")
    parser.add_argument("--batch", type=int, default=128, help="batch of the overhead and throughput steps")
    args = parser.parse_args(argv)
    if not args.device.startswith("cuda"):
        parser.error(f"--device: {args.device}: this check is for CUDA devices (cuda or cuda:N)")
    if args.archs < 1 or args.steps < 5 or args.batch < 2:
        parser.error("--archs >= 1, --steps >= 5 and --batch >= 2")
    return args


def train_one_epoch(out: Path, device: str) -> tuple[object, dict]:
    from nas import api
    from nas.core.config import load_config

    start = time.perf_counter()
    run_dir = api.train(load_config(CONFIG, ["train.epochs=1"]), name="gpu-check", runs_dir=out, progress=False,
                        device=device)
    seconds = time.perf_counter() - start
    epoch = json.loads(run_dir.metrics.read_text().splitlines()[-1])
    run = api.load_run(run_dir.root, device=device)
    test = {arch: api.evaluate(run, arch, "test").top1 for arch in ("min", "max")}
    figures = {"train_s": seconds, "steps": run.step, "epoch_end": epoch, "test_top1": test}
    print(f"train 1 epoch on {device}: {seconds:.1f} s for {run.step} steps (evaluation included); "
          f"test top-1 min {test['min']:.4f}, max {test['max']:.4f}", flush=True)
    return run, figures


def throughput(device: str, steps: int, batch: int) -> dict:
    """Images/s of full training steps (the strategy's passes, the optimiser) in fp32 and bf16."""
    from nas import api
    from nas.core.config import load_config
    from nas.engine.distributed import DistEnv
    from nas.engine.run_dir import RunDir
    from nas.engine.training.trainer import Trainer

    rates = {}
    for precision in ("fp32", "bf16"):
        config = load_config(CONFIG, [f"train.precision={precision}", f"train.batch_size={batch}"])
        source = api.load_source(config)
        trainer = Trainer(config, api.build_strategy(config), source,
                          RunDir(Path(tempfile.mkdtemp())), DistEnv(device=device), progress=False)
        batches = iter([(x.to(device).contiguous(memory_format=trainer.memory_format), y.to(device))
                        for x, y in itertools.islice(source.train_batches(batch, 0, 0), common.WARMUP + steps)])
        times = common.timed_steps(lambda: trainer.train_one_step(*next(batches)), steps,
                                   sync=lambda: torch.cuda.synchronize(device))
        rates[precision] = batch / statistics.median(times)
        print(f"throughput {precision}: {rates[precision]:,.0f} images/s (batch {batch}, median of "
              f"{len(times)} steps)", flush=True)
    rates["bf16_over_fp32"] = rates["bf16"] / rates["fp32"]
    return rates


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_check: needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    from benchmarks.elastic_overhead import overhead
    from benchmarks.search_quality import table_error
    from nas.engine.devices import resolve_device

    device = str(resolve_device(args.device))
    out = Path(args.out) if args.out is not None else Path(tempfile.mkdtemp(prefix="gpu-check-"))
    started = time.perf_counter()
    report = {"gpu": torch.cuda.get_device_name(torch.device(device)), "device": device, "cuda": torch.version.cuda}
    print(f"{report['gpu']} ({device}), torch {torch.__version__}, CUDA {report['cuda']}", flush=True)
    run, report["train"] = train_one_epoch(out, device)
    table_started = time.perf_counter()
    report["latency_table"] = table_error(run, args.archs, None, device, 1)
    report["latency_table"]["seconds"] = time.perf_counter() - table_started
    t = report["latency_table"]
    print(f"latency table on {device}, batch 1: {t['entries']} entries in {t['seconds']:.0f} s; over "
          f"{args.archs} exported subnets MAPE {t['mape_pct']:.1f}% (target <= 5%), median APE "
          f"{t['median_ape_pct']:.1f}%", flush=True)
    report["elastic_overhead"] = overhead("mobilenetv3", args.steps, args.batch, device)
    report["throughput"] = throughput(device, args.steps, args.batch)
    report["seconds"] = time.perf_counter() - started
    print(f"bf16 / fp32 images/s: {report['throughput']['bf16_over_fp32']:.2f}; whole check "
          f"{report['seconds']:.0f} s", flush=True)
    common.emit("gpu_check", report, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
