"""Datasets held in memory as uint8 tensors: Fashion-MNIST, CIFAR-10/100, ImageFolder.

`load_dataset` reads Fashion-MNIST (IDX .gz files, never downloaded), CIFAR-10/100 (the
extracted python pickles, via torchvision, never downloaded) or an ImageFolder tree into an
`ImageSplits`: uint8 N×C×H×W images with int64 labels for train, val and test. The validation
split is a fixed seeded subset of the training images whatever `train_size` is.
"""
from __future__ import annotations

import functools
import gzip
import os
import pickle
import zlib
from dataclasses import dataclass

import numpy as np
import torch

from nas.core.errors import DataError, clip
from nas.core.preprocessing import resize
from nas.core.rng import torch_generator

FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
DATASETS = ("fashion_mnist", "cifar10", "cifar100", "imagefolder")
SPLITS = ("train", "val", "test")

# Per-channel statistics for inputs scaled to [0, 1]. Fashion-MNIST: mean and (population)
# std of all pixels of the 60k training images, rounded to 4 digits (checked by the tests).
FASHION_MNIST_MEAN, FASHION_MNIST_STD = (0.2860,), (0.3530,)
_C10 = CIFAR10_MEAN, CIFAR10_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
_C100 = CIFAR100_MEAN, CIFAR100_STD = (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)

_FASHION_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
_CIFAR = {  # name -> (torchvision class, extracted folder, archive, classes, mean, std)
    "cifar10": ("CIFAR10", "cifar-10-batches-py", "cifar-10-python.tar.gz", 10, *_C10),
    "cifar100": ("CIFAR100", "cifar-100-python", "cifar-100-python.tar.gz", 100, *_C100),
}


def _tail(path: str, limit: int = 80) -> str:
    """`path` cut at the front to `limit` characters, so the file name stays visible."""
    path = str(path)
    return path if len(path) <= limit else "..." + path[3 - limit:]


def _is_int(value: object, low: int, high: int | None = None) -> bool:
    """Whether `value` is an int (not a bool) in [low, high]."""
    return (isinstance(value, int) and not isinstance(value, bool) and value >= low
            and (high is None or value <= high))


@dataclass(frozen=True, eq=False)  # eq=False: `==` on tensor fields would be ambiguous
class ImageSplits:
    """Images held in memory as uint8 N×C×H×W tensors with int64 labels."""

    name: str
    num_classes: int
    mean: tuple[float, ...]  # per channel, for inputs scaled to [0, 1]
    std: tuple[float, ...]
    train_images: torch.Tensor
    train_labels: torch.Tensor
    val_images: torch.Tensor
    val_labels: torch.Tensor
    test_images: torch.Tensor
    test_labels: torch.Tensor

    def __post_init__(self) -> None:
        chans = len(self.mean)
        if len(self.std) != chans:
            raise DataError(f"{self.name}: mean has {chans} channels but std has {len(self.std)}")
        for split in SPLITS:
            images, labels = self.split(split)
            if images.dtype != torch.uint8 or images.ndim != 4 or images.shape[1] != chans:
                raise DataError(f"{self.name}: {split} images must be uint8 N×{chans}×H×W, got "
                                f"{images.dtype} {tuple(images.shape)}")
            if labels.dtype != torch.int64 or labels.shape != (images.shape[0],):
                raise DataError(f"{self.name}: {split} labels must be int64 of length "
                                f"{images.shape[0]}, got {labels.dtype} {tuple(labels.shape)}")

    @property
    def in_chans(self) -> int:
        """Number of image channels (1 for Fashion-MNIST, 3 otherwise)."""
        return int(self.train_images.shape[1])

    @property
    def image_size(self) -> int:
        """Height (= width) of the images."""
        return int(self.train_images.shape[2])

    def split(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Images and labels of split `name` ("train", "val" or "test"; else `DataError`)."""
        if name not in SPLITS:
            raise DataError(f"unknown split {clip(name)!r} (allowed: {', '.join(SPLITS)})")
        return getattr(self, f"{name}_images"), getattr(self, f"{name}_labels")


def load_dataset(name: str, root: str | None = None, val_size: int = 5000,
                 train_size: int | None = None, split_seed: int = 0,
                 image_size: int | None = None) -> ImageSplits:
    """Load a dataset into memory and carve the validation split out of its training images.

    Args:
        name: One of `DATASETS`.
        root: Dataset directory; None means `FASHION_MNIST_DIR` for fashion_mnist (required
            for the others).
        val_size: Images of the fixed, `split_seed`-seeded validation subset.
        train_size: Training images kept from those left (None: all of them).
        split_seed: Seed of the validation subset and of the training subset.
        image_size: Side of the images; required for imagefolder (resize of the shorter side
            and centre crop); for the others None keeps the native size and any other value
            resizes (bilinear, no antialias).

    Returns:
        The three splits; the test split is the dataset's own test (imagefolder: `val/`) set.

    Raises:
        DataError: unknown name, missing or corrupt files, or sizes out of range.
    """
    if name not in DATASETS:
        raise DataError(f"data.name: unknown dataset {clip(name)!r} (allowed: {', '.join(DATASETS)})")
    if image_size is not None and not _is_int(image_size, 1):
        raise DataError(f"data.image_size: must be an integer >= 1 or null, got {clip(image_size)}")
    if name == "fashion_mnist":
        loaded = _load_fashion_mnist(root if root is not None else FASHION_MNIST_DIR)
    elif name in _CIFAR:
        loaded = _load_cifar(name, root)
    else:
        loaded = _load_imagefolder(root, image_size)
    train_x, train_y, test_x, test_y, num_classes, mean, std = loaded
    if image_size is not None and image_size != train_x.shape[-1]:
        train_x, test_x = _resize(train_x, image_size), _resize(test_x, image_size)
    train_idx, val_idx = split_indices(len(train_x), val_size, train_size, split_seed)
    return ImageSplits(name=name, num_classes=num_classes, mean=mean, std=std,
                       train_images=train_x[train_idx], train_labels=train_y[train_idx],
                       val_images=train_x[val_idx], val_labels=train_y[val_idx],
                       test_images=test_x.clone(), test_labels=test_y.clone())


TRAINING_IMAGES = {"fashion_mnist": 60_000, "cifar10": 50_000, "cifar100": 50_000}     # before the val split


def training_images(name: str, val_size: int, train_size: int | None) -> int | None:
    """Training images a config's data split leaves (`data.train_size`, else the dataset's
    training set less `data.val_size`), read from the config alone; None for an ImageFolder
    without `train_size` (only its files tell)."""
    if name not in TRAINING_IMAGES:
        return train_size
    left = TRAINING_IMAGES[name] - val_size
    return left if train_size is None else min(train_size, left)


def split_indices(num_images: int, val_size: int, train_size: int | None = None,
                  split_seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices (sorted, int64) of the training and validation subsets of `num_images` images.

    The validation subset is the first `val_size` of a `split_seed`-seeded permutation, so it
    does not depend on `train_size`; the training subset is the next `train_size` of it.

    Raises:
        DataError: `val_size` or `train_size` out of range (names `data.val_size` / `data.train_size`).
    """
    if not _is_int(val_size, 1, num_images - 1):
        raise DataError(f"data.val_size: must be an integer from 1 to {num_images - 1} "
                        f"(the dataset has {num_images} training images), got {clip(val_size)}")
    left = num_images - val_size
    if train_size is not None and not _is_int(train_size, 1, left):
        raise DataError(f"data.train_size: must be null or an integer from 1 to {left} "
                        f"(images left after data.val_size={val_size}), got {clip(train_size)}")
    order = torch.randperm(num_images, generator=torch_generator(split_seed, "data.split"))
    val_idx = order[:val_size]
    train_idx = order[val_size:] if train_size is None else order[val_size:val_size + train_size]
    return train_idx.sort().values, val_idx.sort().values


def _missing_fashion(what: str) -> DataError:
    return DataError(f"data.root: Fashion-MNIST not found: {what}; install it with `sudo apt-get "
                     f"install dataset-fashion-mnist` or set data.root to a directory with the "
                     f"four IDX .gz files (train-images-idx3-ubyte.gz, ...)")


def _load_fashion_mnist(root: str) -> tuple:
    if not os.path.isdir(root):
        raise _missing_fashion(f"no directory {_tail(root)}")
    arrays = []
    for image_file, label_file in _FASHION_FILES.values():
        paths = [os.path.join(root, f) for f in (image_file, label_file)]
        for path in paths:
            if not os.path.isfile(path):
                raise _missing_fashion(f"{_tail(path)} is missing")
        images, labels = (_read_idx(p, (os.stat(p).st_size, os.stat(p).st_mtime_ns)) for p in paths)
        if len(images) != len(labels):
            raise DataError(f"{_tail(paths[1])}: {len(labels)} labels for {len(images)} images in "
                            f"{os.path.basename(paths[0])}")
        if len(labels) and int(labels.max()) > 9:
            raise DataError(f"{_tail(paths[1])}: label {int(labels.max())} out of range 0-9")
        arrays += [images.unsqueeze(1), labels.long()]
    return (*arrays, 10, FASHION_MNIST_MEAN, FASHION_MNIST_STD)


@functools.lru_cache(maxsize=8)
def _read_idx(path: str, stamp: tuple[int, int]) -> torch.Tensor:
    """A gzipped IDX file of uint8 images (N×H×W) or labels (N), cached per (path, size+mtime).

    Callers copy the result (by indexing or `clone`) before handing it out.
    """
    try:
        with gzip.open(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError, zlib.error) as e:
        raise DataError(f"{_tail(path)}: not a readable gzip file ({e})") from e
    magic = int.from_bytes(data[:4], "big") if len(data) >= 4 else None
    ndim = {2051: 3, 2049: 1}.get(magic)
    if ndim is None:
        raise DataError(f"{_tail(path)}: not an IDX uint8 image/label file (magic number {magic})")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DataError(f"{_tail(path)}: truncated IDX header")
    shape = tuple(int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    expected = header + int(np.prod(shape))
    if len(data) != expected:
        raise DataError(f"{_tail(path)}: {len(data) - header} data bytes, the header "
                        f"{shape} asks for {expected - header} (corrupt or truncated file)")
    array = np.frombuffer(data, dtype=np.uint8, offset=header).reshape(shape)
    return torch.from_numpy(array.copy())


def _load_cifar(name: str, root: str | None) -> tuple:
    import torchvision.datasets

    cls_name, folder, archive, num_classes, mean, std = _CIFAR[name]
    how = f"place the extracted '{folder}' folder (from {archive}) under data.root; nas never downloads"
    if root is None:
        raise DataError(f"data.root: required for {name}: {how}")
    out = []
    for train in (True, False):
        try:
            ds = getattr(torchvision.datasets, cls_name)(root, train=train, download=False)
        except (RuntimeError, OSError, EOFError, KeyError, ValueError, pickle.UnpicklingError) as e:
            raise DataError(f"data.root: {name} not found or corrupted under {_tail(root)} "
                            f"(torchvision checks each file's md5): {how}") from e
        images = torch.from_numpy(np.ascontiguousarray(ds.data)).permute(0, 3, 1, 2).contiguous()
        out += [images, torch.tensor(ds.targets, dtype=torch.int64)]
    return (*out, num_classes, mean, std)


@dataclass(frozen=True)
class ImageFolderFiles:
    """The image files of an ImageFolder tree (listed, not decoded)."""

    classes: list[str]                 # train/'s class folders, sorted: label i is classes[i]
    train: list[tuple[str, int]]       # (path, label) of train/<class>/*
    test: list[tuple[str, int]]        # (path, label) of val/<class>/* (or test/), with train/'s labels


def held_out_folder(root: str) -> str:
    """`val`, or `test` where a tree has a test/ folder and no val/ (CIFAR-10 as image files)."""
    has = {part: os.path.isdir(os.path.join(root, part)) for part in ("val", "test")}
    return "test" if has["test"] and not has["val"] else "val"


def list_imagefolder(root: str | None) -> ImageFolderFiles:
    """List `root/train/<class>/*` and `root/val/<class>/*` (val/ may lack classes, not add any;
    a tree with test/ and no val/ gives test/ instead).

    Raises:
        DataError: naming `data.root` when the tree is missing or malformed.
    """
    from torchvision import datasets

    if root is None:
        raise DataError("data.root: required for imagefolder (a directory with train/<class>/* "
                        "and val/<class>/*)")
    listed = []
    held_out = held_out_folder(root)
    for part in ("train", held_out):
        path = os.path.join(root, part)
        if not os.path.isdir(path):
            raise DataError(f"data.root: {_tail(path)} is not a directory (imagefolder needs "
                            f"{part}/<class>/<image files>)")
        try:
            listed.append(datasets.ImageFolder(path, allow_empty=part == held_out))
        except (FileNotFoundError, OSError) as e:
            raise DataError(f"data.root: {_tail(path)}: {str(e).splitlines()[0][:120]}") from e
    train, val = listed
    unknown = sorted(set(val.classes) - set(train.classes))
    if unknown:
        raise DataError(f"data.root: classes {clip(', '.join(unknown))} of {held_out}/ are not in train/")
    remap = [train.class_to_idx[c] for c in val.classes]
    return ImageFolderFiles(list(train.classes), [(p, int(y)) for p, y in train.samples],
                            [(p, remap[y]) for p, y in val.samples])


def load_rgb(path: str):
    """The image file at `path` as an RGB PIL image, fully decoded.

    Raises:
        DataError: one line naming the file when it cannot be read or decoded.
    """
    from PIL import Image

    try:
        with open(path, "rb") as f:
            image = Image.open(f)
            return image.convert("RGB")
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:
        reason = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
        raise DataError(f"{_tail(path)}: cannot decode image ({reason})") from e


@functools.lru_cache(maxsize=4)
def decode_transform(image_size: int):
    """PIL image -> uint8 3 x S x S tensor: resize the shorter side to S, crop the centre."""
    from torchvision import transforms

    return transforms.Compose([transforms.Resize(image_size), transforms.CenterCrop(image_size),
                               transforms.PILToTensor()])


def _load_imagefolder(root: str | None, image_size: int | None) -> tuple:
    if image_size is None:
        raise DataError("data.image_size: required for imagefolder (images are resized and "
                        "centre-cropped to image_size × image_size)")
    files = list_imagefolder(root)
    (train_x, train_y), (test_x, test_y) = (_decode_all(files.train, image_size),
                                            _decode_all(files.test, image_size))
    return train_x, train_y, test_x, test_y, len(files.classes), IMAGENET_MEAN, IMAGENET_STD


def _decode_all(samples: list[tuple[str, int]], size: int) -> tuple[torch.Tensor, torch.Tensor]:
    images = torch.empty((len(samples), 3, size, size), dtype=torch.uint8)
    tf = decode_transform(size)
    for i, (path, _) in enumerate(samples):  # decoding files is per-image work by nature
        images[i] = tf(load_rgb(path))
    return images, torch.tensor([label for _, label in samples], dtype=torch.int64)


def _resize(images: torch.Tensor, size: int, chunk: int = 4096) -> torch.Tensor:
    out = torch.empty((len(images), images.shape[1], size, size), dtype=torch.uint8)
    for start in range(0, len(images), chunk):
        x = images[start:start + chunk].float()
        out[start:start + chunk] = resize(x, size).round_().clamp_(0, 255).to(torch.uint8)
    return out


def dataset_info(name: str, root: str | None = None, image_size: int | None = None) -> tuple[int, int, int]:
    """(channels, classes, image side) of a dataset without loading its images."""
    if name == "fashion_mnist":
        return 1, 10, image_size if image_size is not None else 28
    if name in _CIFAR:
        return 3, _CIFAR[name][3], image_size if image_size is not None else 32
    if name == "imagefolder":
        if root is None:
            raise DataError("data.root: required for imagefolder (a directory with train/<class>/* and val/<class>/*)")
        train = os.path.join(root, "train")
        if not os.path.isdir(train):
            raise DataError(f"data.root: {_tail(train)} is not a directory (imagefolder needs "
                            "train/<class>/<image files>)")
        classes = [d for d in os.listdir(train) if os.path.isdir(os.path.join(train, d))]
        return 3, len(classes), image_size if image_size is not None else 224
    raise DataError(f"data.name: unknown dataset {clip(name)!r} (allowed: {', '.join(DATASETS)})")
