"""ShiftNAS on a short run: where the bin probabilities go, and how well the generator answers
budgets.

Trains `fashion_mnist_mbv3_shiftnas` (or `--config`) for `--steps` steps on `--train-size`
training images with the bins shifted every `--update-every` steps from the start (no warm-up),
then prints:
  - the bin probabilities after every update (from the checkpointed sampler state, replayed
    from TensorBoard's `train/shiftnas/p_bin{k}` scalars);
  - for `--budgets` budgets evenly spaced from 5% to 95% of the MACs range: how often the
    generator's first answer fits without shrinking, the mean |MACs - budget| of its first
    answer in units of the range, and whether `nas generate`'s final answer fits (always, by
    construction; printed as a check).
An existing run of the same name is reused (only the report is recomputed). One JSON line at
the end.

    python -m benchmarks.shiftnas_probe [--steps 300] [--train-size 10000] [--update-every 25]
        [--budgets 19] [--runs-dir runs/shiftnas_probe] [--threads 1]
"""
from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks import common
from nas import api
from nas.core.rng import torch_generator


def bin_trajectory(run_dir: Path) -> list[tuple[int, list[float]]]:
    """(step, bin probabilities) at every logged step, from TensorBoard."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tb"), size_guidance={"scalars": 0})
    events.Reload()
    tags = sorted((t for t in events.Tags()["scalars"] if t.startswith("train/shiftnas/p_bin")),
                  key=lambda t: int(t.rsplit("bin", 1)[1]))
    series = [events.Scalars(tag) for tag in tags]
    return [(points[0].step, [p.value for p in points]) for points in zip(*series)]


def generator_report(run: api.Run, budgets: int) -> dict:
    space, trainer = run.space, api.arch_generator(run)
    low, high = space.macs(space.min()), space.macs(space.max())
    fits, errors, final_fits = 0, [], 0
    for i in range(budgets):
        budget = low + (high - low) * (0.05 + 0.9 * i / max(budgets - 1, 1))
        first = trainer.propose(budget, torch_generator(0, "generate", 0), sample=False)
        fits += space.macs(first) <= budget
        errors.append(abs(space.macs(first) - budget) / (high - low))
        final_fits += space.macs(trainer.generate(budget, seed=0)[0]) <= budget
    return {"budgets": budgets, "first_answer_fits": fits / budgets,
            "first_answer_abs_error_of_range": sum(errors) / budgets, "final_answer_fits": final_fits / budgets}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="fashion_mnist_mbv3_shiftnas")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--train-size", type=int, default=10000)
    parser.add_argument("--update-every", type=int, default=25)
    parser.add_argument("--budgets", type=int, default=19)
    parser.add_argument("--runs-dir", default="runs/shiftnas_probe")
    common.threads_argument(parser, default=1)
    args = parser.parse_args(argv)
    common.use_threads(args.threads)
    name = f"{args.config}-n{args.train_size}-s{args.steps}-u{args.update_every}"
    overrides = ["train.epochs=null", f"train.steps={args.steps}", f"data.train_size={args.train_size}",
                 "strategy.sampler.warmup_epochs=0", f"strategy.sampler.update_every={args.update_every}",
                 "train.log_every=1", f"train.checkpoint.every_steps={args.steps}"]
    run_dir = Path(args.runs_dir) / name
    if not (run_dir / "checkpoints" / "last.pt").is_file():
        api.train(api.load_config(args.config, overrides), name=name, runs_dir=args.runs_dir, progress=False,
                  device="cpu")
    run = api.load_run(run_dir, device="cpu")
    trajectory = [(step, probs) for step, probs in bin_trajectory(run_dir)
                  if step % args.update_every == 0 or step == 1]
    print(f"{name}: bin probabilities (bins of equal MACs width, cheapest first)")
    for step, probs in trajectory:
        print(f"  step {step:5d}: " + " ".join(f"{p:.3f}" for p in probs))
    report = generator_report(run, args.budgets)
    print(f"generator: first answer fits {report['first_answer_fits']:.0%} of {args.budgets} budgets, "
          f"mean |MACs - budget| = {report['first_answer_abs_error_of_range']:.3f} of the MACs range; "
          f"nas generate's answer fits {report['final_answer_fits']:.0%}")
    return common.emit("shiftnas_probe", {"run": name, "final_probabilities": trajectory[-1][1], **report}, argv)


if __name__ == "__main__":
    common.run(main)
