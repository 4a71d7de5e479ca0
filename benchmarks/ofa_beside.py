"""nas beside Once-for-All's own code (the `ofa` package) on OFA's MobileNetV3 w1.0 space.

One machine, one process per engine for memory, the same threads, batch, resolution, dtype (fp32)
and memory format for both: each engine's supernet (nas's `mobilenetv3` space of `--config`,
OFA's `OFAMobileNetV3(width_mult=1.0, ks_list=[3,5,7], expand_ratio_list=[3,4,6],
depth_list=[2,3,4])`, both with 1,000 classes) on the same subnets: max, min and `--random`
random ones, drawn in nas's space and mapped to OFA's (`ks`, `e`, `d`: OFA block n is nas's
stage, block = divmod(n - 1, 4) + (1, 0); nas's stage 0 is OFA's fixed first block). Measured,
the two engines' calls interleaved (`common.alternating_times`) so both see the same load:

- the training step: forward, cross-entropy, backward and SGD (momentum 0.9, Nesterov, weight
  decay 1e-5) of the supernet's parameters, with the subnet active, NCHW and channels_last;
- extracting the subnet: nas's `supernet.export(arch)`, OFA's `get_active_subnet()`;
- the extracted subnet's inference latency (eval mode, no grad, `--infer-batch`);
- peak memory of a process of each engine that runs the same training steps: its peak RSS from
  the moment the engine is built (Linux's VmHWM, reset then), and what the engine added to the
  RSS of the imports.

Ratios are nas / ofa of per-subnet medians; the summary is their median over the subnets.
`--config` defaults to the shipped `imagenet_ofa_mbv3_w10`: OFA's exact space.

    python -m benchmarks.ofa_beside --threads 2 --batch 32 --resolution 128 --steps 10
    python -m benchmarks.ofa_beside --tiny        # a smoke run of every part
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from benchmarks import common
from nas.core.config import load_config

EXACT_CONFIG = "imagenet_ofa_mbv3_w10"
OFA_CHOICES = {"ks_list": [3, 5, 7], "expand_ratio_list": [3, 4, 6], "depth_list": [2, 3, 4]}
FORMATS = {"nchw": torch.contiguous_format, "channels_last": torch.channels_last}
# wall: the idle machine's figure; cpu: the process's CPU seconds (all its threads), which other
# processes' load inflates less than the wall clock (it still shares caches and memory bandwidth)
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def nas_space(config: str | None, resolution: int):
    """nas's space of `config` (default `EXACT_CONFIG`) at `resolution`, 1,000 classes; and the config's name."""
    from nas.core.registry import SPACES, load_plugins

    load_plugins()
    config = config or EXACT_CONFIG
    options = load_config(config, [f"space.options.resolutions=[{resolution}]"]).space.options
    return SPACES.get("mobilenetv3").obj(options, 3, 1000), config


def ofa_supernet(dropout: float = 0.1) -> torch.nn.Module:
    from ofa.imagenet_classification.elastic_nn.networks import OFAMobileNetV3

    return OFAMobileNetV3(n_classes=1000, dropout_rate=dropout, width_mult=1.0, **OFA_CHOICES)


def ofa_arch(arch: Mapping[str, Any]) -> dict[str, list[int]]:
    """OFA's `set_active_subnet` arguments of a nas arch (stages 1-5; blocks beyond a depth keep their values)."""
    ks, e, d = [], [], []
    for stage in range(1, 6):
        d.append(arch[f"stage{stage}.depth"])
        for block in range(4):
            ks.append(arch[f"stage{stage}.block{block}.kernel_size"])
            e.append(arch[f"stage{stage}.block{block}.expand_ratio"])
    return {"ks": ks, "e": e, "d": d}


def subnets(space, count: int, seed: int = 0) -> dict[str, dict]:
    """max, min and `count` random archs of `space`, by name."""
    rng = random.Random(seed)
    return {"max": space.max(), "min": space.min(), **{f"random{i}": space.sample(rng) for i in range(count)}}


class Engine:
    """One engine's supernet, its optimizer and the calls the benchmark times."""

    def __init__(self, name: str, space, memory_format: torch.memory_format):
        torch.manual_seed(0)
        self.name, self.space, self.format = name, space, memory_format
        self.net = (space.build_supernet() if name == "nas" else ofa_supernet()).to(memory_format=memory_format)
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.01, momentum=0.9, nesterov=True,
                                         weight_decay=1e-5)

    def activate(self, arch: Mapping[str, Any]) -> None:
        if self.name == "nas":
            self.net.set_active(arch)
        else:
            self.net.set_active_subnet(**ofa_arch(arch))

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> Callable[[], None]:
        def step() -> None:
            self.net.train()
            loss = torch.nn.functional.cross_entropy(self.net(x), y)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
        return step

    def extract(self, arch: Mapping[str, Any]) -> torch.nn.Module:
        self.activate(arch)
        model = self.net.export(arch) if self.name == "nas" else self.net.get_active_subnet(preserve_weight=True)
        return model.eval().to(memory_format=self.format)


def batch(space, size: int, arch: Mapping[str, Any], memory_format: torch.memory_format, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(size, 3, space.input_size(arch), space.input_size(arch), generator=generator)
    y = torch.randint(0, 1000, (size,), generator=generator)
    return x.contiguous(memory_format=memory_format), y


def beside(space, archs: dict[str, dict], args: argparse.Namespace, layout: str) -> dict[str, Any]:
    """Per subnet: both engines' median training step, extraction and inference, interleaved."""
    memory_format = FORMATS[layout]
    engines = {name: Engine(name, space, memory_format) for name in ("nas", "ofa")}
    rows = {}
    for label, arch in archs.items():
        x, y = batch(space, args.batch, arch, memory_format)
        for engine in engines.values():
            engine.activate(arch)
        clock = CLOCKS[args.clock]
        steps = common.alternating_times({name: e.train_step(x, y) for name, e in engines.items()}, args.steps,
                                         warmup=args.warmup, clock=clock)
        extract = common.alternating_times({name: (lambda e=e: e.extract(arch)) for name, e in engines.items()},
                                           args.extract_repeats, warmup=1, clock=clock)
        models = {name: e.extract(arch) for name, e in engines.items()}
        xi = batch(space, args.infer_batch, arch, memory_format, seed=1)[0]

        def infer(model: torch.nn.Module) -> Callable[[], None]:
            def call() -> None:
                with torch.no_grad():
                    model(xi)
            return call

        inference = common.alternating_times({name: infer(m) for name, m in models.items()}, args.infer_repeats,
                                             warmup=args.warmup, clock=clock)
        row = {"macs": space.macs(arch),        # equal counts: the two engines built the same subnet
               "params": {name: sum(p.numel() for p in m.parameters()) for name, m in models.items()}}
        for what, times in (("step", steps), ("extract", extract), ("infer", inference)):
            nas_ms, ofa_ms = (1e3 * statistics.median(times[name]) for name in ("nas", "ofa"))
            row[what] = {"nas_ms": round(nas_ms, 3), "ofa_ms": round(ofa_ms, 3), "ratio": round(nas_ms / ofa_ms, 4)}
        rows[label] = row
        print(f"{layout:13s} {label:8s} {row['macs'] / 1e6:7.1f} MMACs  " + "  ".join(
            f"{what} {row[what]['nas_ms']:8.2f} / {row[what]['ofa_ms']:8.2f} ms = {row[what]['ratio']:.3f}"
            for what in ("step", "extract", "infer")), flush=True)
    summary = {what: round(statistics.median(row[what]["ratio"] for row in rows.values()), 4)
               for what in ("step", "extract", "infer")}
    print(f"{layout:13s} median nas/ofa over {len(rows)} subnets: step {summary['step']:.3f}, extract "
          f"{summary['extract']:.3f}, inference {summary['infer']:.3f}", flush=True)
    return {"subnets": rows, "median_ratio": summary}


def peak_memory(engine: str, argv: list[str], layout: str) -> dict[str, int]:
    """A fresh process of `engine` running the training steps of every subnet: its peak RSS from
    the moment the engine is built (bytes), and what the engine added to the RSS then (`added`)."""
    command = [sys.executable, "-m", "benchmarks.ofa_beside", *argv, "--memory-of", engine, "--layout", layout]
    done = subprocess.run(command, capture_output=True, text=True, check=True, cwd=Path(__file__).parents[1])
    record = json.loads(done.stdout.strip().splitlines()[-1])
    return {"max_rss": record["max_rss_bytes"], "added": record["max_rss_bytes"] - record["before_bytes"]}


def memory_child(space, archs: dict[str, dict], args: argparse.Namespace) -> None:
    """The `--memory-of` process: the engine's training steps on every subnet, then its max RSS."""
    memory_format = FORMATS[args.layout]
    before = reset_peak_rss()       # the imports' own peak (loading torch, timm, configs) is not the engine's
    engine = Engine(args.memory_of, space, memory_format)
    for arch in archs.values():
        x, y = batch(space, args.batch, arch, memory_format)
        engine.activate(arch)
        step = engine.train_step(x, y)
        for _ in range(2):
            step()
    print(json.dumps({"max_rss_bytes": status_bytes("VmHWM"), "before_bytes": before}))


def status_bytes(field: str) -> int:
    """A memory field of /proc/self/status (Linux), in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def reset_peak_rss() -> int:
    """Reset this process's peak RSS to its current RSS (Linux: 5 into /proc/self/clear_refs); returns it."""
    Path("/proc/self/clear_refs").write_text("5")
    return status_bytes("VmRSS")


def main(argv: list[str] | None = None) -> dict | None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", help=f"nas config of the space (default {EXACT_CONFIG})")
    parser.add_argument("--resolution", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10, help="timed training steps per engine and subnet")
    parser.add_argument("--warmup", type=int, default=common.WARMUP)
    parser.add_argument("--random", type=int, default=6, help="random subnets besides max and min")
    parser.add_argument("--layouts", nargs="+", default=list(FORMATS), choices=list(FORMATS))
    parser.add_argument("--extract-repeats", type=int, default=5)
    parser.add_argument("--infer-batch", type=int, default=1)
    parser.add_argument("--infer-repeats", type=int, default=20)
    parser.add_argument("--clock", choices=list(CLOCKS), default="wall",
                        help="wall (default) or cpu: the process's CPU time, for a machine loaded by others")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory processes")
    parser.add_argument("--tiny", action="store_true", help="a smoke run: batch 2, 1 step, max and min only")
    parser.add_argument("--memory-of", choices=("nas", "ofa"), help=argparse.SUPPRESS)
    parser.add_argument("--layout", choices=list(FORMATS), default="nchw", help=argparse.SUPPRESS)
    common.threads_argument(parser, default=2)
    args = parser.parse_args(argv)
    if args.tiny:
        args.resolution, args.batch, args.steps, args.warmup, args.random = 128, 2, 1, 0, 0
        args.extract_repeats, args.infer_repeats = 1, 1
    threads = common.use_threads(args.threads)
    space, source = nas_space(args.config, args.resolution)
    archs = subnets(space, args.random)
    if args.memory_of:
        memory_child(space, archs, args)
        return None
    print(f"nas space: {source}; {len(archs)} subnets at {args.resolution} px, batch {args.batch}, {threads} threads, "
          f"fp32, {args.steps} timed steps after {args.warmup}, {args.clock} clock", flush=True)
    figures: dict[str, Any] = {"space": source, "clock": args.clock, "resolution": args.resolution,
                               "batch": args.batch,
                               "threads": threads, "steps": args.steps, "warmup": args.warmup,
                               "archs": {label: arch for label, arch in archs.items()}}
    for layout in args.layouts:
        figures[layout] = beside(space, archs, args, layout)
    if not args.no_memory:
        child = [a for a in (argv if argv is not None else sys.argv[1:])]
        memory = {layout: {engine: peak_memory(engine, child, layout) for engine in ("nas", "ofa")}
                  for layout in args.layouts}
        for layout, peaks in memory.items():
            nas, ofa = peaks["nas"], peaks["ofa"]
            print(f"{layout:13s} peak RSS nas {nas['max_rss'] / 2**20:.0f} MiB, ofa {ofa['max_rss'] / 2**20:.0f} MiB; "
                  f"above the imports: nas {nas['added'] / 2**20:.0f} MiB, ofa {ofa['added'] / 2**20:.0f} MiB, ratio "
                  f"{nas['added'] / max(ofa['added'], 1):.3f}", flush=True)
        figures["peak_rss_bytes"] = memory
    return common.emit("ofa_beside", figures, argv)


if __name__ == "__main__":
    common.run(main)
