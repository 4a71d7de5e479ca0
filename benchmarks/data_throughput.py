"""Streaming data path vs in memory: training throughput, and memory on a large ImageFolder tree.

1. Throughput (Fashion-MNIST, the default config): images/s of training steps of the supernet,
   fetching the batch included, with the in-memory path and with the streaming path
   (DataLoader, `--workers` worker processes). Steps alternate between the two paths (one
   model), `--steps` timed ones of each per epoch after 3 untimed ones (worker start,
   common.WARMUP), two epochs; medians of per-step wall times. Ratio = streaming / in memory (target >= 0.8).
   Also the rate of the data paths alone (batches only, no training).
2. Peak memory: a generated ImageFolder tree of `--images` JPEG images of `--size` px (10
   classes), and a real `nas train` run of one epoch on it (the tiny test space, batch 128,
   epoch-end evaluation included), streamed with `--workers` workers, once on a tenth of the
   tree and once on all of it, each in a fresh process; peak RSS of the main process and of the
   largest worker. Bounded = about the same for both sizes. The in-memory path on the whole
   tree is run too, for contrast.

    python -m benchmarks.data_throughput [--steps 30] [--workers 2] [--images 20000] [--size 64]
        [--root DIR] [--skip throughput memory]
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import common

ROOT = Path(__file__).resolve().parents[1]


def _alternating_steps(trainer, iterators: dict, steps: int) -> dict[str, list[float]]:
    """Wall time of (next batch + one training step) of each path, `steps` timed ones after
    common.WARMUP untimed ones, alternating between the paths step by step so both see the same
    machine load."""
    def step(batches):
        def fetch_and_train() -> None:
            images, labels = next(batches)
            trainer.train_one_step(images.contiguous(memory_format=trainer.memory_format), labels)
        return fetch_and_train

    return common.alternating_times({name: step(batches) for name, batches in iterators.items()}, steps)


def throughput(steps: int, workers: int) -> dict:
    """Training images/s with each data path (alternating blocks) and the data paths alone."""
    import dataclasses

    import torch

    from nas import api
    from nas.core.config import load_config
    from nas.engine.run_dir import RunDir
    from nas.engine.data.build import build_source
    from nas.engine.training.trainer import Trainer

    config = load_config("fashion_mnist_mbv3")
    sources = {"in_memory": build_source(config.data),
               "streaming": build_source(dataclasses.replace(config.data, in_memory=False, workers=workers))}
    trainer = Trainer(config, api.build_strategy(config), sources["in_memory"],
                      RunDir(Path(tempfile.mkdtemp())), progress=False)
    batch = config.train.batch_size
    times: dict[str, list[float]] = {name: [] for name in sources}
    for epoch in range(2):
        iterators = {name: iter(source.train_batches(batch, 0, epoch)) for name, source in sources.items()}
        for name, values in _alternating_steps(trainer, iterators, steps).items():
            times[name] += values
    rates = {name: batch / statistics.median(t) for name, t in times.items()}
    data_only = {}
    for name, source in sources.items():
        started, count = time.perf_counter(), 0
        for images, _ in source.train_batches(batch, 0, 9):
            count += len(images)
        data_only[name] = count / (time.perf_counter() - started)
    result = {"train_images_per_s": rates, "ratio": rates["streaming"] / rates["in_memory"],
              "data_only_images_per_s": data_only, "workers": workers, "batch": batch,
              "threads": torch.get_num_threads(), "timed_steps_per_path": 2 * steps}
    print(f"training images/s: in memory {rates['in_memory']:.0f}, streaming ({workers} workers) "
          f"{rates['streaming']:.0f}: ratio {result['ratio']:.3f} (target >= 0.8)", flush=True)
    print(f"data path alone, images/s: in memory {data_only['in_memory']:,.0f}, streaming "
          f"{data_only['streaming']:,.0f}", flush=True)
    return result


def write_tree(root: Path, count: int, size: int, classes: int = 10) -> None:
    """`count` random-noise-and-gradient JPEGs of size x size px in `classes` classes (train/)
    and 10 per class in val/; kept if already there."""
    import numpy as np
    from PIL import Image

    if (root / "done").is_file():
        return
    rng = np.random.default_rng(0)
    ramp = np.linspace(0, 255, size, dtype=np.float32)
    for part, per_class in (("train", count // classes), ("val", 10)):
        for c in range(classes):
            folder = root / part / f"class{c:02d}"
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                base = (ramp[None, :, None] * rng.random(3) + ramp[:, None, None] * rng.random(3)) / 2
                pixels = np.clip(base + rng.normal(0, 20, (size, size, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(pixels).save(folder / f"{i:05d}.jpg", quality=90)
    (root / "done").write_text("")


def memory_run(root: str, train_size: int, workers: int, size: int, in_memory: bool) -> dict:
    """One epoch of `nas train` on the tree in this process; peak RSS of this process and of
    the largest worker (MiB)."""
    from nas import api
    from nas.core.config import load_config
    from nas.engine.training.trainer import Trainer  # noqa: F401  (loaded before the baseline is read)
    from tests.support.tiny import TINY_SPACE

    config = load_config({
        "space": TINY_SPACE,
        "data": {"name": "imagefolder", "root": root, "image_size": size, "val_size": 1000, "train_size": train_size,
                 "in_memory": in_memory, "workers": workers, "augment": {"crop_padding": 0, "hflip": True}},
        "strategy": {"sampler": {"name": "sandwich", "num_random": 1}, "distill": {"name": "none"}},
        "train": {"epochs": 1, "batch_size": 128, "scheduler": {"warmup_steps": 10}},
        "eval": {"bn_recal_batches": 4, "bn_recal_batch_size": 128, "batch_size": 256}})
    to_mib = 1 / 1024      # ru_maxrss is in KiB on Linux
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * to_mib    # torch, timm, the engine loaded
    started = time.perf_counter()
    api.train(config, name="memory", runs_dir=tempfile.mkdtemp(), progress=False, device="cpu")
    return {"train_size": train_size, "in_memory": in_memory, "seconds": time.perf_counter() - started,
            "baseline_rss_mib": baseline,
            "main_peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * to_mib,
            "worker_peak_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * to_mib}


def memory(root: Path, images: int, size: int, workers: int) -> dict:
    write_tree(root, images, size)
    runs = []
    for train_size, in_memory in ((images // 10, False), (images - 1000, False), (images - 1000, True)):
        command = [sys.executable, "-m", "benchmarks.data_throughput", "--memory-run", str(root), str(train_size),
                   str(int(in_memory)), "--workers", str(workers), "--size", str(size)]
        out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        r = runs[-1]
        print(f"{'in memory' if in_memory else 'streaming'} run on {train_size:,} images: {r['seconds']:.0f} s, "
              f"peak RSS main {r['main_peak_rss_mib']:.0f} MiB (after imports {r['baseline_rss_mib']:.0f}), "
              f"largest worker {r['worker_peak_rss_mib']:.0f} MiB",
              flush=True)
    return {"images": images, "size": size, "workers": workers, "runs": runs}


def main(argv: list[str] | None = None) -> dict | None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="timed steps per path and epoch")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--images", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--root", help="where the generated tree is kept (default: a temporary directory)")
    parser.add_argument("--skip", nargs="*", default=[], choices=["throughput", "memory"])
    parser.add_argument("--memory-run", nargs=3, metavar=("ROOT", "TRAIN_SIZE", "IN_MEMORY"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_run:
        root, train_size, in_memory = args.memory_run
        print(json.dumps(memory_run(root, int(train_size), args.workers, args.size, bool(int(in_memory)))))
        return None
    report = {}
    if "throughput" not in args.skip:
        report["throughput"] = throughput(args.steps, args.workers)
    if "memory" not in args.skip:
        root = Path(args.root) if args.root is not None else Path(tempfile.mkdtemp(prefix="nas-tree-"))
        report["memory"] = memory(root, args.images, args.size, args.workers)
    return common.emit("data_throughput", report, argv)


if __name__ == "__main__":
    common.run(main)
