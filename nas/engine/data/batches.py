"""Deterministic, vectorised batching of in-memory datasets (see `nas.engine.data.datasets`).

`train_batches` yields the batches of one epoch. The order is a pure function of (seed, epoch)
and the augmentation of step t a pure function of (seed, epoch, t), drawn for the whole global
batch before each rank takes its contiguous slice, so a run resumed mid-epoch, or sharded over
ranks, sees exactly the same tensors. All randomness comes from explicit `torch.Generator`s.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from nas.core import preprocessing
from nas.core.errors import DataError, clip
from nas.core.rng import torch_generator
from nas.engine.data.datasets import ImageSplits, _is_int


@dataclass(frozen=True)
class Augment:
    """Training augmentation: random crop after zero-padding, and random horizontal flip."""

    crop_padding: int = 0
    hflip: bool = False

    def __post_init__(self) -> None:
        if not _is_int(self.crop_padding, 0):
            raise DataError(f"data.augment.crop_padding: must be an integer >= 0, "
                            f"got {clip(self.crop_padding)}")

    @property
    def active(self) -> bool:
        """Whether this augmentation changes anything."""
        return self.crop_padding > 0 or bool(self.hflip)


def normalize(images_uint8: torch.Tensor, mean: Sequence[float] | torch.Tensor,
              std: Sequence[float] | torch.Tensor) -> torch.Tensor:
    """Scale uint8 N×C×H×W images to [0, 1] and normalise per channel: ((x / 255) - mean) / std.

    Returns:
        A contiguous float32 tensor of the same shape.
    """
    channels = torch.as_tensor(mean).numel()
    if images_uint8.shape[-3] != channels:
        raise DataError(f"images have {images_uint8.shape[-3]} channels but mean/std have {channels}")
    return preprocessing.normalize(images_uint8.to(torch.float32).div_(255.0), mean, std).contiguous()


def steps_per_epoch(num_images: int, batch_size: int) -> int:
    """Full batches in an epoch of `num_images` images (the last partial batch is dropped).

    Raises:
        DataError: naming `train.batch_size` when it is < 1 or larger than `num_images`.
    """
    if not _is_int(batch_size, 1, num_images):
        raise DataError(f"train.batch_size: must be an integer from 1 to {num_images} (the "
                        f"number of training images), got {clip(batch_size)}")
    return num_images // batch_size


def crop_flip(images: torch.Tensor, offset_y: torch.Tensor, offset_x: torch.Tensor,
              flip: torch.Tensor | None, padding: int) -> torch.Tensor:
    """Vectorised per-sample crop of zero-padded N×C×H×W images, then per-sample hflip.

    Sample i of the result is `pad(images[i], padding)[:, oy:oy + H, ox:ox + W]` with
    (oy, ox) = (offset_y[i], offset_x[i]) in [0, 2 * padding], mirrored if `flip[i]`.
    """
    n, c, h, w = images.shape
    padded = F.pad(images, (padding,) * 4) if padding else images
    rows = offset_y[:, None] + torch.arange(h)  # N×H
    cols = offset_x[:, None] + torch.arange(w)  # N×W
    if flip is not None:
        cols = torch.where(flip[:, None], cols.flip(1), cols)
    return padded[torch.arange(n)[:, None, None, None], torch.arange(c)[None, :, None, None],
                  rows[:, None, :, None], cols[:, None, None, :]]


def draw_augment(augment: Augment, n: int, generator: torch.Generator
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Per-sample (offset_y, offset_x, flip) for `n` samples, drawn in that order from `generator`."""
    span = 2 * augment.crop_padding + 1
    offset_y = torch.randint(0, span, (n,), generator=generator)
    offset_x = torch.randint(0, span, (n,), generator=generator)
    flip = torch.rand(n, generator=generator) < 0.5 if augment.hflip else None
    return offset_y, offset_x, flip


def train_batches(splits: ImageSplits, batch_size: int, seed: int, epoch: int, start_step: int = 0,
                  augment: Augment | None = None, rank: int = 0, world_size: int = 1,
                  order: torch.Tensor | None = None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Normalised training batches of steps `start_step..steps_per_epoch - 1` of `epoch`.

    The order is `order` when given (image indices, e.g. drawn by importance), else a
    permutation that depends only on (seed, epoch); step t takes slice
    [t * batch_size, (t + 1) * batch_size) of it. The augmentation of step t depends only on
    (seed, epoch, t) and is drawn for the whole global batch; rank `rank` of `world_size` gets
    rows [rank * b, (rank + 1) * b) of it, b = batch_size // world_size. Arguments are checked
    at the call, before the first batch.

    Returns:
        An iterator of (float32 contiguous b×C×H×W images, int64 labels).

    Raises:
        DataError: bad batch size (names `train.batch_size`), rank or start step.
    """
    steps, lo, hi = epoch_slice(len(splits.train_images), batch_size, start_step, rank, world_size)
    return _train_iter(splits, batch_size, seed, epoch, steps, augment, lo, hi, order)


def epoch_slice(num_images: int, batch_size: int, start_step: int, rank: int, world_size: int
                ) -> tuple[range, int, int]:
    """The steps left in an epoch from `start_step`, and the rows [lo, hi) of each global batch
    that rank `rank` of `world_size` takes; checks every argument (see `train_batches`)."""
    steps = steps_per_epoch(num_images, batch_size)
    if not _is_int(world_size, 1) or not _is_int(rank, 0, world_size - 1):
        raise DataError(f"rank {clip(rank)} of world size {clip(world_size)} is out of range")
    if batch_size % world_size:
        raise DataError(f"train.batch_size: {batch_size} is not divisible by the "
                        f"{world_size} ranks (world size)")
    if not _is_int(start_step, 0, steps):
        raise DataError(f"start step {start_step} is outside the {steps} steps of an epoch")
    share = batch_size // world_size
    return range(start_step, steps), rank * share, (rank + 1) * share


def epoch_order(num_images: int, seed: int, epoch: int) -> torch.Tensor:
    """The training order of `epoch`: a permutation that depends only on (seed, epoch)."""
    return torch.randperm(num_images, generator=torch_generator(seed, "data.order", epoch))


def _train_iter(splits: ImageSplits, batch_size: int, seed: int, epoch: int, steps: range,
                augment: Augment | None, lo: int, hi: int, order: torch.Tensor | None = None
                ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    images, labels = splits.train_images, splits.train_labels
    order = epoch_order(len(images), seed, epoch) if order is None else order
    for step in steps:
        idx = order[step * batch_size + lo: step * batch_size + hi]
        x = augment_rows(images[idx], augment, batch_size, augment_generator(seed, epoch, step), lo)
        yield normalize(x, splits.mean, splits.std), labels[idx]


def augment_generator(seed: int, epoch: int, step: int) -> torch.Generator:
    """The generator of step `step`'s batch augmentation (crop offsets, flips)."""
    return torch_generator(seed, "data.augment", epoch, step)


def augment_rows(images: torch.Tensor, augment: Augment | None, n_global: int,
                 generator: torch.Generator, lo: int = 0) -> torch.Tensor:
    """Augment rows [lo, lo + len(images)) of a global batch of `n_global` uint8 images, drawing
    the crop offsets and flips of the whole global batch from `generator`."""
    if augment is None or not augment.active:
        return images
    oy, ox, flip = (t if t is None else t[lo:lo + len(images)]
                    for t in draw_augment(augment, n_global, generator))
    return crop_flip(images, oy, ox, flip, augment.crop_padding)


def eval_batches(images: torch.Tensor, labels: torch.Tensor, batch_size: int,
                 mean: Sequence[float] | torch.Tensor, std: Sequence[float] | torch.Tensor
                 ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Sequential normalised batches of `images`, keeping the last partial batch, no augmentation.

    Raises:
        DataError: `batch_size` < 1.
    """
    if not _is_int(batch_size, 1):
        raise DataError(f"batch_size: must be an integer >= 1, got {clip(batch_size)}")
    return ((normalize(images[start:start + batch_size], mean, std), labels[start:start + batch_size])
            for start in range(0, len(images), batch_size))


def calibration_batches(splits: ImageSplits, num_batches: int, batch_size: int, seed: int,
                        augment: Augment | None = None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A fixed `seed`-seeded subset of training images as normalised batches (BN recalibration).

    Takes min(num_batches * batch_size, number of training images) images, so the last batch
    may be partial when capped; augmentation, if any, is seeded by (seed, batch index).

    Raises:
        DataError: `num_batches` or `batch_size` < 1.
    """
    images, labels = splits.train_images, splits.train_labels
    batches = []
    for i, idx in enumerate(calibration_indices(len(images), num_batches, batch_size, seed)):
        gen = torch_generator(seed, "data.calibration_augment", i)
        x = augment_rows(images[idx], augment, len(idx), gen)
        batches.append((normalize(x, splits.mean, splits.std), labels[idx]))
    return batches


def calibration_indices(num_images: int, num_batches: int, batch_size: int, seed: int) -> list[torch.Tensor]:
    """Index batches of the fixed `seed`-seeded calibration subset (see `calibration_batches`).

    Raises:
        DataError: `num_batches` or `batch_size` < 1.
    """
    for key, value in (("num_batches", num_batches), ("batch_size", batch_size)):
        if not _is_int(value, 1):
            raise DataError(f"calibration {key}: must be an integer >= 1, got {clip(value)}")
    count = min(num_batches * batch_size, num_images)
    chosen = torch.randperm(num_images, generator=torch_generator(seed, "data.calibration"))[:count]
    return [chosen[start:start + batch_size] for start in range(0, count, batch_size)]


def rank_share(batches: list, rank: int, world_size: int) -> list:
    """Rank `rank`'s share of calibration batches under DDP: every `world_size`-th one when
    there are at least as many batches as ranks, else all of them (BN recalibration then
    all-reduces the statistics over ranks)."""
    return batches[rank::world_size] if len(batches) >= world_size else batches
