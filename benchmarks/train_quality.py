"""Shared weights vs standalone training on Fashion-MNIST.

1. Trains the config's supernet (default `fashion_mnist_mbv3`) and reports, on the TEST split
   after BN recalibration, top-1 of its min, mid (the strategy's monitored mid arch) and max
   subnets, with epochs, wall time and images/s.
2. Trains the same three architectures alone from scratch with `nas.engine.fidelity.standalone`
   (each exported from a freshly initialised supernet, seeded by the arch, exactly as the
   ground truth of `nas fidelity` does) with the run's own recipe: the config's optimiser,
   per-iteration LR schedule, augmentation, batch size, epochs and label smoothing (that of
   the supernet's label-trained max subnet), then BN-recalibrates them like the subnets and
   reports their test top-1 (seed 0 of the recipe).

    python -m benchmarks.train_quality [--config fashion_mnist_mbv3] [--set k=v ...] [--runs-dir /tmp/bench]
        [--reuse-run] [--roles min mid max] [--skip-standalone] [--threads 2]

`--reuse-run` evaluates an already trained `<runs-dir>/<name>` (its own config) instead of
training it again; `--roles` picks which subnets get the standalone comparison.
"""
from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import torch

from benchmarks import common
from nas import api
from nas.core.config import load_config
from nas.engine.fidelity.ground_truth import init_seed
from nas.engine.fidelity.recipe import load_recipe
from nas.engine.fidelity.standalone import train_standalone


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="fashion_mnist_mbv3")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE")
    parser.add_argument("--runs-dir", default="/tmp/nas-bench")
    parser.add_argument("--name", default="train_quality")
    parser.add_argument("--skip-standalone", action="store_true")
    common.threads_argument(parser, default=2)
    parser.add_argument("--reuse-run", action="store_true", help="evaluate <runs-dir>/<name> without training")
    parser.add_argument("--roles", nargs="+", default=["min", "mid", "max"], choices=["min", "mid", "max"])
    args = parser.parse_args(argv)
    common.use_threads(args.threads)
    if args.reuse_run:
        run = api.load_run(args.name, args.runs_dir)
        config, wall = run.config, float("nan")
    else:
        config = load_config(args.config, args.set)
        shutil.rmtree(Path(args.runs_dir) / args.name, ignore_errors=True)
        started = time.perf_counter()
        api.train(config, name=args.name, runs_dir=args.runs_dir)
        wall = time.perf_counter() - started
        run = api.load_run(args.name, args.runs_dir)
    history = [json.loads(line) for line in run.dir.metrics.read_text().splitlines()]
    state = torch.load(run.checkpoint, weights_only=True)
    images = state["step"] * config.train.batch_size
    result = {"config": args.config, "overrides": args.set, "epochs": config.train.epochs, "steps": state["step"],
              "wall_s": wall, "train_s": state["elapsed"], "images_per_s": images / state["elapsed"],
              "history": history, "archs": {}}
    recipe = load_recipe(config)
    for role, arch in run.strategy.monitored_archs().items():
        if role not in args.roles:
            continue
        shared = api.evaluate(run, arch, "test")
        entry = {"arch_id": shared.arch_id, "macs": shared.macs, "params": shared.params,
                 "shared_test_top1": shared.top1}
        if not args.skip_standalone:
            model = api.standalone_model(config, arch, init_seed(recipe.train.seed, arch))
            alone = train_standalone(model, recipe, run.splits, recipe.train.seed,
                                     resolution=run.space.input_size(arch))
            entry.update(standalone_test_top1=alone.test_top1, standalone_s=alone.seconds)
        result["archs"][role] = entry
        print(f"{role:3s} {shared.macs / 1e6:5.2f} MMACs {shared.params / 1e3:6.1f}K params  "
              f"shared {shared.top1:.4f}  standalone {entry.get('standalone_test_top1', float('nan')):.4f}",
              flush=True)
    print(f"supernet: {state['step']} steps, train {state['elapsed'] / 60:.1f} min, wall {wall / 60:.1f} min, "
          f"{result['images_per_s']:.0f} img/s (each image passes through every subnet of its step)")
    return common.emit("train_quality", result, argv)


if __name__ == "__main__":
    common.run(main)
