"""Batch-norm recalibration: re-estimate running statistics of the active subnet exactly.

Weight-sharing training leaves BN running statistics that mix many subnets, so every
evaluation first recalibrates (OFA/AttentiveNAS; docs/design.md, "Batch-norm recalibration"): forward a fixed set of
training images with BN normalising by batch statistics, accumulate per channel the sum of x,
the sum of x² and the count over ALL calibration images, and set running_mean = sum/count and
running_var = the pooled variance with Bessel's correction (count/(count-1)), torch's
convention for running variance. This is an exact average, not an EMA: with K equal batches
the mean equals the mean of the per-batch means. Under DDP the sums and counts are
all-reduced before dividing (averaging per-rank variances would be wrong). Weights never change.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterable, Iterator

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from nas.engine.devices import module_device


class _Moments:
    """Per-channel sums of x and x² and the element count seen by one BN layer."""

    def __init__(self) -> None:
        self.sum: torch.Tensor | None = None
        self.sum_sq: torch.Tensor | None = None
        self.count = 0

    def add(self, x: torch.Tensor) -> None:
        x = x.detach().double()
        dims = [d for d in range(x.dim()) if d != 1]
        s, sq = x.sum(dims), (x * x).sum(dims)
        if self.sum is None or self.sum.numel() != s.numel():
            if self.sum is not None:
                raise RuntimeError("BN input width changed during one recalibration")
            self.sum, self.sum_sq = s, sq
        else:
            self.sum, self.sum_sq = self.sum + s, self.sum_sq + sq
        self.count += x.numel() // x.shape[1]


def batch_norms(model: nn.Module) -> list[_BatchNorm]:
    """Every batch-norm layer of `model` (elastic ones included)."""
    return [m for m in model.modules() if isinstance(m, _BatchNorm)]


@contextmanager
def _calibration_mode(model: nn.Module, moments: dict[_BatchNorm, _Moments]) -> Iterator[None]:
    """BN layers normalise with batch statistics and record moments; running stats stay frozen."""
    saved = [(m, m.training, m.momentum, m.num_batches_tracked.clone()) for m in moments]
    was_training = model.training
    hooks = [m.register_forward_pre_hook(lambda mod, args: moments[mod].add(args[0])) for m in moments]
    model.eval()
    try:
        for m in moments:
            m.train()
            m.momentum = 0.0   # running = (1 - 0) * running: untouched by the forward passes
        yield
    finally:
        for hook in hooks:
            hook.remove()
        for m, training, momentum, tracked in saved:
            m.train(training)
            m.momentum = momentum
            m.num_batches_tracked.copy_(tracked)
        model.train(was_training)


def _all_reduce(moments: Iterable[_Moments]) -> None:
    if not (dist.is_available() and dist.is_initialized()):
        return
    for m in moments:
        if m.sum is None:      # a layer the active subnet skips: skipped on every rank alike
            continue
        count = torch.tensor([float(m.count)], dtype=torch.float64, device=m.sum.device)
        packed = torch.cat([m.sum, m.sum_sq, count])   # on the model's device (nccl needs CUDA tensors)
        dist.all_reduce(packed)
        n = m.sum.numel()
        m.sum, m.sum_sq, m.count = packed[:n], packed[n:2 * n], int(packed[-1].item())


@torch.no_grad()
def recalibrate_bn(model: nn.Module, batches: Iterable[torch.Tensor],
                   forward: Callable[[torch.Tensor], object] | None = None) -> int:
    """Re-estimate the running statistics of `model`'s BN layers from `batches` of inputs.

    Args:
        model: The network (a supernet with its arch active, or a static export).
        batches: Input tensors (images only), e.g. a fixed seeded set of training images.
        forward: How to run one batch (default `model(x)`).

    Returns:
        The number of images seen (summed over ranks under DDP).
    """
    layers = batch_norms(model)
    moments = {m: _Moments() for m in layers}
    seen = 0
    with _calibration_mode(model, moments):
        for x in batches:
            (forward or model)(x)
            seen += x.shape[0]
    _all_reduce(moments.values())
    if dist.is_available() and dist.is_initialized():
        total = torch.tensor([seen], dtype=torch.float64, device=module_device(model))
        dist.all_reduce(total)
        seen = int(total.item())
    for layer, m in moments.items():
        if m.sum is None:          # layer not used by the active subnet
            continue
        channels = m.sum.numel()
        mean = m.sum / m.count
        var = (m.sum_sq / m.count - mean * mean).clamp_min(0) * (m.count / max(m.count - 1, 1))
        layer.running_mean[:channels] = mean.to(layer.running_mean.dtype)
        layer.running_var[:channels] = var.to(layer.running_var.dtype)
    return seen
