"""Few-shot split overhead: seconds of one split vs seconds of one training step.

Builds the trainer of a few-shot config on its real data, times `--steps` training steps
(median, after 2 warm-up steps), then times one split of the single supernet as the first
split epoch would run it (probe batches, distance matrices of every splittable key, the
partition and the copy into two sub-supernets, the rebuilt optimiser). Prints JSON with both
times, their ratio, the split taken, the machine and the date. A run with S sub-supernets at a
split epoch spends about S times the one-supernet figure at that epoch.

    python benchmarks/few_shot_overhead.py [--config fashion_mnist_cell201_gm] [--steps 10]
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nas import api  # noqa: E402
from nas.core.config import load_config  # noqa: E402
from nas.engine.run_dir import RunDir  # noqa: E402
from nas.engine.training.trainer import Trainer  # noqa: E402


def measure(config_name: str, steps: int) -> dict:
    config = load_config(config_name)
    strategy = api.build_strategy(config)
    with tempfile.TemporaryDirectory() as root:
        trainer = Trainer(config, strategy, api.load_splits(config), RunDir(Path(root)), progress=False)
        times = []
        batches = trainer._batches()
        for index in range(steps + 2):
            _, images, labels = next(batches)
            started = time.perf_counter()
            trainer.train_one_step(images, labels)
            if index >= 2:
                times.append(time.perf_counter() - started)
        first_split = config.strategy.options.split.split_steps(trainer.schedule_steps, trainer.steps_per_epoch)[0]
        started = time.perf_counter()
        change = strategy.after_step(first_split, trainer.step_io())
        trainer.restructure(change)
        split_seconds = time.perf_counter() - started
    step = statistics.median(times)
    return {"config": config_name, "step_seconds": round(step, 4), "split_seconds": round(split_seconds, 3),
            "split_over_step": round(split_seconds / step, 1), "split": change.reason,
            "probe_batches": config.strategy.options.split.batches, "batch_size": config.train.batch_size,
            "threads": torch.get_num_threads(), "machine": f"{platform.processor() or platform.machine()}, "
            f"{platform.system()}", "torch": torch.__version__,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="fashion_mnist_cell201_gm")
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    print(json.dumps(measure(args.config, args.steps), indent=2))


if __name__ == "__main__":
    main()
