"""timm augmentations made reproducible: per-image transforms and batch mixing (mixup/cutmix).

timm draws its randomness from the global `random`, `numpy.random` and torch generators. Each
call here runs under `seeded_globals(s)` with `s` a pure function of (seed, epoch, step,
position), and the caller's generator states are restored afterwards, so an image's
augmentation does not depend on which DataLoader worker or DDP rank produced it, a run resumed
mid-epoch sees exactly the same tensors, and the training RNG is untouched.
"""
from __future__ import annotations

import contextlib
import random
from typing import Callable, Iterator, Sequence

import numpy as np
import torch

from nas.core.config import AugmentConfig
from nas.core.errors import DataError
from nas.core.rng import derive_seed


@contextlib.contextmanager
def seeded_globals(seed: int) -> Iterator[None]:
    """Seed `random`, `numpy.random` and torch's CPU generator with `seed` inside; restore after."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)
        try:
            yield
        finally:
            random.setstate(python_state)
            np.random.set_state(numpy_state)


def image_transform(augment: AugmentConfig, image_size: int, mean: Sequence[float],
                    std: Sequence[float]) -> Callable | None:
    """The per-image training transform (PIL image -> normalised float tensor), or None when
    `augment` asks for none (then images stay uint8 and batches are augmented whole).

    Without `random_resized_crop` the crop is the whole centre square (scale and ratio 1),
    followed by the zero-padded random crop of `crop_padding` when that is set.
    """
    if not augment.per_image:
        return None
    from timm.data import create_transform
    from torchvision import transforms

    crop = ({"scale": tuple(augment.scale), "ratio": tuple(augment.ratio)} if augment.random_resized_crop
            else {"scale": (1.0, 1.0), "ratio": (1.0, 1.0)})
    primary, secondary, final = create_transform(
        image_size, is_training=True, hflip=0.5 if augment.hflip else 0.0,
        color_jitter=augment.color_jitter if augment.color_jitter > 0 else None,
        auto_augment=augment.auto_augment, interpolation="bilinear", mean=tuple(mean), std=tuple(std),
        re_prob=augment.re_prob, re_mode=augment.re_mode, separate=True, **crop)
    steps = list(primary.transforms)
    if augment.crop_padding and not augment.random_resized_crop:
        steps.insert(1, transforms.RandomCrop(image_size, padding=augment.crop_padding))
    return transforms.Compose(steps + list(secondary.transforms) + list(final.transforms))


class BatchMixer:
    """timm `Mixup` (mixup and/or cutmix) with labels turned into mixed one-hot targets.

    Label smoothing is left to the strategy's loss; the draw of step t depends only on
    (seed, epoch, t), and every rank mixes within its own shard with the same draw.
    """

    def __init__(self, augment: AugmentConfig, num_classes: int):
        from timm.data import Mixup

        self.mixup = Mixup(mixup_alpha=augment.mixup_alpha, cutmix_alpha=augment.cutmix_alpha,
                           prob=augment.mixup_prob, switch_prob=augment.mixup_switch_prob,
                           mode=augment.mixup_mode, label_smoothing=0.0, num_classes=num_classes)

    def __call__(self, images: torch.Tensor, labels: torch.Tensor, seed: int, epoch: int,
                 step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Mixed float32 images and N x classes float32 targets (rows sum to 1)."""
        if len(images) % 2:
            raise DataError(f"train.batch_size: mixup/cutmix pair the images of each rank's batch, so it "
                            f"must be even per rank, got {len(images)}")
        with seeded_globals(derive_seed(seed, "data.mixup", epoch, step)):
            return self.mixup(images, labels)


def batch_mixer(augment: AugmentConfig, num_classes: int) -> BatchMixer | None:
    """A `BatchMixer` when `augment` turns mixup or cutmix on, else None."""
    return BatchMixer(augment, num_classes) if augment.mixes else None
