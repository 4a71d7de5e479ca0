"""DDP overhead on CPU: 1 process vs N gloo processes under torchrun, same per-process batch.

Each configuration trains sandwich steps (max + min + `num_random` random subnets, in-place KD)
of the default Fashion-MNIST space with one thread per process. The DDP run wraps the supernet
in DistributedDataParallel(find_unused_parameters=True), skips gradient synchronisation
(`no_sync`) on all but the last pass of a step and all-reduces the summed gradients once. Ratio
= median DDP step time / median single-process step time at the same per-process batch: the
cost of the wrapper, the unused-parameter search and the all-reduce (on 2 cores two processes
also compete for memory bandwidth, so no speed-up is expected here).

    python benchmarks/ddp_overhead.py [--nproc 2] [--steps 30] [--batch 64]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


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
    times = []
    for step, (x, y) in zip(range(steps), train_batches(splits, config.train.batch_size, 0, 0, 0, augment,
                                                        env.rank, env.world_size)):
        x = x.contiguous(memory_format=torch.channels_last)
        start = time.perf_counter()
        trainer.train_one_step(x, y)
        times.append(time.perf_counter() - start)
    if env.is_main:
        median = statistics.median(times[3:])
        print(json.dumps({"world_size": env.world_size, "per_process_batch": x.shape[0], "median_step_s": median,
                          "images_per_s": x.shape[0] * env.world_size / median, "threads": torch.get_num_threads()}))


def run(nproc: int, steps: int, batch: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    script = [str(Path(__file__).resolve()), "--worker", "--steps", str(steps), "--batch", str(batch)]
    if nproc == 1:
        command = [sys.executable, *script]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *script]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=64, help="per-process batch")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.steps, args.batch)
        return
    single, ddp = run(1, args.steps, args.batch), run(args.nproc, args.steps, args.batch)
    ratio = ddp["median_step_s"] / single["median_step_s"]
    print(f"1 process : {single['median_step_s'] * 1e3:7.1f} ms/step  {single['images_per_s']:6.0f} img/s "
          f"(batch {args.batch}, 1 thread)")
    print(f"{args.nproc} processes: {ddp['median_step_s'] * 1e3:7.1f} ms/step  {ddp['images_per_s']:6.0f} img/s "
          f"(batch {args.batch} each, 1 thread each, gloo)")
    print(f"DDP step time / single-process step time at the same per-process batch: {ratio:.3f}")
    print(json.dumps({"single": single, "ddp": ddp, "ratio": ratio, "date": time.strftime("%Y-%m-%d")}))


if __name__ == "__main__":
    main()
