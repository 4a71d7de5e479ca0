"""Standalone training: one exported subnet trained alone from its current weights.

What the supernet's accuracy of an arch is measured against (`nas fidelity`, the shared-vs-
standalone benchmark). The loop is the supernet trainer's, minus weight sharing: the recipe's
timm optimiser and per-iteration LR schedule, the batches of the recipe's data source
(`nas.engine.data.sources`: order a pure function of (seed, epoch), augmentation and mixup/cutmix
of (seed, epoch, step), in memory or streamed), label-smoothed cross-entropy and the recipe's
gradient clipping. Inputs are resized to the arch's resolution as the supernet resizes them.
Then BN statistics are recalibrated like a subnet's and test top-1 is measured with the
preprocessing an export records (scale to [0, 1], bilinear resize without antialiasing,
normalise; streamed data comes normalised and is resized after, the same up to rounding).
The kernels (memory format, `torch.compile`, bf16 autocast) follow `train.accelerate` and
`train.precision` (`nas.engine.fidelity.variant`), and the result says which ran: under `auto`
a training here may run bf16 on a CPU with bf16 instructions (the export's fine-tune does); a
ground truth pins its variant to its recipe's precision (`nas.engine.fidelity.ground_truth`).
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from nas.core.config import GradClipConfig
from nas.core.errors import CheckpointError, RecordError, TrainingDiverged, clip_words
from nas.core.preprocessing import INTERPOLATION, resize
from nas.core.records import field_problems, parse_record
from nas.core.rng import derive_seed
from nas.engine.bn import recalibrate_bn
from nas.engine.checkpoint import load_checkpoint, rng_state, save_checkpoint, set_rng_state
from nas.engine.data.batches import steps_per_epoch
from nas.engine.data.datasets import ImageSplits
from nas.engine.data.sources import DataSource, InMemorySource, as_source
from nas.engine.evaluator import Accuracy, accuracy, static_accuracy
from nas.engine.fidelity.recipe import Recipe
from nas.engine.fidelity.variant import Variant, choose_variant, forward_of
from nas.engine.precision import bf16_autocast
from nas.engine.training.schedule import build_scheduler
from nas.engine.training.trainer import build_optimizer, clip_gradients

PARTIAL_EVERY_S = 300.0     # how often a standalone training saves its state to resume from


@dataclass(frozen=True)
class StandaloneResult:
    """Test accuracy (fractions) of a standalone-trained model and what the training took."""

    test_top1: float
    test_top5: float
    steps: int
    seconds: float
    variant: Variant

    def to_dict(self) -> dict:
        """Plain data: accuracies, steps, seconds, and the variant's fields (`Variant.to_dict`)."""
        plain = asdict(self)
        del plain["variant"]
        return {**plain, **self.variant.to_dict()}


def total_steps(recipe: Recipe, data: DataSource) -> int:
    """Optimiser steps of the recipe: `train.steps`, or `train.epochs` full epochs."""
    cfg = recipe.train
    if cfg.steps is not None:
        return cfg.steps
    return cfg.epochs * steps_per_epoch(data.num_train, cfg.batch_size)


def _batches(recipe: Recipe, data: DataSource, seed: int, total: int, start: int = 0
             ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The batches of steps `start..total-1` (each a pure function of seed, epoch and step)."""
    per_epoch = steps_per_epoch(data.num_train, recipe.train.batch_size)
    step, (epoch, offset) = start, divmod(start, per_epoch)
    while step < total:
        for batch in data.train_batches(recipe.train.batch_size, seed, epoch, start_step=offset):
            yield batch
            step += 1
            if step == total:
                return
        epoch, offset = epoch + 1, 0


@dataclass(frozen=True)
class PartialProgress:
    """How far a partial training's saved state got (beside its weights, optimiser and RNG)."""

    step: int
    seconds: float

    def __post_init__(self) -> None:
        field_problems(step=(self.step >= 0, "a step >= 0"), seconds=(self.seconds >= 0, "seconds >= 0"))


def _resume(path: Path | None, model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[int, float]:
    """Restore a partial training from `path` (weights, optimiser, RNG); returns (steps done,
    seconds spent). (0, 0.0) when there is none, or when it cannot be read or trusted (said on
    stderr: a state is a cache, so its damage costs the steps, never the training)."""
    if path is None or not path.is_file():
        return 0, 0.0
    try:
        state = load_checkpoint(path)
        progress = parse_record(PartialProgress, state, path, open_keys=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        set_rng_state(state["rng"])
        return progress.step, progress.seconds
    except (CheckpointError, RecordError, KeyError, RuntimeError, ValueError, TypeError) as e:
        print(f"{path}: not resumed, training from the start ({clip_words(str(e))})", file=sys.stderr, flush=True)
        return 0, 0.0


def train_standalone(model: nn.Module, recipe: Recipe, data: ImageSplits | DataSource, seed: int, *,
                     resolution: int, partial: Path | None = None,
                     save_every_s: float | None = None, interpolation: str = INTERPOLATION) -> StandaloneResult:
    """Train `model` (in place, from its current weights) with `recipe`, then evaluate it.

    Args:
        model: A static model (e.g. a freshly initialised supernet's export).
        recipe: Optimiser, schedule, batch, length, augmentation, label smoothing, BN recalibration.
        data: The recipe's data: a source (`build_source(recipe.data)`), or in-memory splits,
            augmented as `recipe.data.augment` says.
        seed: Seeds the batch order, the augmentation, the calibration images and any other
            randomness of training (the global torch RNG is restored afterwards).
        resolution: The input side the model expects.
        interpolation: How images are resized to it (the space's `interpolation`).
        partial: Where the training's state (weights, optimiser, RNG, step) is saved atomically
            every `save_every_s` seconds (default `PARTIAL_EVERY_S`) and resumed from: a killed
            training continues where it was saved, with the same result as an uninterrupted one.
            The caller deletes it once the result is stored.

    Raises:
        TrainingDiverged: a non-finite loss.
    """
    data = as_source(data, recipe.data)
    done = train_alone(model, recipe, data, seed, resolution=resolution, partial=partial, save_every_s=save_every_s,
                       interpolation=interpolation)
    result = evaluate_standalone(model, recipe, data, seed, resolution, interpolation)
    return StandaloneResult(result.top1, result.top5, done.steps, done.seconds, done.variant)


@dataclass(frozen=True)
class Trained:
    """What `train_alone` did: optimiser steps in all, the step it resumed from (0: a fresh
    start), seconds spent over every attempt, and the kernels that ran."""

    steps: int
    resumed_from: int
    seconds: float
    variant: Variant


def train_alone(model: nn.Module, recipe: Recipe, data: ImageSplits | DataSource, seed: int, *, resolution: int,
                partial: Path | None = None, save_every_s: float | None = None, save_every_steps: int | None = None,
                teacher: Callable[[torch.Tensor], torch.Tensor] | None = None, distill_weight: float = 0.5,
                progress: str | None = None, lr_param: str = "train.optimizer.lr in the recipe",
                interpolation: str = INTERPOLATION) -> Trained:
    """The training loop of `train_standalone`, without the evaluation (see there).

    `teacher` (a function of the same inputs, e.g. a larger model in eval mode) adds in-place
    distillation: the loss is `(1 - distill_weight)` times the label loss plus `distill_weight`
    times the cross-entropy against the teacher's probabilities. `save_every_steps` also saves the
    partial state every that many steps; `progress` names a progress bar on stderr (None: none);
    `lr_param` is what a diverging training advises lowering (the setting its rate came from).
    """
    cfg = recipe.train
    data = as_source(data, recipe.data)
    total = total_steps(recipe, data)
    variant = choose_variant(model, cfg, total, torch.get_num_threads())
    recipe = replace(recipe, train=replace(cfg, precision="bf16" if variant.bf16 else "fp32"))   # what train_step runs
    model = model.to(memory_format=variant.memory_format).train()
    forward = forward_of(model, variant)
    optimizer = build_optimizer(model, cfg)
    scheduler = build_scheduler(optimizer, cfg, total)
    save_every_s = PARTIAL_EVERY_S if save_every_s is None else save_every_s
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(seed, "standalone"))
        start, spent = _resume(partial, model, optimizer)
        started = saved = time.perf_counter()
        bar = progress_bar(progress, total, start)
        for step, (images, labels) in enumerate(_batches(recipe, data, seed, total, start), start):
            scheduler.step_update(step)
            images = resize(images, resolution, interpolation).contiguous(memory_format=variant.memory_format)
            loss = train_step(forward, model, optimizer, recipe, images, labels,
                              None if teacher is None else _soft_targets(teacher, images), distill_weight)
            if not torch.isfinite(loss):
                raise TrainingDiverged(diverged_message(step, lr_param, cfg.grad_clip))
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)
            now = time.perf_counter()
            due = now - saved >= save_every_s or (save_every_steps is not None and (step + 1) % save_every_steps == 0)
            if partial is not None and step + 1 < total and due:
                save_checkpoint({"step": step + 1, "seconds": spent + now - started,
                                 "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                 "rng": rng_state()}, partial)
                saved = time.perf_counter()
        if bar is not None:
            bar.close()
    return Trained(total, start, round(spent + time.perf_counter() - started, 2), variant)


def diverged_message(step: int, lr_param: str, grad_clip: GradClipConfig) -> str:
    """What a non-finite loss at `step` says: lower the rate `lr_param` names, and enable
    `train.grad_clip` only where it is off."""
    clipped = grad_clip.value is not None or grad_clip.norm is not None
    return (f"standalone training: non-finite loss at step {step}; lower {lr_param}"
            + ("" if clipped else " or enable train.grad_clip"))


def progress_bar(description: str | None, total: int, start: int) -> Any:
    """A tqdm bar on stderr from `start` of `total` steps, or None without a description."""
    if description is None:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=start, desc=description, unit="step", file=sys.stderr, dynamic_ncols=True)


def _soft_targets(teacher: Callable[[torch.Tensor], torch.Tensor], images: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return F.softmax(teacher(images).float(), dim=1)


def train_step(forward: Callable[[torch.Tensor], torch.Tensor], model: nn.Module, optimizer: torch.optim.Optimizer,
               recipe: Recipe, images: torch.Tensor, labels: torch.Tensor, soft_targets: torch.Tensor | None = None,
               distill_weight: float = 0.5) -> torch.Tensor:
    """One optimiser step of standalone training (`forward` is `model` or its compiled forward);
    returns the loss. With `soft_targets` (a teacher's probabilities) the loss mixes the label
    loss and the cross-entropy against them by `distill_weight`. A non-finite loss leaves the
    weights as they were."""
    optimizer.zero_grad(set_to_none=True)
    with bf16_autocast(recipe.train.precision == "bf16"):
        logits = forward(images)
    # int labels, or mixup/cutmix's soft targets: the strategy's label loss either way
    loss = F.cross_entropy(logits.float(), labels, label_smoothing=recipe.label_smoothing)
    if soft_targets is not None:
        distilled = -(soft_targets * F.log_softmax(logits.float(), dim=1)).sum(1).mean()
        loss = (1 - distill_weight) * loss + distill_weight * distilled
    if torch.isfinite(loss):
        loss.backward()
        clip_gradients(model, recipe.train.grad_clip)
        optimizer.step()
    return loss.detach()


def evaluate_standalone(model: nn.Module, recipe: Recipe, data: ImageSplits | DataSource, seed: int,
                        resolution: int, interpolation: str = INTERPOLATION) -> Accuracy:
    """BN recalibration on seeded training images, then test top-1/top-5 with the export's
    preprocessing (in-memory data exactly; streamed data normalised first, then resized)."""
    e = recipe.eval
    data = as_source(data, recipe.data)
    calibration = [resize(x, resolution, interpolation) for x, _ in
                   data.calibration_batches(e.bn_recal_batches, e.bn_recal_batch_size, seed)]
    recalibrate_bn(model, calibration)
    model.eval()
    if isinstance(data, InMemorySource):
        return static_accuracy(model, data.splits, "test", resolution, e.batch_size, interpolation)
    return accuracy(model, ((resize(x, resolution, interpolation), y)
                            for x, y in data.eval_batches("test", e.batch_size)))
