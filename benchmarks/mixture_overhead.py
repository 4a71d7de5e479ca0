"""Mixture-of-supernets overhead: training-step time and parameters, mixture vs plain supernet.

Builds the strategy of a mixture config and of the same config without its mixture
(`strategy.mixture=null`), then times whole training steps (every subnet of the sampler's step,
forward and backward, clipping, optimiser and LR step: `Trainer.train_one_step`) alternating
between the two on the same batches (`--steps` timed ones after 3 untimed ones:
common.WARMUP), so both see the same machine load. Prints the median step time of each, their ratio (mixture / plain), and the parameter counts: the plain
supernet, and the mixture's routers and expert tensors against the plain tensors they replace.

    python -m benchmarks.mixture_overhead --config fashion_mnist_vit_mos [--steps 20] [--threads 1]
        [--set strategy.mixture.routing=neuron ...]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from benchmarks import common
from nas import api
from nas.core.config import load_config
from nas.engine.counting import parameter_count
from nas.engine.data.datasets import load_dataset
from nas.engine.run_dir import RunDir
from nas.engine.training.trainer import Trainer
from supernets.mixture import mixture_parameter_count


def measure(config_name: str, overrides: list[str], steps: int) -> dict:
    """Median step seconds of plain and mixture trainers and the parameter counts."""
    mixed_config = load_config(config_name, overrides)
    if mixed_config.strategy.options.mixture is None:
        raise SystemExit(f"{config_name}: has no strategy.mixture to compare")
    plain_config = load_config(config_name, [*overrides, "strategy.mixture=null"])
    batch = mixed_config.train.batch_size
    rounds = common.WARMUP + steps
    splits = load_dataset("fashion_mnist", val_size=256, train_size=batch * rounds)
    batches = [(splits.train_images[step * batch:(step + 1) * batch].float() / 255,
                splits.train_labels[step * batch:(step + 1) * batch]) for step in range(rounds)]
    trainers = {}
    with tempfile.TemporaryDirectory() as root:
        for name, config in (("plain", plain_config), ("mixture", mixed_config)):
            trainers[name] = Trainer(config, api.build_strategy(config), splits, RunDir(Path(root) / name),
                                     progress=False)

        def training_step(trainer):     # each trainer walks the same batches
            ready = iter(batches)
            return lambda: trainer.train_one_step(*next(ready))

        times = common.alternating_times({name: training_step(t) for name, t in trainers.items()}, steps)
    median = {name: statistics.median(t) for name, t in times.items()}
    counts = mixture_parameter_count(trainers["mixture"].strategy.model)
    plain = parameter_count(trainers["plain"].strategy.model)
    options = mixed_config.strategy.options.mixture
    replaced = counts["experts"] // options.experts
    return {"config": config_name, "overrides": overrides, "mixture": vars(options), "steps": steps,
            "warmup": common.WARMUP, "batch": batch,
            "step_s": {k: round(v, 4) for k, v in median.items()},
            "ratio": round(median["mixture"] / median["plain"], 3),
            "params": {"plain": plain, "replaced_by_experts": replaced, "experts": counts["experts"],
                       "routers": counts["routers"], "mixture_total": sum(counts.values())}}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="fashion_mnist_vit_mos")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per model (after 3 untimed ones)")
    common.threads_argument(parser, default=1)
    parser.add_argument("--set", dest="overrides", nargs="*", default=[], metavar="K=V")
    args = parser.parse_args(argv)
    common.use_threads(args.threads)
    result = measure(args.config, args.overrides, args.steps)
    p = result["params"]
    print(f"{args.config} {' '.join(args.overrides)}: step {result['step_s']['plain'] * 1e3:.0f} ms plain, "
          f"{result['step_s']['mixture'] * 1e3:.0f} ms mixture: ratio {result['ratio']:.2f}; parameters "
          f"{p['plain']:,} plain, {p['mixture_total']:,} mixture ({p['routers']:,} in routers, "
          f"{p['experts']:,} in experts replacing {p['replaced_by_experts']:,})")
    return common.emit("mixture_overhead", result, argv)


if __name__ == "__main__":
    common.run(main)
