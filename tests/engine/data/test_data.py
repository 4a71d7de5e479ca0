"""Tests of `nas.engine.data.batches`: real Fashion-MNIST loading, fake CIFAR/ImageFolder trees, batching."""
from __future__ import annotations

import gzip
import os
import struct

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from nas.engine.data import batches as batching
from nas.engine.data import datasets
from nas.engine.data.batches import Augment
from nas.engine.data.datasets import DataError, ImageSplits
from tests.support.fake_data import fake_fashion_dir, write_fake_cifar, write_idx

FM_DIR = datasets.FASHION_MNIST_DIR
needs_fm = pytest.mark.skipif(not os.path.isdir(FM_DIR), reason="dataset-fashion-mnist not installed")


# ------------------------------------------------------------------------------ helpers
def parse_idx(path: str) -> np.ndarray:
    """Independent IDX reader (struct header + raw bytes)."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    magic, n = struct.unpack(">II", raw[:8])
    if magic == 2051:
        rows, cols = struct.unpack(">II", raw[8:16])
        return np.frombuffer(raw[16:], np.uint8).reshape(n, rows, cols)
    assert magic == 2049
    return np.frombuffer(raw[8:], np.uint8)


def make_splits(n=50, chans=3, size=8, seed=0) -> ImageSplits:
    """Synthetic splits whose labels are the image indices (to recover the order)."""
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, chans, size, size), dtype=torch.uint8, generator=g)
    small = images[:5].clone()
    return ImageSplits(name="synthetic", num_classes=n, mean=(0.5,) * chans, std=(0.25,) * chans,
                       train_images=images, train_labels=torch.arange(n),
                       val_images=small, val_labels=torch.arange(5),
                       test_images=small.clone(), test_labels=torch.arange(5))


def to_uint8(x: torch.Tensor, splits: ImageSplits) -> torch.Tensor:
    mean = torch.tensor(splits.mean).view(-1, 1, 1)
    std = torch.tensor(splits.std).view(-1, 1, 1)
    return ((x * std + mean) * 255).round().to(torch.uint8)


def epoch(splits, bs=8, seed=3, ep=0, **kw):
    return list(batching.train_batches(splits, bs, seed, ep, **kw))


def assert_batches_equal(a, b):
    assert len(a) == len(b)
    for (xa, ya), (xb, yb) in zip(a, b):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)


@pytest.fixture(scope="module")
def fm() -> ImageSplits:
    return datasets.load_dataset("fashion_mnist")


@pytest.fixture(scope="module")
def raw_train() -> tuple[np.ndarray, np.ndarray]:
    return (parse_idx(os.path.join(FM_DIR, "train-images-idx3-ubyte.gz")),
            parse_idx(os.path.join(FM_DIR, "train-labels-idx1-ubyte.gz")))


# ------------------------------------------------------------------------- Fashion-MNIST
@needs_fm
def test_fashion_mnist_shapes(fm):
    assert (fm.name, fm.num_classes, fm.in_chans, fm.image_size) == ("fashion_mnist", 10, 1, 28)
    for split, n in (("train", 55000), ("val", 5000), ("test", 10000)):
        images, labels = fm.split(split)
        assert images.shape == (n, 1, 28, 28) and images.dtype == torch.uint8
        assert labels.shape == (n,) and labels.dtype == torch.int64
        assert set(labels.tolist()) == set(range(10))


@needs_fm
def test_splits_match_independent_parse(fm, raw_train):
    images, labels = raw_train
    train_idx, val_idx = datasets.split_indices(60000, 5000, None, 0)
    assert np.array_equal(fm.val_images[:, 0].numpy(), images[val_idx.numpy()])
    assert np.array_equal(fm.train_labels.numpy(), labels[train_idx.numpy()])
    assert np.array_equal(fm.train_images[:, 0].numpy(), images[train_idx.numpy()])
    # one test record parsed with struct offsets only
    k = 1234
    with gzip.open(os.path.join(FM_DIR, "t10k-images-idx3-ubyte.gz")) as f:
        raw_img = f.read()
    with gzip.open(os.path.join(FM_DIR, "t10k-labels-idx1-ubyte.gz")) as f:
        raw_lab = f.read()
    assert struct.unpack(">IIII", raw_img[:16]) == (2051, 10000, 28, 28)
    assert fm.test_images[k, 0].flatten().tolist() == list(raw_img[16 + 784 * k: 16 + 784 * (k + 1)])
    assert int(fm.test_labels[k]) == raw_lab[8 + k]


@needs_fm
def test_mean_std_are_the_training_statistics(raw_train):
    counts = np.bincount(raw_train[0].ravel(), minlength=256).astype(np.float64)
    values = np.arange(256) / 255
    mean = (counts * values).sum() / counts.sum()
    std = np.sqrt((counts * (values - mean) ** 2).sum() / counts.sum())
    assert datasets.FASHION_MNIST_MEAN == (round(mean, 4),) and datasets.FASHION_MNIST_STD == (round(std, 4),)


@needs_fm
def test_val_split_is_disjoint_fixed_and_independent_of_train_size(fm):
    train_idx, val_idx = datasets.split_indices(60000, 5000, None, 0)
    assert len(set(train_idx.tolist()) | set(val_idx.tolist())) == 60000
    small_train, small_val = datasets.split_indices(60000, 5000, 1000, 0)
    assert torch.equal(small_val, val_idx)
    assert len(small_train) == 1000 and set(small_train.tolist()) <= set(train_idx.tolist())
    assert not torch.equal(datasets.split_indices(60000, 5000, None, 1)[1], val_idx)
    small = datasets.load_dataset("fashion_mnist", train_size=1000)
    assert torch.equal(small.val_images, fm.val_images) and torch.equal(small.val_labels, fm.val_labels)
    assert small.train_images.shape[0] == 1000 and torch.equal(small.test_images, fm.test_images)


@needs_fm
@pytest.mark.parametrize("kwargs, key", [({"val_size": 0}, "data.val_size"),
                                         ({"val_size": 60000}, "data.val_size"),
                                         ({"val_size": True}, "data.val_size"),
                                         ({"train_size": 0}, "data.train_size"),
                                         ({"val_size": 5000, "train_size": 55001}, "data.train_size")])
def test_bad_sizes_name_the_key(kwargs, key):
    with pytest.raises(DataError, match=key) as err:
        datasets.load_dataset("fashion_mnist", **kwargs)
    assert "from 1 to" in str(err.value) and "\n" not in str(err.value)


def test_missing_fashion_mnist(tmp_path):
    for root in (tmp_path / "nope", tmp_path):
        with pytest.raises(DataError) as err:
            datasets.load_dataset("fashion_mnist", root=str(root))
        msg = str(err.value)
        assert "apt-get install dataset-fashion-mnist" in msg and "data.root" in msg and "\n" not in msg


def test_fake_fashion_dir_loads_exactly(tmp_path):
    arrays = fake_fashion_dir(tmp_path)
    splits = datasets.load_dataset("fashion_mnist", root=str(tmp_path), val_size=10, split_seed=5)
    train_idx, val_idx = datasets.split_indices(40, 10, None, 5)
    images, labels = arrays["train"]
    assert np.array_equal(splits.val_images[:, 0].numpy(), images[val_idx.numpy()])
    assert np.array_equal(splits.train_labels.numpy(), labels[train_idx.numpy()])
    assert np.array_equal(splits.test_images[:, 0].numpy(), arrays["t10k"][0])
    resized = datasets.load_dataset("fashion_mnist", root=str(tmp_path), val_size=10, image_size=14)
    assert resized.image_size == 14 and resized.test_images.shape == (12, 1, 14, 14)


@pytest.mark.parametrize("fault, words", [("cut", "truncated"), ("magic", "magic number"),
                                          ("count", "labels for"), ("gzip", "gzip")])
def test_corrupt_idx_file_is_named(tmp_path, fault, words):
    arrays = fake_fashion_dir(tmp_path)
    images, labels = arrays["train"]
    target = tmp_path / "train-images-idx3-ubyte.gz"
    if fault == "cut":
        write_idx(target, images, cut=100)
    elif fault == "magic":
        write_idx(target, images, magic=1234)
    elif fault == "count":
        target = tmp_path / "train-labels-idx1-ubyte.gz"
        write_idx(target, labels[:-1])
    else:
        target.write_bytes(b"not gzip at all")
    with pytest.raises(DataError, match=words) as err:
        datasets.load_dataset("fashion_mnist", root=str(tmp_path), val_size=10)
    assert target.name in str(err.value)


def test_unknown_dataset_and_split():
    with pytest.raises(DataError, match="data.name") as err:
        datasets.load_dataset("mnist2")
    assert all(name in str(err.value) for name in datasets.DATASETS)
    with pytest.raises(DataError, match="'bogus'.*train, val, test"):
        make_splits().split("bogus")


# ------------------------------------------------------------------------ CIFAR (fake)
@pytest.mark.parametrize("name, train_files", [("cifar10", [f"data_batch_{i}" for i in range(1, 6)]),
                                               ("cifar100", ["train"])])
def test_fake_cifar_loads(tmp_path, monkeypatch, name, train_files):
    import torchvision.datasets.cifar as tv_cifar

    written = write_fake_cifar(tmp_path, name)
    # torchvision always checks md5 sums (download or not): fake files cannot pass it.
    folder = "cifar-10-batches-py" if name == "cifar10" else "cifar-100-python"
    with pytest.raises(DataError, match=f"data.root: {name} not found.*{folder}"):
        datasets.load_dataset(name, root=str(tmp_path), val_size=2)
    monkeypatch.setattr(tv_cifar, "check_integrity", lambda *args, **kwargs: True)
    splits = datasets.load_dataset(name, root=str(tmp_path), val_size=2)
    rows = np.concatenate([written[f][0] for f in train_files])
    labels = sum((written[f][1] for f in train_files), [])
    train_idx, val_idx = datasets.split_indices(len(rows), 2, None, 0)
    expected = torch.from_numpy(rows.reshape(-1, 3, 32, 32))  # CIFAR rows are R, G, B planes
    assert splits.num_classes == (10 if name == "cifar10" else 100)
    assert (splits.in_chans, splits.image_size, len(splits.mean)) == (3, 32, 3)
    assert torch.equal(splits.train_images, expected[train_idx])
    assert torch.equal(splits.val_labels, torch.tensor(labels)[val_idx])
    test_rows, test_labels = written["test_batch" if name == "cifar10" else "test"]
    assert torch.equal(splits.test_images, torch.from_numpy(test_rows.reshape(-1, 3, 32, 32)))
    assert splits.test_labels.tolist() == test_labels


def test_cifar_missing(tmp_path):
    for root in (None, str(tmp_path)):
        with pytest.raises(DataError, match="cifar-10-batches-py.*data.root.*never downloads"):
            datasets.load_dataset("cifar10", root=root)
    assert not any(tmp_path.iterdir())  # nothing was downloaded


# ------------------------------------------------------------------- ImageFolder (fake)
def write_image_tree(root):
    from PIL import Image

    colours = {"cat": (255, 0, 0), "dog": (0, 0, 255), "eel": (0, 255, 0)}
    for part, classes, count in (("train", ["cat", "dog", "eel"], 3), ("val", ["dog", "eel"], 2)):
        for cls in classes:
            (root / part / cls).mkdir(parents=True)
            for i in range(count):
                size = (20 + 3 * i, 12 + i)
                Image.new("RGB", size, colours[cls]).save(root / part / cls / f"{i}.png")
    Image.new("L", (9, 30), 128).save(root / "train" / "cat" / "grey.png")


def test_image_folder_loads(tmp_path):
    write_image_tree(tmp_path)
    splits = datasets.load_dataset("imagefolder", root=str(tmp_path), image_size=8, val_size=2)
    assert (splits.num_classes, splits.in_chans, splits.image_size) == (3, 3, 8)
    assert splits.train_images.shape == (8, 3, 8, 8) and splits.val_images.shape == (2, 3, 8, 8)
    assert splits.test_images.shape == (4, 3, 8, 8)
    assert sorted(splits.test_labels.tolist()) == [1, 1, 2, 2]  # val/ lacks 'cat': train's indices kept
    colours = {1: (0, 0, 255), 2: (0, 255, 0)}
    for image, label in zip(splits.test_images, splits.test_labels.tolist()):
        solid = torch.tensor(colours[label], dtype=torch.uint8).view(3, 1, 1).expand(3, 8, 8)
        assert torch.equal(image, solid)
    assert splits.mean == datasets.IMAGENET_MEAN
    all_train = torch.cat([splits.train_images, splits.val_images])
    assert (all_train == 128).all(dim=(1, 2, 3)).sum() == 1  # grey image converted to RGB


def test_an_image_folder_with_test_and_no_val_holds_out_test(tmp_path):
    """CIFAR-10 as image files comes as train/ and test/: test/ is the held-out split then."""
    write_image_tree(tmp_path)
    expected = datasets.load_dataset("imagefolder", root=str(tmp_path), image_size=8, val_size=2)
    (tmp_path / "val").rename(tmp_path / "test")
    splits = datasets.load_dataset("imagefolder", root=str(tmp_path), image_size=8, val_size=2)
    assert torch.equal(splits.test_images, expected.test_images)
    assert torch.equal(splits.test_labels, expected.test_labels)


def test_image_folder_errors(tmp_path):
    with pytest.raises(DataError, match="data.image_size"):
        datasets.load_dataset("imagefolder", root=str(tmp_path))
    with pytest.raises(DataError, match="data.root.*train"):
        datasets.load_dataset("imagefolder", root=str(tmp_path), image_size=8)


# ------------------------------------------------------------------------------ batching
def test_normalize():
    images = torch.randint(0, 256, (4, 3, 5, 5), dtype=torch.uint8)
    mean, std = (0.1, 0.5, 0.9), (0.2, 0.3, 0.4)
    out = batching.normalize(images, mean, std)
    expected = (images.double() / 255 - torch.tensor(mean, dtype=torch.float64).view(3, 1, 1)) \
        / torch.tensor(std, dtype=torch.float64).view(3, 1, 1)
    assert out.dtype == torch.float32 and out.is_contiguous()
    assert torch.allclose(out.double(), expected, atol=1e-6)
    with pytest.raises(DataError, match="channels"):
        batching.normalize(images, (0.5,), (0.5,))


def test_steps_per_epoch_and_batch_size_errors():
    assert batching.steps_per_epoch(10, 3) == 3 and batching.steps_per_epoch(10, 10) == 1
    for bad in (0, 11, 2.0):
        with pytest.raises(DataError, match="train.batch_size"):
            batching.steps_per_epoch(10, bad)
    with pytest.raises(DataError, match="train.batch_size.*divisible"):
        batching.train_batches(make_splits(), 9, seed=0, epoch=0, world_size=2)


def test_epoch_is_a_permutation_of_full_batches():
    splits = make_splits(n=50)
    batches = epoch(splits, bs=8, augment=None)
    assert len(batches) == 6
    order = torch.cat([y for _, y in batches])
    assert len(set(order.tolist())) == 48
    for x, y in batches:
        assert x.shape == (8, 3, 8, 8) and x.dtype == torch.float32 and x.is_contiguous()
        assert y.dtype == torch.int64
        assert torch.equal(x, batching.normalize(splits.train_images[y], splits.mean, splits.std))


def test_order_and_augment_reproducible_per_seed_and_epoch():
    splits, aug = make_splits(), Augment(crop_padding=2, hflip=True)
    first = epoch(splits, ep=1, augment=aug)
    assert_batches_equal(first, epoch(splits, ep=1, augment=aug))
    other_epoch, other_seed = epoch(splits, ep=2, augment=aug), epoch(splits, ep=1, seed=4, augment=aug)
    assert not torch.equal(first[0][1], other_epoch[0][1])
    assert not torch.equal(first[0][1], other_seed[0][1])


def test_no_global_rng_used():
    splits, aug = make_splits(), Augment(crop_padding=1, hflip=True)
    torch.manual_seed(1)
    state = torch.get_rng_state()
    a = epoch(splits, augment=aug) + batching.calibration_batches(splits, 2, 4, seed=0, augment=aug)
    assert torch.equal(torch.get_rng_state(), state)
    torch.manual_seed(2)
    b = epoch(splits, augment=aug) + batching.calibration_batches(splits, 2, 4, seed=0, augment=aug)
    assert_batches_equal(a, b)


def test_start_step_yields_the_tail():
    splits, aug = make_splits(), Augment(crop_padding=2, hflip=True)
    full = epoch(splits, augment=aug)
    for k in (0, 1, 4, 6):
        assert_batches_equal(epoch(splits, start_step=k, augment=aug), full[k:])
    with pytest.raises(DataError, match="start step"):
        batching.train_batches(splits, 8, 3, 0, start_step=7)


@pytest.mark.parametrize("world_size", [2, 4])
def test_rank_shards_concatenate_to_the_global_batch(world_size):
    splits, aug = make_splits(), Augment(crop_padding=2, hflip=True)
    full = epoch(splits, augment=aug)
    shards = [epoch(splits, augment=aug, rank=r, world_size=world_size) for r in range(world_size)]
    for step, (x, y) in enumerate(full):
        assert torch.equal(torch.cat([s[step][0] for s in shards]), x)
        assert torch.equal(torch.cat([s[step][1] for s in shards]), y)


def naive_crop_flip(images, oy, ox, flip, pad):
    out = torch.empty_like(images)
    h, w = images.shape[-2:]
    for i in range(len(images)):
        padded = F.pad(images[i].float(), (pad, pad, pad, pad)).to(images.dtype)
        crop = padded[:, int(oy[i]): int(oy[i]) + h, int(ox[i]): int(ox[i]) + w]
        out[i] = crop.flip(-1) if flip is not None and flip[i] else crop
    return out


def test_crop_flip_equals_naive_loop():
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (16, 3, 7, 7), dtype=torch.uint8, generator=g)
    for pad, hflip in ((2, False), (3, True), (0, True)):
        oy, ox, flip = batching.draw_augment(Augment(pad, hflip), 16, g)
        assert int(oy.max()) <= 2 * pad and int(oy.min()) >= 0
        expected = naive_crop_flip(images, oy, ox, flip, pad)
        assert torch.equal(batching.crop_flip(images, oy, ox, flip, pad), expected)
    flip = torch.tensor([True, False] * 8)
    zeros = torch.zeros(16, dtype=torch.long)
    out = batching.crop_flip(images, zeros, zeros, flip, 0)
    assert torch.equal(out[flip], images[flip].flip(-1)) and torch.equal(out[~flip], images[~flip])


def test_train_batches_apply_valid_crops_and_flips():
    splits = make_splits(n=64, chans=2)
    offsets, flips = set(), []
    for aug in (Augment(crop_padding=2), Augment(hflip=True)):
        for x, y in epoch(splits, bs=16, augment=aug):
            for out, original in zip(to_uint8(x, splits), splits.train_images[y]):
                if aug.hflip:
                    same, flipped = torch.equal(out, original), torch.equal(out, original.flip(-1))
                    assert same != flipped
                    flips.append(flipped)
                    continue
                padded = F.pad(original, (2, 2, 2, 2))
                found = [(i, j) for i in range(5) for j in range(5)
                         if torch.equal(out, padded[:, i:i + 8, j:j + 8])]
                assert found
                offsets.update(found)
    assert len(offsets) > 10 and 10 < sum(flips) < 54


def test_eval_batches_sequential_with_partial_last():
    splits = make_splits(n=50)
    images, labels = splits.train_images, splits.train_labels
    batches = list(batching.eval_batches(images, labels, 16, splits.mean, splits.std))
    assert [len(y) for _, y in batches] == [16, 16, 16, 2]
    assert torch.equal(torch.cat([y for _, y in batches]), torch.arange(50))
    assert torch.equal(torch.cat([x for x, _ in batches]),
                       batching.normalize(splits.train_images, splits.mean, splits.std))
    with pytest.raises(DataError, match="batch_size"):
        batching.eval_batches(splits.train_images, splits.train_labels, 0, splits.mean, splits.std)


def test_calibration_batches_fixed_and_capped():
    splits, aug = make_splits(n=50), Augment(crop_padding=1, hflip=True)
    a = batching.calibration_batches(splits, 3, 8, seed=7)
    assert isinstance(a, list) and [len(y) for _, y in a] == [8, 8, 8]
    assert len(set(torch.cat([y for _, y in a]).tolist())) == 24
    assert_batches_equal(a, batching.calibration_batches(splits, 3, 8, seed=7))
    assert not torch.equal(a[0][1], batching.calibration_batches(splits, 3, 8, seed=8)[0][1])
    capped = batching.calibration_batches(splits, 10, 8, seed=7)
    assert sum(len(y) for _, y in capped) == 50 and len(capped) == 7
    augmented = batching.calibration_batches(splits, 3, 8, seed=7, augment=aug)
    assert [torch.equal(y1, y2) for (_, y1), (_, y2) in zip(a, augmented)] == [True] * 3
    assert not torch.equal(augmented[0][0], a[0][0])
    assert_batches_equal(augmented, batching.calibration_batches(splits, 3, 8, seed=7, augment=aug))


def test_augment_and_splits_validation():
    with pytest.raises(DataError, match="data.augment.crop_padding"):
        Augment(crop_padding=-1)
    with pytest.raises(DataError, match="uint8"):
        float_images = (torch.zeros(2, 1, 4, 4), torch.zeros(2, dtype=torch.long))
        ImageSplits("x", 2, (0.5,), (0.5,), *float_images * 3)
