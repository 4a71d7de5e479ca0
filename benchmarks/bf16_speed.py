"""bf16 autocast vs fp32: standalone training step time per space and arch size, on this CPU.

Per space (the shipped Fashion-MNIST configs' recipes) and per arch (min, a mid arch, max), two
copies of the static export of a freshly initialised supernet are trained with the standalone
trainer's step (`nas.engine.fidelity.standalone.train_step`: the recipe's optimiser, label
smoothing, gradient clipping; random images of the arch's resolution, the recipe's batch), one
in fp32 and one under bf16 autocast, both in the memory format and eager/compiled variant the
recipe's rule gives fp32 (`choose_variant` with `train.accelerate: eager`). Their steps alternate
in one process (`common.alternating_times`), so both see the same machine load. Printed per
arch: median ms per step of each and the speed-up of bf16 (fp32 ms / bf16 ms; below 1: slower).
Also printed: whether the CPU has bf16 instructions (`nas.engine.precision.cpu_has_bf16`).
The figures behind the bf16 rule of `nas.engine.precision`.

    OMP_NUM_THREADS=1 python -m benchmarks.bf16_speed [--spaces cell201 mobilenetv3 vit] [--steps 5]
"""
from __future__ import annotations

import argparse
import functools
import statistics
from dataclasses import replace

import torch

from benchmarks import common
from benchmarks.standalone_speed import archs
from nas.api import build_space, standalone_model
from nas.core.config import load_config
from nas.engine.fidelity.recipe import Recipe, load_recipe
from nas.engine.fidelity.standalone import train_step
from nas.engine.fidelity.variant import choose_variant, forward_of
from nas.engine.precision import cpu_has_bf16
from nas.engine.training.trainer import build_optimizer

SPACE_CONFIGS = {"cell201": "fashion_mnist_cell201", "mobilenetv3": "fashion_mnist_mbv3", "vit": "fashion_mnist_vit"}


def with_precision(recipe: Recipe, precision: str) -> Recipe:
    """`recipe` trained in `precision`, with the kernels given explicitly (no rule picks bf16)."""
    return replace(recipe, train=replace(recipe.train, precision=precision, accelerate="eager"))


def measure(config, recipe: Recipe, arch, resolution: int, steps: int, warmup: int) -> dict[str, float]:
    """Median ms per step of fp32 and of bf16 autocast on copies of one model, steps alternating."""
    gen = torch.Generator().manual_seed(0)
    images = torch.randn(recipe.train.batch_size, 1, resolution, resolution, generator=gen)
    labels = torch.randint(0, 10, (recipe.train.batch_size,), generator=gen)
    calls = {}
    for precision in ("fp32", "bf16"):
        trained = with_precision(recipe, precision)
        model = standalone_model(config, arch, 0)
        variant = choose_variant(model, trained.train, 1, torch.get_num_threads())
        model = model.to(memory_format=variant.memory_format).train()
        x = images.contiguous(memory_format=variant.memory_format)
        calls[precision] = functools.partial(train_step, forward_of(model, variant), model,
                                             build_optimizer(model, trained.train), trained, x, labels)
    times = common.alternating_times(calls, steps, warmup)
    return {precision: round(1000 * statistics.median(t), 1) for precision, t in times.items()}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spaces", nargs="+", default=list(SPACE_CONFIGS), choices=list(SPACE_CONFIGS))
    parser.add_argument("--sizes", nargs="+", default=["min", "mid", "max"], choices=["min", "mid", "max"])
    parser.add_argument("--steps", type=int, default=5, help="timed steps of each precision")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps of each first")
    common.threads_argument(parser, default=1)
    args = parser.parse_args(argv)
    threads = common.use_threads(args.threads)
    has_bf16 = cpu_has_bf16()
    print(f"torch {torch.__version__}, {threads} thread(s), CPU capability {torch.backends.cpu.get_cpu_capability()}, "
          f"bf16 instructions: {has_bf16}; {args.steps} timed steps of each precision, alternating")
    figures: dict = {}
    for space_name in args.spaces:
        config = load_config(SPACE_CONFIGS[space_name])
        recipe, space = load_recipe(config), build_space(config)
        figures[space_name] = {}
        for size, arch in archs(space).items():
            if size not in args.sizes:
                continue
            ms = measure(config, recipe, arch, space.input_size(arch), args.steps, args.warmup)
            speedup = round(ms["fp32"] / ms["bf16"], 2)
            figures[space_name][size] = {"macs": space.macs(arch), **{f"{k}_ms": v for k, v in ms.items()},
                                         "bf16_speedup": speedup}
            print(f"{space_name:12s} {size:4s} {space.macs(arch) / 1e6:8.2f} MMACs  fp32 {ms['fp32']:8.1f} ms  "
                  f"bf16 {ms['bf16']:8.1f} ms  x{speedup:.2f}", flush=True)
    return common.emit("bf16_speed", {"steps": args.steps, "warmup": args.warmup, "cpu_has_bf16": has_bf16,
                                      "spaces": figures}, argv)


if __name__ == "__main__":
    common.run(main)
