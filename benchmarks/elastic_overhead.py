"""Elastic overhead: one training step of the supernet with an arch active vs its static export.

For max, a mid arch and min of a space: median time of forward + backward + SGD step (batch 128,
2 threads, channels_last for CNNs) on the supernet with the arch active, divided by the same
step on the exported static model. Both sides use the same optimizer class and settings
(SGD, momentum 0.9, Nesterov, weight decay 5e-4). The supernet's optimizer steps its full-size
parameters: sliced weights get full-size gradients (zero outside the slice), so momentum and
weight decay also move the untouched part of a partly used tensor; tensors a subnet does not
touch at all get no gradient and are skipped. Steps alternate between the two models so both
see the same machine load. Also: analytic cost rate (MACs + params) over 10,000 distinct
freshly sampled archs, no caches.

    python -m benchmarks.elastic_overhead [--space mobilenetv3] [--steps 40] [--device cpu]
    python -m benchmarks.elastic_overhead --space vit --batch 2 --threads 1 --steps 400 --phases

On a CUDA device each step is timed between synchronisations (benchmarks/gpu_check.py uses it).
`--phases` splits each step into forward, backward and optimizer step, timed by the thread's CPU
time (CPU, one thread): at batch 2 the compute is near zero, so what the supernet adds per phase
is the fixed cost of its elastic ops, measured apart from load on the other core. `--steps`
timed steps follow 3 untimed ones (common.WARMUP).
"""
from __future__ import annotations

import argparse
import random
import statistics
import time
from typing import Callable

import torch

from benchmarks import common
from nas.api import build_space
from nas.core.arch import arch_json
from nas.core.config import load_config

SPACE_CONFIGS = {"mobilenetv3": "fashion_mnist_mbv3", "vit": "fashion_mnist_vit", "cell201": "fashion_mnist_cell201"}


PHASES = ("forward", "backward", "step")


def step_times(models, x, y, steps: int, clock=time.perf_counter
               ) -> tuple[list[list[float]], list[list[tuple[float, float, float]]]]:
    """Per model, the seconds by `clock` of each of `steps` timed training steps (after
    common.WARMUP untimed ones; the steps alternate between the models so all see the same load),
    and the (forward, backward, optimizer step) seconds of each."""
    sync = torch.cuda.synchronize if x.device.type == "cuda" else (lambda: None)
    phases: list[list[tuple[float, float, float]]] = [[] for _ in models]

    def training_step(model, record: list) -> Callable[[], None]:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=5e-4)

        def step() -> None:
            start = clock()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            sync()
            forward = clock()
            optimizer.zero_grad()
            loss.backward()
            sync()
            backward = clock()
            optimizer.step()
            sync()
            record.append((forward - start, backward - forward, clock() - backward))
        return step

    totals = common.alternating_times({i: training_step(m, phases[i]) for i, m in enumerate(models)}, steps,
                                      clock=clock, sync=sync)
    return [totals[i] for i in range(len(models))], [p[-steps:] for p in phases]


def cost_rate(space, n: int = 10_000) -> float:
    rng = random.Random(0)
    seen: dict[str, dict] = {}
    while len(seen) < min(n, space.size()):
        arch = space.sample(rng)
        seen.setdefault(arch_json(arch), arch)
    archs = list(seen.values())
    start = time.perf_counter()
    for arch in archs:
        space.costs(arch)
    return len(archs) / (time.perf_counter() - start)


def overhead(space_name: str, steps: int, batch: int, device: str = "cpu", phases: bool = False) -> dict:
    """Step-time ratio supernet / static export for max, a mid arch and min (prints a line each);
    with `phases`, also the median forward / backward / step microseconds of each, by CPU time."""
    torch.manual_seed(0)
    config = load_config(SPACE_CONFIGS[space_name])
    space = build_space(config)
    fmt = torch.channels_last if config.train.channels_last else torch.contiguous_format
    supernet = space.build_supernet().to(device, memory_format=fmt).train()
    rng = random.Random(1)
    archs = {"max": space.max(), "mid": space.sample(rng), "min": space.min()}
    clock = time.thread_time if phases else time.perf_counter
    results = {}
    for name, arch in archs.items():
        supernet.set_active(arch)
        static = supernet.export(arch).train().to(device, memory_format=fmt)
        size = space.input_size(arch)
        x = torch.randn(batch, space.in_chans, size, size).to(device).contiguous(memory_format=fmt)
        y = torch.randint(0, space.num_classes, (batch,)).to(device)
        totals, (elastic, plain) = step_times([supernet, static], x, y, steps, clock)
        elastic_s, plain_s = map(statistics.median, totals)
        results[name] = {"macs": space.macs(arch), "supernet_ms": 1e3 * elastic_s, "static_ms": 1e3 * plain_s,
                         "ratio": elastic_s / plain_s}
        print(f"{space_name} {name:3s} {space.macs(arch) / 1e6:6.2f} MMACs  supernet "
              f"{results[name]['supernet_ms']:7.2f} ms  static {results[name]['static_ms']:7.2f} ms  "
              f"ratio {elastic_s / plain_s:.3f}  ({device})", flush=True)
        if phases:
            split = {phase: (1e6 * statistics.median(t[k] for t in elastic), 1e6 * statistics.median(t[k] for t in plain))
                     for k, phase in enumerate(PHASES)}
            results[name]["phases_us"] = split
            print("    " + "  ".join(f"{phase} {a:.0f} / {b:.0f} us (+{a - b:.0f})" for phase, (a, b) in split.items()),
                  flush=True)
    return results


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--space", default="mobilenetv3", choices=sorted(SPACE_CONFIGS))
    parser.add_argument("--steps", type=int, default=40, help="timed steps per model and arch")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--device", default="cpu", help="cpu or cuda:N (default cpu)")
    common.threads_argument(parser, default=2)
    parser.add_argument("--phases", action="store_true",
                        help="split each step into forward / backward / optimizer step by thread CPU time "
                             "(CPU and --threads 1 only)")
    args = parser.parse_args(argv)
    if args.phases and (args.threads != 1 or args.device != "cpu"):
        parser.error("--phases: thread CPU time sees one thread only: use it with --threads 1 on the CPU")
    common.use_threads(args.threads)
    results = overhead(args.space, args.steps, args.batch, args.device, args.phases)
    config = load_config(SPACE_CONFIGS[args.space])
    space = build_space(config)
    rate = cost_rate(space)
    print(f"{args.space} analytic costs: {rate:,.0f} archs/s (MACs + params, distinct fresh archs, no cache)")
    return common.emit("elastic_overhead", {
        "space": args.space, "steps": args.steps, "warmup": common.WARMUP, "batch": args.batch,
        "device": args.device, "channels_last": config.train.channels_last, "results": results, "cost_rate": rate},
        argv)


if __name__ == "__main__":
    common.run(main)
