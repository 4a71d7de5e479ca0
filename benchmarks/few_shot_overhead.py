"""Few-shot split overhead: seconds of one split vs seconds of one training step.

Builds the trainer of a few-shot config on its real data, times `--steps` training steps
(median, after 3 untimed ones: common.WARMUP), then times one split of the single supernet as
the first split epoch would run it (probe batches, distance matrices of every splittable key,
the partition and the copy into two sub-supernets, the rebuilt optimiser). Prints one JSON line
with both times, their ratio and the split taken. A run with S sub-supernets at a
split epoch spends about S times the one-supernet figure at that epoch.

    python -m benchmarks.few_shot_overhead [--config fashion_mnist_cell201_gm] [--steps 10]
"""
from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks import common
from nas import api
from nas.core.config import load_config
from nas.engine.run_dir import RunDir
from nas.engine.training.trainer import Trainer


def measure(config_name: str, steps: int) -> dict:
    config = load_config(config_name)
    strategy = api.build_strategy(config)
    with tempfile.TemporaryDirectory() as root:
        trainer = Trainer(config, strategy, api.load_splits(config), RunDir(Path(root)), progress=False)
        batches = iter([(images, labels) for _, images, labels in
                        itertools.islice(trainer._batches(), common.WARMUP + steps)])
        times = common.timed_steps(lambda: trainer.train_one_step(*next(batches)), steps)
        first_split = config.strategy.options.split.split_steps(trainer.schedule_steps, trainer.steps_per_epoch)[0]
        started = time.perf_counter()
        change = strategy.after_step(first_split, trainer.step_io())
        trainer.restructure(change)
        split_seconds = time.perf_counter() - started
    step = statistics.median(times)
    return {"config": config_name, "step_seconds": round(step, 4), "split_seconds": round(split_seconds, 3),
            "split_over_step": round(split_seconds / step, 1), "split": change.reason,
            "probe_batches": config.strategy.options.split.batches, "batch_size": config.train.batch_size,
            "steps": steps, "warmup": common.WARMUP}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="fashion_mnist_cell201_gm")
    parser.add_argument("--steps", type=int, default=10, help="timed training steps")
    args = parser.parse_args(argv)
    figures = measure(args.config, args.steps)
    print(f"{args.config}: one training step {figures['step_seconds']:.2f} s (median), one split "
          f"{figures['split_seconds']:.1f} s = {figures['split_over_step']} steps; split {figures['split']}")
    return common.emit("few_shot_overhead", figures, argv)


if __name__ == "__main__":
    common.run(main)
