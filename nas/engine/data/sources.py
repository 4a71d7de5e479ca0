"""Where batches come from: one small interface, two implementations.

`InMemorySource` cuts batches out of uint8 tensors held in memory (vectorised, see
`nas.engine.data.batches`); `StreamingSource` (`nas.engine.data.streaming`) reads images through a
`torch.utils.data.DataLoader` with worker processes. Both follow the same rules: the order of
epoch e is a pure function of (seed, e), batch augmentation of step t a pure function of
(seed, e, t), each DDP rank takes its contiguous rows of every global batch, and a run resumes
mid-epoch at a step offset; so for the same seed they give the same tensors unless a per-image
random transform (streaming only) is on. Batches are CPU tensors: the caller moves them to the
model's device.
"""
from __future__ import annotations

import abc
from typing import Callable, Iterable, Iterator

import torch

from nas.core.config import DataConfig
from nas.core.rng import torch_generator
from nas.engine.data.augment import BatchMixer, batch_mixer
from nas.engine.data.batches import (
    Augment,
    calibration_batches,
    epoch_slice,
    eval_batches,
    normalize,
    rank_share,
    train_batches,
)
from nas.engine.data.datasets import ImageSplits

Batch = tuple[torch.Tensor, torch.Tensor]


class DataSource(abc.ABC):
    """A dataset's train/val/test images, batched deterministically."""

    name: str
    num_classes: int
    mean: tuple[float, ...]     # per channel, for inputs scaled to [0, 1]
    std: tuple[float, ...]
    in_chans: int
    image_size: int
    streams = False             # True: batches are read again on every pass (nothing cached)

    @property
    @abc.abstractmethod
    def num_train(self) -> int:
        """Number of training images."""

    @abc.abstractmethod
    def train_batches(self, batch_size: int, seed: int, epoch: int, start_step: int = 0, rank: int = 0,
                      world_size: int = 1) -> Iterator[Batch]:
        """Normalised batches of steps `start_step..` of `epoch`: this rank's rows of each global
        batch. Labels are int64, or N x classes float targets when mixup/cutmix is on.

        Raises:
            DataError: bad batch size (names `train.batch_size`), rank or start step.
        """

    @abc.abstractmethod
    def calibration_batches(self, num_batches: int, batch_size: int, seed: int, rank: int = 0,
                            world_size: int = 1) -> Iterable[Batch]:
        """This rank's share of the fixed seeded training subset used for BN recalibration."""

    @abc.abstractmethod
    def eval_batches(self, split: str, batch_size: int) -> Iterator[Batch]:
        """Sequential normalised batches of `split` ("train", "val" or "test"), the last partial."""

    @abc.abstractmethod
    def sample_batches(self, split: str, count: int, batch_size: int, seed: int) -> list[Batch]:
        """`count` normalised batches of distinct random images of `split`, no augmentation: a
        pure function of the arguments (probes such as gradient matching draw them)."""

    def close(self) -> None:
        """Stop any worker processes the source keeps (it reopens them when read again)."""


def sample_order(num_images: int, count: int, batch_size: int, seed: int, split: str) -> list[torch.Tensor]:
    """The index batches `sample_batches` reads: a seeded permutation cut into batches."""
    order = torch.randperm(num_images, generator=torch_generator(seed, "data.sample", split))
    return list(order[: count * batch_size].split(batch_size))


def mix(batches: Iterable[Batch], mixer: BatchMixer | None, seed: int, epoch: int,
        steps: Iterable[int]) -> Iterator[Batch]:
    """`batches` (of steps `steps`) through `mixer`, when there is one."""
    if mixer is None:
        yield from batches
        return
    for step, (images, labels) in zip(steps, batches):
        yield mixer(images, labels, seed, epoch, step)


class InMemorySource(DataSource):
    """Batches cut from uint8 tensors in memory, augmented and normalised whole.

    `order_for(epoch)`, when set, gives each epoch's image order (`data.sampling: pada`).
    """

    order_for: Callable[[int], torch.Tensor] | None = None

    def __init__(self, splits: ImageSplits, augment: Augment | None = None, mixer: BatchMixer | None = None):
        self.splits, self.augment, self.mixer = splits, augment, mixer
        self.name, self.num_classes, self.mean, self.std = splits.name, splits.num_classes, splits.mean, splits.std
        self.in_chans, self.image_size = splits.in_chans, splits.image_size

    @property
    def num_train(self) -> int:
        return len(self.splits.train_labels)

    def train_batches(self, batch_size: int, seed: int, epoch: int, start_step: int = 0, rank: int = 0,
                      world_size: int = 1) -> Iterator[Batch]:
        order = self.order_for(epoch) if self.order_for is not None else None
        batches = train_batches(self.splits, batch_size, seed, epoch, start_step, self.augment, rank, world_size, order)
        steps, _, _ = epoch_slice(self.num_train, batch_size, start_step, rank, world_size)
        return mix(batches, self.mixer, seed, epoch, steps)

    def calibration_batches(self, num_batches: int, batch_size: int, seed: int, rank: int = 0,
                            world_size: int = 1) -> list[Batch]:
        return rank_share(calibration_batches(self.splits, num_batches, batch_size, seed), rank, world_size)

    def eval_batches(self, split: str, batch_size: int) -> Iterator[Batch]:
        images, labels = self.splits.split(split)
        return eval_batches(images, labels, batch_size, self.mean, self.std)

    def sample_batches(self, split: str, count: int, batch_size: int, seed: int) -> list[Batch]:
        images, labels = self.splits.split(split)
        return [(normalize(images[idx], self.mean, self.std), labels[idx])
                for idx in sample_order(len(labels), count, batch_size, seed, split)]


def in_memory_source(splits: ImageSplits, config: DataConfig | None = None) -> InMemorySource:
    """`splits` as a source, augmented as `config` says (no augmentation without a config)."""
    if config is None:
        return InMemorySource(splits)
    a = config.augment
    return InMemorySource(splits, Augment(a.crop_padding, a.hflip), batch_mixer(a, splits.num_classes))


def as_source(data: ImageSplits | DataSource, config: DataConfig | None = None) -> DataSource:
    """A source as given, or in-memory splits wrapped as one (see `in_memory_source`)."""
    return data if isinstance(data, DataSource) else in_memory_source(data, config)
