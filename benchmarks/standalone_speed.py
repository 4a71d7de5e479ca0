"""Standalone training speed: eager vs channels_last vs torch.compile vs the trainer's choice.

Per space (the shipped configs' recipes) and per arch (min, a mid arch, max), the static export
of a freshly initialised supernet is trained with the standalone trainer's step
(`nas.engine.fidelity.standalone.train_step`: the recipe's optimiser, label smoothing and
gradient clipping; random images of the arch's resolution, batch of the recipe). Every variant
gets its own copy of the same model; the first step of each (compilation included) is timed
alone, then `--warmup` untimed steps (default 3, common.WARMUP) and `--steps` timed steps that
alternate between the variants so all see the same machine load. Printed per variant: median ms per step, the
compilation's seconds (first step minus a median step), the whole recipe's extrapolated wall
time (steps x median + compilation) and its ratio to eager.

For cell201 it also extrapolates the committed 24 x 2 ground truth
(benchmarks/ground_truth/cell201-1c4fd9d48cb1/9c00f91f87-e4/): each record's measured seconds
scaled by the measured ratio of the variant to the records' own variant (channels_last, eager)
at the nearest measured arch by MACs, plus that arch's compilation time per training.

Compilation times are cold only with inductor's on-disk caches off
(TORCHINDUCTOR_FORCE_DISABLE_CACHES=1); even then kernels compiled earlier in the process are
reused, so the later archs' compilation is an underestimate (which favours compiling).

    TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 OMP_NUM_THREADS=1 python -m benchmarks.standalone_speed [--spaces cell201 mobilenetv3] [--steps 10]
        [--variants eager_contiguous eager_channels_last compiled_contiguous compiled_channels_last auto]
        [--profile mobilenetv3:max]
"""
from __future__ import annotations

import argparse
import functools
import json
import random
import statistics
import time
from pathlib import Path

import torch

from benchmarks import common
from nas.api import build_space, standalone_model
from nas.core.arch import arch_id
from nas.core.config import load_config
from nas.engine.data.batches import steps_per_epoch
from nas.engine.fidelity.arch_selection import select_archs
from nas.engine.fidelity.recipe import load_recipe
from nas.engine.fidelity.standalone import train_step
from nas.engine.fidelity.variant import Variant, choose_variant, forward_of
from nas.engine.training.trainer import build_optimizer

SPACE_CONFIGS = {"cell201": "fashion_mnist_cell201", "mobilenetv3": "fashion_mnist_mbv3"}
FASHION_MNIST_TRAIN = 55_000    # 60,000 minus the configs' val_size of 5,000
VARIANTS = {"eager_contiguous": Variant(False, False), "eager_channels_last": Variant(True, False),
            "compiled_contiguous": Variant(False, True), "compiled_channels_last": Variant(True, True)}
GROUND_TRUTH = Path(__file__).resolve().parent / "ground_truth" / "cell201-1c4fd9d48cb1" / "9c00f91f87-e4"
RECORDS_VARIANT = "eager_channels_last"   # how the committed records were trained


def archs(space) -> dict[str, dict]:
    return {"min": space.min(), "mid": space.sample(random.Random(1)), "max": space.max()}


def measure(config, recipe, arch, resolution: int, variants: list[str], steps: int,
            warmup: int = common.WARMUP) -> dict:
    """Per variant: {"ms": median ms per step, "compile_s", "variant"} on copies of one model."""
    total = recipe.train.epochs * steps_per_epoch(FASHION_MNIST_TRAIN, recipe.train.batch_size)
    batch = recipe.train.batch_size
    gen = torch.Generator().manual_seed(0)
    images = torch.randn(batch, 1, resolution, resolution, generator=gen)
    labels = torch.randint(0, 10, (batch,), generator=gen)
    runs = {}
    for name in variants:
        model = standalone_model(config, arch, 0)
        variant = (choose_variant(model, recipe.train, total, torch.get_num_threads()) if name == "auto"
                   else VARIANTS[name])
        model = model.to(memory_format=variant.memory_format).train()
        forward, optimizer = forward_of(model, variant), build_optimizer(model, recipe.train)
        x = images.contiguous(memory_format=variant.memory_format)
        step = functools.partial(train_step, forward, model, optimizer, recipe, x, labels)
        start = time.perf_counter()
        step()
        first = time.perf_counter() - start
        runs[name] = (variant, step, first)
    times = common.alternating_times({name: step for name, (_, step, _) in runs.items()}, steps, warmup)
    out = {}
    for name, (variant, _, first) in runs.items():
        ms = 1000 * statistics.median(times[name])
        out[name] = {"variant": variant.to_dict(), "ms": round(ms, 1),
                     "compile_s": round(max(0.0, first - ms / 1000), 1) if variant.compiled else 0.0,
                     "total_steps": total}
    return out


def profile_step(config, recipe, arch, resolution: int, steps: int = 3, rows: int = 15) -> str:
    """torch.profiler table (self CPU time) of `steps` eager channels_last training steps."""
    from torch.profiler import ProfilerActivity, profile
    model = standalone_model(config, arch, 0).to(memory_format=torch.channels_last).train()
    optimizer = build_optimizer(model, recipe.train)
    x = torch.randn(recipe.train.batch_size, 1, resolution, resolution).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (recipe.train.batch_size,))
    train_step(model, model, optimizer, recipe, x, y)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            train_step(model, model, optimizer, recipe, x, y)
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)


def ground_truth_records(space) -> list[dict]:
    """The committed records of the cell201 24 x 2 ground truth (`--archs 24 --seeds 2`, selection seed 0)."""
    return [json.loads((GROUND_TRUTH / f"{arch_id(arch)}-s{seed}.json").read_text())
            for arch in select_archs(space, 24, 0) for seed in (0, 1)]


def ground_truth_cost(records: list[dict], by_size: dict[str, dict], macs: dict[str, int],
                      variants: list[str]) -> dict[str, float]:
    """Hours (one thread) of `records`' trainings under each variant: each record's seconds times
    the variant's measured ratio at the nearest measured arch by MACs, plus its compilation."""
    hours = dict.fromkeys(variants, 0.0)
    for record in records:
        nearest = min(macs, key=lambda size: abs(macs[size] - record["macs"]))
        measured = by_size[nearest]
        for name in variants:
            ratio = measured[name]["ms"] / measured[RECORDS_VARIANT]["ms"]
            hours[name] += (record["seconds"] * ratio + measured[name]["compile_s"]) / 3600
    return {name: round(h, 2) for name, h in hours.items()}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spaces", nargs="+", default=list(SPACE_CONFIGS), choices=list(SPACE_CONFIGS))
    parser.add_argument("--sizes", nargs="+", default=["min", "mid", "max"], choices=["min", "mid", "max"])
    parser.add_argument("--variants", nargs="+", default=[*VARIANTS, "auto"], choices=[*VARIANTS, "auto"])
    parser.add_argument("--steps", type=int, default=10, help="timed steps per variant")
    parser.add_argument("--warmup", type=int, default=common.WARMUP, help="untimed steps after the first")
    parser.add_argument("--profile", nargs="*", default=[], metavar="SPACE:SIZE",
                        help="also print the top ops of eager channels_last steps of these (e.g. mobilenetv3:max)")
    parser.add_argument("--json", type=Path, help="also write the figures here (indented)")
    args = parser.parse_args(argv)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); {args.steps} timed steps per variant")
    figures: dict = {}
    for space_name in args.spaces:
        config = load_config(SPACE_CONFIGS[space_name])
        recipe = load_recipe(config)
        space = build_space(config)
        by_size, macs = {}, {}
        for size, arch in archs(space).items():
            if size not in args.sizes:
                continue
            macs[size] = space.macs(arch)
            by_size[size] = result = measure(config, recipe, arch, space.input_size(arch), args.variants,
                                             args.steps, args.warmup)
            eager = result[args.variants[0]]
            print(f"\n{space_name} {size} ({macs[size] / 1e6:.2f} MMACs, {eager['total_steps']} steps in the recipe)")
            for name, r in result.items():
                wall = r["total_steps"] * r["ms"] / 1000 + r["compile_s"]
                r["training_s"] = round(wall, 1)
                base = eager["total_steps"] * eager["ms"] / 1000
                print(f"  {name:24s} {r['ms']:8.1f} ms/step  x{eager['ms'] / r['ms']:.2f}  compile {r['compile_s']:6.1f} s"
                      f"  training {wall / 60:6.1f} min  x{base / wall:.2f}  ({r['variant']})")
        figures[space_name] = {"macs": macs, "sizes": by_size}
        if space_name == "cell201" and RECORDS_VARIANT in args.variants and by_size:
            records = ground_truth_records(space)
            cost = ground_truth_cost(records, by_size, macs, args.variants)
            figures[space_name]["ground_truth_hours"] = cost
            print(f"  the committed 24 x 2 ground truth ({len(records)} trainings), one-thread hours "
                  f"(recorded: {sum(r['seconds'] for r in records) / 3600:.2f}):")
            for name, h in cost.items():
                print(f"    {name:24s} {h:6.2f} h  x{cost[RECORDS_VARIANT] / h:.2f} vs the records' variant")
    for spec in args.profile:
        space_name, size = spec.split(":")
        config = load_config(SPACE_CONFIGS[space_name])
        space = build_space(config)
        arch = archs(space)[size]
        print(f"\nprofile: {space_name} {size}, eager channels_last, self CPU time\n"
              + profile_step(config, load_recipe(config), arch, space.input_size(arch)))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return common.emit("standalone_speed", {"steps": args.steps, "warmup": args.warmup, "spaces": figures}, argv)


if __name__ == "__main__":
    common.run(main)
