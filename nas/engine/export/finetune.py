"""Fine-tune before shipping: the chosen subnet trained alone from its inherited weights.

Weight sharing leaves the subnets in the middle of the space behind the same archs trained
alone (their shared weights are pulled towards the max and min subnets, which the sandwich rule
trains at every step). A short training of the subnet alone, starting from what it inherited,
recovers most of that gap for a fraction of a standalone training's cost; `nas export` does it
by default (`export.finetune` in the run's config, `--finetune` on the command line).

The recipe is the run's own (optimiser, batch size, gradient clipping, data and augmentation,
label smoothing 0.1) with `export.finetune.lr` as peak learning rate (default: the run's own),
cosine-decayed to 0 with no warm-up, for `length` steps (`N`, `Ne` epochs or `P%` of the run's training steps); with
`distill: true` half of the loss is the cross-entropy against the max subnet's predictions (the
max subnet, BN-recalibrated, in eval mode). Its state is saved atomically as it trains (every
`train.checkpoint.every_steps` steps or `every_seconds` seconds), so a killed export resumes where
it was saved and gives the same weights as an uninterrupted one. That state is keyed by all that
changes the steps (`partial_key`: the settings, the run's checkpoint, the kernels and the number
of threads), so a resume never mixes compiled and eager, bf16 and fp32, or sums in another order;
`nas export` deletes it once the export is written. Then BN statistics are
recalibrated on the evaluator's images and val/test top-1 measured as the evaluator measures
a subnet, so inherited and fine-tuned accuracies compare like for like.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import nn

from nas.core.arch import arch_id
from nas.core.config import FinetuneConfig, finetune_length_problem
from nas.core.errors import ConfigError
from nas.core.files import check_writable, write_json
from nas.core.preprocessing import resize
from nas.engine.bn import recalibrate_bn
from nas.core.wording import announce
from nas.engine.counting import parameter_count
from nas.engine.data.batches import steps_per_epoch
from nas.engine.evaluator import accuracy
from nas.engine.fidelity.recipe import DEFAULT_LABEL_SMOOTHING, Recipe
from nas.engine.fidelity.standalone import train_alone
from nas.engine.fidelity.variant import choose_variant
from nas.engine.run import Run


# The longest fine-tune, in trainings of the run: a length past it is a typo (a 7-step run asked
# for 1,000,000,000 steps), not a recipe; a standalone training from scratch is shorter.
MAX_RUN_TRAININGS = 10


def finetune_steps(length: int | str, run_steps: int, epoch_steps: int, what: str = "export.finetune.length") -> int:
    """Optimiser steps of a fine-tune `length`: `N` steps (also `1e4`), `Ne` epochs of
    `epoch_steps`, or `P%` of the run's `run_steps` (rounded, at least 1 unless the length is 0);
    more than `MAX_RUN_TRAININGS` times `run_steps` is an error naming `what`."""
    problem = finetune_length_problem(length)
    if problem:
        raise ConfigError(f"{what}: {problem}")
    text = str(length).strip()
    if text.endswith("%"):
        value = float(text[:-1]) * run_steps / 100
    elif text.endswith("e"):
        value = float(text[:-1]) * epoch_steps
    else:
        value = float(text)
    steps = 0 if value == 0 else max(1, round(value))
    if steps > MAX_RUN_TRAININGS * run_steps:
        raise ConfigError(f"{what}: {length} is {steps:,} steps, more than {MAX_RUN_TRAININGS} times the run's "
                          f"{run_steps:,} training steps ({MAX_RUN_TRAININGS * run_steps:,}); give a shorter length "
                          f"(e.g. 25% of the run)")
    return steps


def run_length(run: Run) -> tuple[int, int]:
    """(optimiser steps the run trains for, steps in one epoch of its data)."""
    cfg = run.config.train
    per_epoch = steps_per_epoch(run.data.num_train, cfg.batch_size)
    return (cfg.steps if cfg.steps is not None else cfg.epochs * per_epoch), per_epoch


def finetune_recipe(run: Run, steps: int, settings: FinetuneConfig) -> Recipe:
    """The run's recipe with the fine-tune's length and peak rate, cosine to 0 without warm-up."""
    train = run.config.train
    lr = train.optimizer.lr if settings.lr is None else settings.lr
    train = replace(train, epochs=None, steps=steps, optimizer=replace(train.optimizer, lr=lr),
                    scheduler=replace(train.scheduler, name="cosine", warmup_steps=0, min_lr=0.0))
    return Recipe(run.config.data, train, run.config.eval, DEFAULT_LABEL_SMOOTHING)


@dataclass(frozen=True)
class Finetuned:
    """A fine-tuned static model (BN recalibrated, eval mode), its accuracies and what it took."""

    model: nn.Module
    val_top1: float
    test_top1: float
    val_top5: float
    test_top5: float
    record: dict[str, Any]


# What the partial state holds per parameter, in float32 values: the weights and up to two
# optimiser buffers (Adam's moments; SGD's momentum is one).
PARTIAL_COPIES = 3
LR_PARAM = "export.finetune.lr ({finetune_lr})"     # what a diverging fine-tune advises lowering


def partial_key(run: Run, arch: Mapping[str, Any], steps: int, settings: FinetuneConfig,
                model: nn.Module | None = None) -> dict[str, Any]:
    """Everything that changes a fine-tune's steps: the arch, the settings, the run's checkpoint,
    and the kernels (`choose_variant`: compiled or eager, bf16 or fp32, memory format) and the
    number of threads, which changes the order floating-point sums run in. `model`: the arch's
    static model if already built."""
    model = run.export_model(arch) if model is None else model
    threads = torch.get_num_threads()
    variant = choose_variant(model, finetune_recipe(run, steps, settings).train, steps, threads)
    return {"arch": arch_id(arch), "steps": steps, "lr": settings.lr, "distill": settings.distill,
            "seed": settings.seed, "run_step": run.step, "checkpoint": run.checkpoint.name,
            **variant.to_dict(), "threads": threads}


def partial_path(run: Run, arch: Mapping[str, Any], steps: int, settings: FinetuneConfig,
                 model: nn.Module | None = None) -> Path:
    """Where a fine-tune's state is saved while it trains: keyed by `partial_key`, so a run
    trained further, other settings, other kernels or another number of threads never resume
    it (a resumed fine-tune runs every step as one uninterrupted run would)."""
    key = partial_key(run, arch, steps, settings, model)
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
    return run.dir.root / "export" / f".{arch_id(arch)}-finetune-{digest}.partial.pt"


def other_partials(run: Run, arch: Mapping[str, Any], partial: Path) -> list[Path]:
    """The arch's partial fine-tunes other than `partial` (other settings, kernels or threads)."""
    return sorted(p for p in partial.parent.glob(f".{arch_id(arch)}-finetune-*.partial.pt") if p != partial)


def remove_partial(partial: Path) -> None:
    """Delete a fine-tune's partial state and its key file (once the export that used it is written)."""
    partial.unlink(missing_ok=True)
    partial.with_suffix(".json").unlink(missing_ok=True)


def finetune_subnet(run: Run, arch: Mapping[str, Any], settings: FinetuneConfig, *, progress: bool = True,
                    save_every_steps: int | None = None, keep_partial: bool = False,
                    beside_bytes: int = 0) -> Finetuned:
    """Train `arch` alone from the run's shared weights (a copy: the run is unchanged), resumably;
    then recalibrate BN and measure val and test top-1 (see the module docstring).

    The partial state (`partial_path`, beside it its key as JSON) is checked for room before any
    work (`RUN`; with room for `beside_bytes` more, what the caller writes there meanwhile), and
    deleted at the end unless `keep_partial` (the caller then deletes it with `remove_partial`
    once its result is stored: `record["partial"]`). Partial states of the arch with other
    settings, kernels or threads are kept and said on stderr.
    """
    arch = run.space.canonical(arch)
    run_steps, epoch_steps = run_length(run)
    steps = finetune_steps(settings.length, run_steps, epoch_steps)
    if steps < 1:
        raise ConfigError("export.finetune.length: 0 means no fine-tune; nothing to train")
    recipe = finetune_recipe(run, steps, settings)
    size = run.space.input_size(arch)
    model = run.export_model(arch)
    head = replace_head(model, run.space.num_classes, run.data.num_classes, settings.seed)
    key = partial_key(run, arch, steps, settings, model)
    partial = partial_path(run, arch, steps, settings, model)
    check_writable(partial.parent, "RUN", need_bytes=PARTIAL_COPIES * 4 * parameter_count(model) + beside_bytes)
    partial.parent.mkdir(parents=True, exist_ok=True)
    if not partial.is_file():
        write_json(partial.with_suffix(".json"), key)
        for other in other_partials(run, arch, partial):
            announce(f"note: {other} (a partial fine-tune of {arch_id(arch)} with {_differences(other, key)}) is "
                     f"kept: this fine-tune starts anew; rerun with those settings to resume that one, or delete it")
    teacher = _teacher(run) if settings.distill else None
    checkpoint = run.config.train.checkpoint
    trained = train_alone(model, recipe, run.data, settings.seed, resolution=size, partial=partial,
                          interpolation=run.space.interpolation, save_every_s=checkpoint.every_seconds,
                          save_every_steps=save_every_steps or checkpoint.every_steps, teacher=teacher,
                          progress=f"fine-tune {arch_id(arch)}" if progress else None, lr_param=LR_PARAM)
    model = trained_model(model)
    val, test = measure(run, model, size)
    if not keep_partial:
        remove_partial(partial)
    record = {"steps": steps, "length": str(settings.length), "lr": recipe.train.optimizer.lr, "distill": settings.distill,
              "seed": settings.seed, "seconds": trained.seconds, "resumed_from": trained.resumed_from,
              "run_steps": run_steps, "fraction_of_run": round(steps / run_steps, 4), **trained.variant.to_dict(),
              "threads": key["threads"], "partial": str(partial) if keep_partial else None, "head": head}
    return Finetuned(model, val.top1, test.top1, val.top5, test.top5, record)


def replace_head(model: nn.Module, head_classes: int, classes: int, seed: int) -> dict[str, Any] | None:
    """Give `model` (whose head has `head_classes` outputs, its space's) a fresh classifier seeded
    by `seed` when the data has another number of `classes` (an imported run's 1000-class head
    on the user's data); returns what was replaced, or None when the head fits."""
    if head_classes == classes:
        return None
    old = getattr(model, "classifier", None)
    if not isinstance(old, nn.Linear):
        raise ConfigError(f"data.root: the data has {classes} classes but the model's head has {head_classes}, "
                          f"and this space's export has no `classifier` layer to replace")
    outputs = old.out_features
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model.classifier = nn.Linear(old.in_features, classes).to(old.weight.device)
    return {"replaced": True, "classes_before": outputs, "classes": classes}


def _differences(other: Path, key: Mapping[str, Any]) -> str:
    """What differs between another partial's key (its JSON file) and `key`, in words."""
    try:
        theirs = json.loads(other.with_suffix(".json").read_text())
    except (OSError, ValueError):
        return "other settings"
    differ = [f"{name} {theirs[name]}" for name in key if name in theirs and theirs[name] != key[name]]
    return ", ".join(differ) if differ else "other settings"


def trained_model(model: nn.Module) -> nn.Module:
    """`model` in plain contiguous float32 layout (what the export saves)."""
    return model.to(memory_format=torch.contiguous_format)


def _teacher(run: Run) -> nn.Module:
    """The max subnet as a static model with recalibrated BN, in eval mode."""
    top = run.space.max()
    with run.evaluator.prepared(top) as supernet:
        teacher = supernet.export(top)
    memory_format = torch.channels_last if run.config.train.channels_last else torch.contiguous_format
    return teacher.to(memory_format=memory_format).eval()


def measure(run: Run, model: nn.Module, size: int) -> tuple[Any, Any]:
    """BN recalibration on the evaluator's images, then (val, test) accuracy as the evaluator measures."""
    evaluator = run.evaluator
    with torch.no_grad():
        recalibrate_bn(model, [resize(x, size, run.space.interpolation) for x in evaluator.calibration_inputs()])
    model.eval()
    return tuple(accuracy(model, ((resize(x, size, run.space.interpolation), y) for x, y in evaluator.batches(split)))
                 for split in ("val", "test"))
