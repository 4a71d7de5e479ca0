"""The streaming data path: batches read through a `torch.utils.data.DataLoader`.

ImageFolder images are decoded lazily, one per sample, in `data.workers` worker processes, so
memory stays bounded whatever the size of the tree. The batch sampler follows the in-memory
path's rules (see `nas.engine.data.sources`): epoch e's order is the permutation of (seed, e); like
a `DistributedSampler` each DDP rank reads a disjoint shard of it, here its contiguous rows of
every global batch, so the ranks' batches of step t make up the one-process batch of step t;
a resumed run starts the sampler at its step. Without per-image transforms, samples stay uint8
and each batch is augmented (crop/flip of the global batch) and normalised in the main
process, exactly as in memory. With them (timm), each image is transformed in its worker under
a seed derived from (seed, epoch, step, position), so the result does not depend on workers.
"""
from __future__ import annotations

import os
import signal
from typing import Iterable, Iterator, Sequence

import torch
from torch.utils.data import DataLoader

from nas.core.config import AugmentConfig, DataConfig
from nas.core.errors import DataError, clip
from nas.core.rng import torch_generator
from nas.engine.data.augment import batch_mixer, image_transform
from nas.engine.data.batches import (
    Augment,
    augment_generator,
    augment_rows,
    calibration_indices,
    epoch_order,
    epoch_slice,
    normalize,
    rank_share,
)
from nas.engine.data.datasets import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    SPLITS,
    _is_int,
    list_imagefolder,
    load_dataset,
    split_indices,
)
from nas.engine.data.images import FileImages, ImageSet, SampleDataset, TensorImages, checked, collate
from nas.engine.data.sources import Batch, DataSource, mix, sample_order
from nas.engine.data.workers import WorkerPass, stop_workers, when_gone


class EpochSampler:
    """Batch sampler of one epoch: for each step, this rank's sample keys of the global batch.

    Keys are indices, or (index, seed) pairs when images get a random per-image transform; the
    seed of a position is drawn from the (seed, epoch, step) generator for the whole global
    batch, so it does not depend on the number of ranks.
    """

    def __init__(self, num_images: int, batch_size: int, seed: int, epoch: int, steps: range, lo: int, hi: int,
                 keyed: bool):
        self.num_images, self.batch_size, self.seed, self.epoch = num_images, batch_size, seed, epoch
        self.steps, self.lo, self.hi, self.keyed = steps, lo, hi, keyed

    def __len__(self) -> int:
        return len(self.steps)

    def __iter__(self) -> Iterator[list]:
        order = epoch_order(self.num_images, self.seed, self.epoch)
        for step in self.steps:
            start = step * self.batch_size
            indices = order[start + self.lo: start + self.hi].tolist()
            if not self.keyed:
                yield indices
                continue
            generator = torch_generator(self.seed, "data.sample", self.epoch, step)
            seeds = torch.randint(2**62, (self.batch_size,), generator=generator)[self.lo:self.hi].tolist()
            yield list(zip(indices, seeds))


def _worker_init(worker_id: int) -> None:
    """Workers decode images; one torch thread each keeps them from oversubscribing the cores.

    They ignore SIGINT and SIGTERM: Ctrl-C reaches the whole process group, and a worker that
    quit would break the batches the main process still reads while it finishes its step (or
    evaluation) and writes its checkpoint; the main process stops the workers itself.
    """
    del worker_id
    torch.set_num_threads(1)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)


class StreamingSource(DataSource):
    """Batches read through a DataLoader from per-image `ImageSet`s (train, val, test)."""

    streams = True

    def __init__(self, name: str, num_classes: int, mean: Sequence[float], std: Sequence[float],
                 images: dict[str, ImageSet], image_size: int, in_chans: int, augment: AugmentConfig,
                 workers: int = 0, pin_memory: bool = False):
        self.name, self.num_classes, self.mean, self.std = name, num_classes, tuple(mean), tuple(std)
        self.images, self.image_size, self.in_chans = images, image_size, in_chans
        self.transform = image_transform(augment, image_size, mean, std)
        self.batch_augment = Augment(augment.crop_padding, augment.hflip) if self.transform is None else None
        self.mixer = batch_mixer(augment, num_classes)
        self.workers, self.pin_memory = workers, pin_memory
        self._plain_loaders: dict[tuple, DataLoader] = {}
        # Kept workers ignore SIGTERM (see `_worker_init`): stop them when the source is
        # collected or at exit, as a `WorkerPass` stops its own (see `nas.engine.data.workers`).
        when_gone(self, _close_loaders, self._plain_loaders)

    @property
    def num_train(self) -> int:
        return len(self.images["train"])

    def _loader(self, dataset: SampleDataset, batches: Iterable, pin: bool = False,
                persistent: bool = False) -> DataLoader:
        # Its own generator: a DataLoader draws its workers' base seed at every pass, which would
        # otherwise advance the global torch RNG (samples are seeded from their keys anyway).
        return DataLoader(dataset, batch_sampler=batches, num_workers=self.workers, collate_fn=collate,
                          pin_memory=pin and self.pin_memory, worker_init_fn=_worker_init if self.workers else None,
                          generator=torch.Generator().manual_seed(0),
                          persistent_workers=persistent and self.workers > 0)

    def _pinned(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.pin_memory() if self.pin_memory and not tensor.is_pinned() else tensor

    def train_batches(self, batch_size: int, seed: int, epoch: int, start_step: int = 0, rank: int = 0,
                      world_size: int = 1) -> Iterator[Batch]:
        steps, lo, hi = epoch_slice(self.num_train, batch_size, start_step, rank, world_size)
        sampler = EpochSampler(self.num_train, batch_size, seed, epoch, steps, lo, hi, self.transform is not None)
        return mix(self._train_iter(sampler), self.mixer, seed, epoch, steps)

    def _train_iter(self, sampler: EpochSampler) -> Iterator[Batch]:
        dataset = SampleDataset(self.images["train"], self.transform)
        loader = self._loader(dataset, sampler, pin=self.transform is not None)
        for step, batch in zip(sampler.steps, WorkerPass(loader)):
            images, labels = checked(batch)
            if self.transform is None:      # uint8: augment the global batch's rows, then normalise
                generator = augment_generator(sampler.seed, sampler.epoch, step)
                images = augment_rows(images, self.batch_augment, sampler.batch_size, generator, sampler.lo)
                images = normalize(images, self.mean, self.std)
            yield self._pinned(images), self._pinned(labels)

    def _plain(self, split: str, batches: list[Sequence[int]]) -> Iterator[Batch]:
        """Normalised batches of `split`'s images at the given index batches, no augmentation.

        The same batches are read at every evaluation, so their loader and its workers are kept.
        """
        key = (split, tuple(tuple(batch) for batch in batches))
        if key not in self._plain_loaders:
            self._plain_loaders[key] = self._loader(SampleDataset(self.images[split]), batches, persistent=True)
        for batch in self._plain_loaders[key]:
            images, labels = checked(batch)
            yield self._pinned(normalize(images, self.mean, self.std)), self._pinned(labels)

    def close(self) -> None:
        _close_loaders(self._plain_loaders)

    def calibration_batches(self, num_batches: int, batch_size: int, seed: int, rank: int = 0,
                            world_size: int = 1) -> Iterator[Batch]:
        indices = calibration_indices(self.num_train, num_batches, batch_size, seed)
        return self._plain("train", rank_share([idx.tolist() for idx in indices], rank, world_size))

    def sample_batches(self, split: str, count: int, batch_size: int, seed: int) -> list[Batch]:
        batches = [idx.tolist() for idx in sample_order(len(self.images[split]), count, batch_size, seed, split)]
        loader = self._loader(SampleDataset(self.images[split]), batches)     # read once: no kept workers
        return [(normalize(images, self.mean, self.std), labels)
                for images, labels in map(checked, WorkerPass(loader))]

    def eval_batches(self, split: str, batch_size: int) -> Iterator[Batch]:
        if split not in SPLITS:
            raise DataError(f"unknown split {clip(split)!r} (allowed: {', '.join(SPLITS)})")
        if not _is_int(batch_size, 1):
            raise DataError(f"batch_size: must be an integer >= 1, got {clip(batch_size)}")
        count = len(self.images[split])
        return self._plain(split, [range(start, min(start + batch_size, count))
                                   for start in range(0, count, batch_size)])


def _close_loaders(loaders: dict[tuple, DataLoader]) -> None:
    """Stop the workers of persistent loaders and forget them."""
    for loader in loaders.values():
        iterator = getattr(loader, "_iterator", None)      # a persistent loader keeps its workers in it
        if iterator is not None:
            stop_workers(iterator)
    loaders.clear()


def usable_workers(asked: int) -> int:
    """`asked` worker processes, at most one per CPU this process may run on: more only queue
    behind each other (and make torch warn). Batches do not depend on the number of workers."""
    return min(asked, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def streaming_source(config: DataConfig, pin_memory: bool = False) -> StreamingSource:
    """The streaming source of a `data` config: ImageFolder files listed (not decoded), or
    Fashion-MNIST/CIFAR arrays read whole and served per image."""
    common = {"augment": config.augment, "workers": usable_workers(config.workers), "pin_memory": pin_memory}
    if config.name == "imagefolder":
        files = list_imagefolder(config.root)
        train_idx, val_idx = split_indices(len(files.train), config.val_size, config.train_size, config.split_seed)
        size = config.image_size

        def subset(indices: torch.Tensor) -> FileImages:
            return FileImages([files.train[i] for i in indices.tolist()], size)

        images = {"train": subset(train_idx), "val": subset(val_idx), "test": FileImages(files.test, size)}
        return StreamingSource("imagefolder", len(files.classes), IMAGENET_MEAN, IMAGENET_STD, images, size, 3,
                               **common)
    splits = load_dataset(config.name, config.root, config.val_size, config.train_size, config.split_seed,
                          config.image_size)
    images = {split: TensorImages(*splits.split(split)) for split in SPLITS}
    return StreamingSource(splits.name, splits.num_classes, splits.mean, splits.std, images, splits.image_size,
                           splits.in_chans, **common)
