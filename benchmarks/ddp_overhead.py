"""DDP overhead on CPU: 1 process vs N gloo processes under torchrun, same per-process batch.

Each configuration trains sandwich steps (max + min + `num_random` random subnets, in-place KD)
of the default Fashion-MNIST space with one thread per process. The DDP run wraps the supernet
in DistributedDataParallel(find_unused_parameters=True), skips gradient synchronisation
(`no_sync`) on all but the last pass of a step and all-reduces the summed gradients once. Ratio
= median DDP step time / median single-process step time at the same per-process batch: the
cost of the wrapper, the unused-parameter search and the all-reduce (on 2 cores two processes
also compete for memory bandwidth, so no speed-up is expected here).

    python -m benchmarks.ddp_overhead [--nproc 2] [--steps 30] [--batch 64]

`--steps` timed steps per process follow 3 untimed ones (common.WARMUP).
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks import common

ROOT = Path(__file__).resolve().parents[1]


def worker(steps: int, batch: int) -> None:
    """Time `steps` training steps in this process (under torchrun or alone)."""
    import torch

    from nas import api
    from nas.core.config import load_config
    from nas.engine.data.batches import Augment, train_batches
    from nas.engine.distributed import detect, init_process_group
    from nas.engine.run_dir import RunDir
    from nas.engine.training.trainer import Trainer

    env = detect("cpu")      # a CPU (gloo) benchmark, also on machines with a GPU
    init_process_group(env)
    config = load_config("fashion_mnist_mbv3", [f"train.batch_size={batch * env.world_size}", "train.epochs=1"])
    splits = api.load_splits(config)
    strategy = api.build_strategy(config)
    trainer = Trainer(config, strategy, splits, RunDir(Path("/nonexistent")), env,
                      progress=False)
    augment = Augment(config.data.augment.crop_padding, config.data.augment.hflip)
    batches = [(x.contiguous(memory_format=torch.channels_last), y) for x, y in itertools.islice(
        train_batches(splits, config.train.batch_size, 0, 0, 0, augment, env.rank, env.world_size),
        common.WARMUP + steps)]
    ready = iter(batches)
    times = common.timed_steps(lambda: trainer.train_one_step(*next(ready)), steps)
    if env.is_main:
        median, size = statistics.median(times), batches[0][0].shape[0]
        print(json.dumps({"world_size": env.world_size, "per_process_batch": size, "median_step_s": median,
                          "images_per_s": size * env.world_size / median, "threads": torch.get_num_threads()}))


def run(nproc: int, steps: int, batch: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    module = ["-m", "benchmarks.ddp_overhead", "--worker", "--steps", str(steps), "--batch", str(batch)]
    if nproc == 1:
        command = [sys.executable, *module]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *module]
    out = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict | None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30, help="timed steps per process")
    parser.add_argument("--batch", type=int, default=64, help="per-process batch")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.steps, args.batch)
        return None
    single, ddp = run(1, args.steps, args.batch), run(args.nproc, args.steps, args.batch)
    ratio = ddp["median_step_s"] / single["median_step_s"]
    print(f"1 process : {single['median_step_s'] * 1e3:7.1f} ms/step  {single['images_per_s']:6.0f} img/s "
          f"(batch {args.batch}, 1 thread)")
    print(f"{args.nproc} processes: {ddp['median_step_s'] * 1e3:7.1f} ms/step  {ddp['images_per_s']:6.0f} img/s "
          f"(batch {args.batch} each, 1 thread each, gloo)")
    print(f"DDP step time / single-process step time at the same per-process batch: {ratio:.3f}")
    return common.emit("ddp_overhead", {"nproc": args.nproc, "steps": args.steps, "warmup": common.WARMUP,
                                        "single": single, "ddp": ddp, "ratio": ratio}, argv)


if __name__ == "__main__":
    common.run(main)
