"""Per-image access for the streaming path: images read one at a time, inside DataLoader workers.

An `ImageSet` gives image i as a fixed-size uint8 tensor (no random transform: batches are
then augmented whole, exactly as the in-memory path does) or as a PIL image (for the per-image
timm transforms). `SampleDataset` keys samples by `index` or `(index, seed)`: the seed, a pure
function of (seed, epoch, step, position), drives that image's random transform. An image that
cannot be decoded comes back as an `Unreadable` marker instead of an exception (a worker's
exception would reach the user as a multi-line traceback), and `collate` passes the marker
on so the main process raises one line naming the file.
"""
from __future__ import annotations

import abc
import os
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset, default_collate

from nas.core.errors import DataError
from nas.engine.data.augment import seeded_globals
from nas.engine.data.datasets import decode_transform, load_rgb


class Unreadable(NamedTuple):
    """A sample (or batch) that could not be read: the one-line reason, naming the file."""

    message: str


class ImageSet(abc.ABC):
    """Labelled images addressed by position."""

    labels: np.ndarray   # int64

    def __len__(self) -> int:
        return len(self.labels)

    @abc.abstractmethod
    def uint8(self, index: int) -> torch.Tensor:
        """Image `index` as a uint8 C x S x S tensor (S the data's image size)."""

    @abc.abstractmethod
    def pil(self, index: int) -> Any:
        """Image `index` as a PIL image, before any resizing."""


class TensorImages(ImageSet):
    """Images already decoded into a uint8 N x C x H x W tensor (Fashion-MNIST, CIFAR)."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor):
        self.images, self.labels = images, labels.numpy()

    def uint8(self, index: int) -> torch.Tensor:
        return self.images[index]

    def pil(self, index: int) -> Any:
        from PIL import Image

        array = self.images[index].permute(1, 2, 0).numpy()
        return Image.fromarray(array[:, :, 0] if array.shape[2] == 1 else array)


class FileImages(ImageSet):
    """Image files decoded on demand: resize of the shorter side to `image_size`, centre crop.

    Paths are kept in one NumPy byte array rather than a list of str objects, so forked
    workers do not copy the listing page by page as they touch reference counts.
    """

    def __init__(self, samples: Sequence[tuple[str, int]], image_size: int):
        self.paths = np.array([os.fsencode(path) for path, _ in samples], dtype=np.bytes_)
        self.labels = np.array([label for _, label in samples], dtype=np.int64)
        self.image_size = image_size

    def path(self, index: int) -> str:
        return os.fsdecode(self.paths[index])

    def uint8(self, index: int) -> torch.Tensor:
        return decode_transform(self.image_size)(load_rgb(self.path(index)))

    def pil(self, index: int) -> Any:
        return load_rgb(self.path(index))


class SampleDataset(Dataset):
    """`images` as a map-style dataset keyed by `index` or `(index, seed)`.

    Without `transform` a sample is (uint8 image, label); with it, (transform(PIL image) run
    under `seeded_globals(seed)`, label).
    """

    def __init__(self, images: ImageSet, transform: Callable | None = None):
        self.images, self.transform = images, transform

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, key: int | tuple[int, int]) -> tuple[torch.Tensor, int] | Unreadable:
        index, seed = key if isinstance(key, tuple) else (key, None)
        label = int(self.images.labels[index])
        try:
            if self.transform is None:
                return self.images.uint8(index), label
            image = self.images.pil(index)
        except DataError as e:
            return Unreadable(str(e))
        with seeded_globals(seed if seed is not None else index):
            return self.transform(image), label


def collate(samples: list) -> list | Unreadable:
    """`default_collate` of the samples, or the first `Unreadable` among them."""
    for sample in samples:
        if isinstance(sample, Unreadable):
            return sample
    return default_collate(samples)


def checked(batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """A collated (images, labels) batch; an `Unreadable` one raises its one-line `DataError`."""
    if isinstance(batch, Unreadable):
        raise DataError(batch.message)
    images, labels = batch
    return images, labels
