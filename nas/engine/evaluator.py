"""Evaluate a subnet of a trained supernet: BN recalibration, then top-1/top-5 on a split.

The module for an arch comes from the strategy (`subnet_for`), so searchers never know which
strategy trained the weights. Results are cached by (checkpoint step, canonical arch, split,
recalibration settings). The test split is for final reports; search uses `val`. Batches,
recalibration included, go to the device of the module being evaluated. `EvalResult` is what
`nas.evaluate` returns.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping

import torch
import torch.distributed as dist
from torch import nn

from nas.core.arch import Arch, arch_id
from nas.core.config import EvalConfig
from nas.core.errors import NasError
from nas.core.preprocessing import INTERPOLATION, normalize, resize
from nas.engine.bn import recalibrate_bn
from nas.engine.data.datasets import ImageSplits
from nas.engine.data.sources import DataSource, as_source
from nas.engine.devices import module_device
from nas.engine.json_result import JsonResult
from search_spaces.base import Supernet

SPLITS = ("val", "test")


@dataclass(frozen=True)
class Accuracy:
    """Top-1/top-5 accuracy (fractions) of one arch on one split."""

    top1: float
    top5: float
    n_images: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@torch.no_grad()
def accuracy(model: nn.Module, batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
             prepare: Callable[[torch.Tensor], torch.Tensor] = lambda x: x) -> Accuracy:
    """Top-1/top-5 of `model` over labelled batches, computed on the model's device (the caller
    puts it in eval mode; a loaded `model.pt2` program is already in eval mode and refuses `.eval()`)."""
    device = module_device(model)
    correct1 = correct5 = torch.zeros((), dtype=torch.int64, device=device)
    seen = 0
    for x, y in batches:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        logits = model(prepare(x))
        top = logits.topk(min(5, logits.shape[1]), dim=1).indices
        correct1 = correct1 + (top[:, 0] == y).sum()
        correct5 = correct5 + (top == y[:, None]).any(dim=1).sum()
        seen += len(y)
    return Accuracy(correct1.item() / max(seen, 1), correct5.item() / max(seen, 1), seen)


class Evaluator:
    """BN-recalibrated accuracy of subnets of one trained supernet (one checkpoint step)."""

    def __init__(self, subnet_for: Callable[[Mapping[str, Any]], Supernet], canonical: Callable,
                 splits: ImageSplits | DataSource, settings: EvalConfig, seed: int, step: int,
                 channels_last: bool = False):
        self.subnet_for, self.canonical = subnet_for, canonical
        self.data, self.settings, self.seed, self.step = as_source(splits), settings, seed, step
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        self._cache: dict[tuple, Accuracy] = {}
        self._calibration: list[torch.Tensor] | None = None

    def calibration_inputs(self) -> Iterable[torch.Tensor]:
        """The fixed, seeded training batches every recalibration uses (this rank's share under
        DDP: recalibrate_bn all-reduces the sums and counts); held in memory unless the data
        streams, in which case they are read again each time."""
        if self._calibration is not None:
            return self._calibration
        shard = (dist.get_rank(), dist.get_world_size()) if dist.is_available() and dist.is_initialized() else (0, 1)
        batches = self.data.calibration_batches(self.settings.bn_recal_batches, self.settings.bn_recal_batch_size,
                                                self.seed, *shard)
        inputs = (x.contiguous(memory_format=self.memory_format) for x, _ in batches)
        if self.data.streams:
            return inputs
        self._calibration = list(inputs)
        return self._calibration

    def _key(self, arch: Mapping[str, Any], split: str) -> tuple:
        s = self.settings
        return (self.step, arch_id(self.canonical(arch)), split, s.bn_recal_batches, s.bn_recal_batch_size, self.seed)

    @contextmanager
    def prepared(self, arch: Mapping[str, Any]) -> Iterator[Supernet]:
        """Inside the block: the supernet of `arch`, `arch` active, BN statistics recalibrated,
        in eval mode. On exit its buffers and train/eval mode are restored, so evaluating never
        changes the live supernet (during training, the checkpoint does not depend on which
        arch was evaluated last)."""
        module = self.subnet_for(arch)
        saved = [(buffer, buffer.clone()) for buffer in module.buffers()]
        was_training = module.training
        try:
            device = module_device(module)
            recalibrate_bn(module, (x.to(device, non_blocking=True) for x in self.calibration_inputs()))
            yield module.eval()
        finally:
            with torch.no_grad():
                for buffer, value in saved:
                    buffer.copy_(value)
            module.train(was_training)

    def batches(self, split: str) -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
        if split not in SPLITS:
            raise NasError(f"split: unknown split '{split}'; choose one of {', '.join(SPLITS)}")
        for x, y in self.data.eval_batches(split, self.settings.batch_size):
            yield x.contiguous(memory_format=self.memory_format), y

    def forget(self) -> None:
        """Drop the cached results: for weights changed in place at the same step."""
        self._cache.clear()

    def evaluate(self, arch: Mapping[str, Any], split: str = "val") -> Accuracy:
        """Top-1/top-5 of `arch` on `split` after BN recalibration (cached)."""
        key = self._key(arch, split)
        if key not in self._cache:
            batches = self.batches(split)      # checks the split name before any work
            with self.prepared(arch) as module:
                self._cache[key] = accuracy(module, batches)
        return self._cache[key]


def static_accuracy(model: nn.Module, splits: ImageSplits, split: str, resolution: int,
                    batch_size: int = 256, interpolation: str = INTERPOLATION) -> Accuracy:
    """Accuracy of an exported static model, preprocessing as its metrics.json says."""
    images, labels = splits.split(split)
    batches = ((resize(images[i:i + batch_size].float() / 255.0, resolution, interpolation), labels[i:i + batch_size])
               for i in range(0, len(labels), batch_size))
    return accuracy(model, batches, prepare=lambda x: normalize(x, splits.mean, splits.std))


@dataclass(frozen=True)
class EvalResult(JsonResult):
    """BN-recalibrated accuracy of one arch on one split, with its costs (`nas eval`)."""

    arch: Arch
    arch_id: str
    split: str
    top1: float
    top5: float
    n_images: int
    macs: int
    params: int
    step: int
