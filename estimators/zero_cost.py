"""What every zero-cost proxy shares: fresh seeded exports, resized inputs, weight gradients.

A proxy scores an arch on the export of a freshly initialised supernet (never a trained
one), averaged over `context.init_seeds` initialisations: init k uses the seed
`derive_seed(context.seed, "init", k)`. The export is standard-initialised, as the proxies'
papers assume: every normalisation layer's scale is 1 and its shift 0, whatever training's
initialisation does (MobileNetV3's supernet starts its residual blocks as identities by
zeroing their last BN scale, which would hide those blocks from every gradient). The seeded supernets are built once per context
(`context.cache`) and exported for every arch. A proxy runs inside `torch.random.fork_rng`
with its own derived seed, so it leaves the global RNG as it was and is a pure function of
(context, arch); it takes gradients with `torch.autograd.grad`, so no `.grad` is left behind.
"""
from __future__ import annotations

import abc
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn

from estimators.base import Batch, Estimator, EstimatorContext
from nas.core.arch import Arch
from nas.core.errors import ConfigError
from nas.core.preprocessing import resize
from nas.core.rng import derive_seed
from supernets.base import seeded_supernet

# Normalisation layers whose affine scale and shift a proxy's export resets to 1 and 0.
NORM_LAYERS = (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm)
# Layers whose weights the gradient proxies read (timm's conv variants subclass nn.Conv2d).
WEIGHTED_LAYERS = (nn.Conv2d, nn.Linear)
# Activations whose units NASWOT codes as on/off; Hardsigmoid (a gate in squeeze-excite) is no unit.
RELU_LIKE = (nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.Hardswish, nn.GELU, nn.SiLU)


def weights_of(model: nn.Module) -> list[torch.Tensor]:
    """The weights of the model's conv and linear layers, in module order."""
    return [m.weight for m in model.modules() if isinstance(m, WEIGHTED_LAYERS) and m.weight is not None]


@torch.no_grad()
def standard_norms(model: nn.Module) -> nn.Module:
    """`model` with every normalisation layer's affine scale set to 1 and shift to 0 (the
    standard initialisation; training may start some scales at 0, e.g. identity blocks)."""
    for module in model.modules():
        if isinstance(module, NORM_LAYERS):
            if getattr(module, "weight", None) is not None:
                module.weight.fill_(1.0)
            if getattr(module, "bias", None) is not None:
                module.bias.zero_()
    return model


def fresh_export(context: EstimatorContext, arch: Arch, k: int, device: torch.device) -> nn.Module:
    """The standard-initialised (`standard_norms`) export of `arch` from the k-th seeded
    supernet (built once per context), on `device`, with every parameter requiring gradients."""
    key = ("seeded_supernet", context.seed, k)
    if key not in context.cache:
        context.cache[key] = seeded_supernet(context.space, derive_seed(context.seed, "init", k))
    model = standard_norms(context.cache[key].export(arch)).to(device)
    for parameter in model.parameters():
        parameter.requires_grad_(True)
    return model


def inputs(name: str, context: EstimatorContext, arch: Arch) -> list[Batch]:
    """The context's batches resized to the arch's input size (a proxy that reads data calls this)."""
    if not context.batches:
        raise ConfigError(f"score: '{name}' needs training batches (the estimator context has none)")
    size = context.space.input_size(arch)
    return [(resize(x, size, context.space.interpolation), y) for x, y in context.batches]


def loss_gradients(model: nn.Module, batch: Batch) -> list[torch.Tensor]:
    """Gradients of the mean cross-entropy of one batch w.r.t. `weights_of(model)`."""
    x, y = batch
    weights = weights_of(model)
    loss = nn.functional.cross_entropy(model(x), y)
    return list(torch.autograd.grad(loss, weights, allow_unused=True, materialize_grads=True))


@contextmanager
def private_rng(seed: int, device: torch.device) -> Iterator[None]:
    """Seed torch's RNG (CPU, and `device` when it is CUDA) for the block; restore it after."""
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


class ZeroCostProxy(Estimator):
    """A proxy measured on fresh exports and averaged over the context's init seeds.

    Subclasses implement `measure(model, batches, input_shape)`; `model` is in train mode (BN
    normalises by batch statistics) unless `measure` sets otherwise, `batches` are the context's
    batches resized for the arch (empty for a data-free proxy), `input_shape` is the arch's
    (channels, height, width).
    """

    needs = frozenset({"batches"})

    @abc.abstractmethod
    def measure(self, model: nn.Module, batches: Sequence[Batch], input_shape: tuple[int, int, int]) -> float:
        """The proxy of one freshly initialised model."""

    def scores(self, archs: Sequence[Arch], context: EstimatorContext) -> list[float]:
        if context.init_seeds < 1:
            raise ConfigError(f"score: '{self.name}' needs at least one init seed, got {context.init_seeds}")
        return [self._average(arch, context) for arch in archs]

    def _average(self, arch: Arch, context: EstimatorContext) -> float:
        batches = inputs(self.name, context, arch) if "batches" in self.needs else []
        device = batches[0][0].device if batches else torch.device("cpu")
        size = context.space.input_size(arch)
        shape = (context.space.in_chans, size, size)
        values = []
        for k in range(context.init_seeds):
            with private_rng(derive_seed(context.seed, self.name, k), device):
                model = fresh_export(context, arch, k, device).train()
                values.append(float(self.measure(model, batches, shape)))
        return math.fsum(values) / len(values)
