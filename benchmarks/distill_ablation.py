"""Distillation ablation: the default Fashion-MNIST supernet trained with `distill: none`, `kl`,
`alpha`, and `alpha` + `sampler: attentive`, same seed, data and epochs.

Each variant changes only the `strategy` section of `fashion_mnist_mbv3` (sandwich rule with
the base config's number of random subnets, or attentive BestUp-3 in those slots). After training, on the TEST
split, each subnet is evaluated after BN recalibration (the config's `eval` settings):
  - top-1 of min, mid (the strategy's monitored mid arch) and max;
  - top-1 of 50 fixed random archs (drawn from a fixed seed, the same for every variant and
    training seed), summarised by their mean and by the area under their accuracy/MACs front:

        x_i   = (macs_i - macs(min)) / (macs(max) - macs(min))        normalised MACs in [0, 1]
        F(x)  = max{top1_i : x_i <= x}, 0 when no arch is that cheap  the running best top-1
        AUC   = integral of F over [0, 1]                             a step-function integral

    Only the random archs enter the AUC; they sit at the same x for every variant, so AUCs
    differ only through accuracy (1.0 would be 100% top-1 at the min arch's MACs).

Runs go to `<runs-dir>/<variant>-seed<S>-ep<E>-n<N>`; an existing run is resumed (a finished
one is only evaluated) and its results are cached in `<run>/distill_ablation.json` (reused
while the checkpoint step, the arch count and the eval settings are unchanged). Prints a
table per run, the mean and sample standard deviation over seeds per variant, then one JSON
line.

    python -m benchmarks.distill_ablation [--variants none kl alpha alpha_attentive]
        [--seeds 0] [--epochs 4] [--train-size N] [--threads T] [--runs-dir runs/distill_ablation]

On a loaded 2-core machine, 1 thread per process was several times faster than 2 (OpenMP
threads then wait on each other); try `--threads 1` (or OMP_NUM_THREADS=1) there.
"""
from __future__ import annotations

import argparse
import copy
import json
import statistics
from pathlib import Path

from benchmarks import common
from nas import api
from nas.core import yaml_io
from nas.core.config import load_config, resolve_config_path
from nas.core.rng import python_rng
from nas.engine.checkpoint import LAST, load_checkpoint

BASE_CONFIG = "fashion_mnist_mbv3"
ARCH_SEED = 2024
SANDWICH = {"name": "sandwich"}   # num_random: the base config's
ALPHA = {"name": "alpha", "alpha_min": -1.0, "alpha_max": 1.0, "beta": 5.0}
VARIANTS = {
    "none": {"sampler": SANDWICH, "distill": {"name": "none"}},
    "kl": {"sampler": SANDWICH, "distill": {"name": "kl"}},
    "alpha": {"sampler": SANDWICH, "distill": ALPHA},
    "alpha_attentive": {"sampler": {"name": "attentive", "mode": "best", "k": 3, "bins": 16},
                        "distill": ALPHA},
}


def variant_config(variant: str, seed: int, epochs: int, train_size: int | None, threads: int | None = None):
    raw = yaml_io.load_mapping(resolve_config_path(BASE_CONFIG))
    num_random = load_config(BASE_CONFIG).strategy.sampler.options.num_random   # as the base config trains
    raw["strategy"] = copy.deepcopy(VARIANTS[variant])
    raw["strategy"]["sampler"]["num_random"] = num_random
    raw["train"].update(seed=seed, epochs=epochs, steps=None, threads=threads)
    raw["data"]["train_size"] = train_size
    return load_config(raw)


def front_auc(points: list[tuple[float, float]]) -> float:
    """Integral over [0, 1] of the running best accuracy of (normalised MACs, top-1) points."""
    area, best, previous = 0.0, 0.0, 0.0
    for x, top1 in sorted(points):
        x = min(max(x, 0.0), 1.0)
        area += best * (x - previous)
        best, previous = max(best, top1), x
    return area + best * (1.0 - previous)


def fixed_archs(space, count: int) -> list[dict]:
    rng = python_rng(ARCH_SEED, "distill-ablation-archs")
    return [space.sample(rng) for _ in range(count)]


def evaluate_run(run_dir: Path, archs_count: int) -> dict:
    run = api.load_run(run_dir)
    space = run.space
    low, high = space.macs(space.min()), space.macs(space.max())
    named = {"min": space.min(), **{k: v for k, v in run.strategy.monitored_archs().items() if k == "mid"},
             "max": space.max()}
    result = {f"top1_{role}": run.evaluator.evaluate(arch, "test").top1 for role, arch in named.items()}
    points = [((space.macs(arch) - low) / (high - low), run.evaluator.evaluate(arch, "test").top1)
              for arch in fixed_archs(space, archs_count)]
    result["top1_random_mean"] = statistics.fmean(top1 for _, top1 in points)
    result["front_auc"] = front_auc(points)
    result["train_s"] = round(load_checkpoint(run.checkpoint).get("elapsed", 0.0), 1)
    result["steps"] = run.step
    return result


def finished(run_dir: Path) -> bool:
    last = run_dir / "checkpoints" / LAST
    if not last.is_file():
        return False
    state = load_checkpoint(last)
    return state["step"] >= state["total_steps"]


def cached_evaluation(run_dir: Path, archs_count: int) -> dict:
    """`evaluate_run`, reusing `<run>/distill_ablation.json` when it matches the checkpoint."""
    path = run_dir / "distill_ablation.json"
    key = {"step": load_checkpoint(run_dir / "checkpoints" / LAST)["step"], "archs": archs_count,
           "arch_seed": ARCH_SEED, "eval": load_config(run_dir / "config.yaml").to_dict()["eval"]}
    if path.is_file():
        stored = json.loads(path.read_text())
        if stored.get("key") == key:
            return stored["result"]
    result = evaluate_run(run_dir, archs_count)
    path.write_text(json.dumps({"key": key, "result": result}, indent=1) + "\n")
    return result


def train_and_evaluate(variant: str, seed: int, args: argparse.Namespace) -> dict:
    config = variant_config(variant, seed, args.epochs, args.train_size, args.threads)
    name = f"{variant}-seed{seed}-ep{args.epochs}-n{args.train_size or 'all'}"
    run_dir = Path(args.runs_dir) / name
    if not finished(run_dir):
        api.train(config, name=name, resume=(run_dir / "config.yaml").is_file(), runs_dir=args.runs_dir,
                  progress=args.progress)
    return {"variant": variant, "seed": seed, "run": str(run_dir), **cached_evaluation(run_dir, args.archs)}


COLUMNS = ("top1_min", "top1_mid", "top1_max", "top1_random_mean", "front_auc")


def print_table(rows: list[dict]) -> dict:
    header = f"{'variant':<16} {'seed':>4} " + " ".join(f"{c:>16}" for c in COLUMNS) + f" {'train_s':>8}"
    print(header)
    for row in rows:
        print(f"{row['variant']:<16} {row['seed']:>4} " + " ".join(f"{row[c]:>16.4f}" for c in COLUMNS)
              + f" {row['train_s']:>8.0f}")
    summary = {}
    print("\nmean (sample std over seeds)")
    for variant in dict.fromkeys(r["variant"] for r in rows):
        mine = [r for r in rows if r["variant"] == variant]
        stats = {}
        for c in COLUMNS:
            values = [r[c] for r in mine]
            stats[c] = {"mean": statistics.fmean(values),
                        "std": statistics.stdev(values) if len(values) > 1 else None, "n": len(values)}
        summary[variant] = stats
        cells = " ".join(f"{s['mean']:>8.4f}" + (f"±{s['std']:.4f}" if s["std"] is not None else " " * 7)
                         for s in stats.values())
        print(f"{variant:<16} n={len(mine):<2} {cells}")
    return summary


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--epochs", type=int, default=load_config(BASE_CONFIG).train.epochs)
    parser.add_argument("--train-size", type=int, default=None, help="training images (default: all)")
    parser.add_argument("--archs", type=int, default=50, help="fixed random archs for the front")
    parser.add_argument("--runs-dir", default="runs/distill_ablation")
    common.threads_argument(parser, default=None)
    parser.add_argument("--progress", action="store_true", help="show training progress bars")
    args = parser.parse_args(argv)
    common.use_threads(args.threads)
    rows = [train_and_evaluate(variant, seed, args) for seed in args.seeds for variant in args.variants]
    summary = print_table(rows)
    return common.emit("distill_ablation", {"base_config": BASE_CONFIG, "epochs": args.epochs,
                                            "train_size": args.train_size, "archs": args.archs,
                                            "arch_seed": ARCH_SEED, "runs": rows, "summary": summary}, argv)


if __name__ == "__main__":
    common.run(main)
