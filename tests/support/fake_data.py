"""Small datasets written by tests, in the formats nas reads: CIFAR pickles and ImageFolder trees."""
from __future__ import annotations

import gzip
import os
import pickle
import struct
from pathlib import Path

import numpy as np

CLASSES = ("ant", "bee", "cow")
FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"


def write_idx(path, array: np.ndarray, magic: int | None = None, cut: int = 0) -> None:
    magic = magic or (2051 if array.ndim == 3 else 2049)
    payload = struct.pack(f">{1 + array.ndim}I", magic, *array.shape) + array.astype(np.uint8).tobytes()
    with gzip.open(path, "wb") as f:
        f.write(payload[: len(payload) - cut])


def fake_fashion_dir(root, n_train=40, n_test=12, seed=0):
    rng = np.random.default_rng(seed)
    arrays = {"train": (rng.integers(0, 256, (n_train, 28, 28)), rng.integers(0, 10, n_train)),
              "t10k": (rng.integers(0, 256, (n_test, 28, 28)), rng.integers(0, 10, n_test))}
    for prefix, (images, labels) in arrays.items():
        write_idx(root / f"{prefix}-images-idx3-ubyte.gz", images)
        write_idx(root / f"{prefix}-labels-idx1-ubyte.gz", labels)
    return arrays


def write_fashion_subset(root: Path, n_train: int = 64, n_test: int = 32) -> None:
    """The first images of the real Fashion-MNIST (random ones where it is not installed) as
    the four IDX files: the real format and content at a test's size."""
    if not os.path.isdir(FASHION_MNIST_DIR):
        fake_fashion_dir(root, n_train, n_test)
        return
    from nas.engine.data.datasets import _FASHION_FILES, _read_idx

    for (images_file, labels_file), count in zip(_FASHION_FILES.values(), (n_train, n_test)):
        for name in (images_file, labels_file):
            path = os.path.join(FASHION_MNIST_DIR, name)
            array = _read_idx(path, (os.stat(path).st_size, os.stat(path).st_mtime_ns))[:count].numpy()
            write_idx(root / name, array)


def write_fake_cifar(root, name, per_file=4, n_test=6):
    """torchvision's extracted CIFAR-10/100 folder under `root` (random rows); returns what was written."""
    rng = np.random.default_rng(1)
    folder, files, label_key, meta = {
        "cifar10": ("cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"],
                    "labels", ("batches.meta", "label_names", 10)),
        "cifar100": ("cifar-100-python", ["train", "test"], "fine_labels",
                     ("meta", "fine_label_names", 100)),
    }[name]
    (root / folder).mkdir()
    written = {}
    for fname in files:
        n = n_test if "test" in fname else per_file
        rows = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        labels = rng.integers(0, meta[2], n).tolist()
        with open(root / folder / fname, "wb") as f:
            pickle.dump({"data": rows, label_key: labels}, f)
        written[fname] = (rows, labels)
    with open(root / folder / meta[0], "wb") as f:
        pickle.dump({meta[1]: [f"class{i}" for i in range(meta[2])]}, f)
    return written


def write_png_tree(root: Path, train_per_class: int = 12, val_per_class: int = 2, seed: int = 0,
                   corrupt: str | None = None) -> dict[str, np.ndarray]:
    """An ImageFolder tree of random-noise PNGs of odd sizes, 3 classes: `root/{train,val}/<class>/<n>.png`.

    Every image is different (noise), so a decoded image identifies its file. `corrupt`, a path
    relative to `root`, is overwritten with a truncated PNG. Returns the pixel arrays by relative path.
    """
    from PIL import Image

    rng = np.random.default_rng(seed)
    written = {}
    for part, count in (("train", train_per_class), ("val", val_per_class)):
        for c, name in enumerate(CLASSES):
            folder = root / part / name
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                height, width = 17 + 2 * ((i + c) % 5), 23 + 4 * (i % 3)     # odd sizes, several aspect ratios
                pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{i}.png")
                written[f"{part}/{name}/{i}.png"] = pixels
    if corrupt is not None:
        data = (root / corrupt).read_bytes()
        (root / corrupt).write_bytes(data[: len(data) // 2])
    return written
