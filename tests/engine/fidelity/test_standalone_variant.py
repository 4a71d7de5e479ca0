"""The standalone trainer's variant (`train.accelerate`): channels_last and torch.compile follow
the eager loss curve, a seed gives one result per variant, and the choice is a fixed rule that
`eager` overrides; under `auto`, bf16 autocast only on a CPU with bf16 instructions, for the
spaces measured faster with it, and never for a ground truth."""
from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from nas import api
from nas.core.config import load_config
from nas.engine.data.build import build_source
from nas.engine import precision
from nas.engine.fidelity import standalone, variant
from nas.engine.fidelity.recipe import load_recipe
from nas.engine.fidelity.variant import Variant, choose_variant, forward_of
from nas.engine.training.trainer import build_optimizer
from tests.support.tiny import tiny_config

STEPS = 5
# float32 sums in another order (channels_last, inductor's fused kernels): measured differences
# of the losses below are about 1e-7 relative after 5 steps
LOSS_RTOL = 1e-4


def _recipe(space: str = "mobilenetv3", **train):
    recipe = load_recipe(load_config(tiny_config(space=space, **train)), epochs=1)
    return dataclasses.replace(recipe, train=dataclasses.replace(recipe.train, epochs=None, steps=STEPS))


def _small_cnn() -> nn.Module:
    """Conv, BN, ReLU, pooling, linear: the ops of the CNN spaces, small enough to compile in seconds."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.Conv2d(4, 8, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))


def _loss_curve(v: Variant) -> tuple[list[float], dict[str, torch.Tensor]]:
    recipe = _recipe()
    model = _small_cnn().to(memory_format=v.memory_format)
    forward, optimizer = forward_of(model, v), build_optimizer(model, recipe.train)
    gen = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(STEPS):
        images = torch.randn(16, 1, 12, 12, generator=gen).contiguous(memory_format=v.memory_format)
        labels = torch.randint(0, 10, (16,), generator=gen)
        losses.append(standalone.train_step(forward, model, optimizer, recipe, images, labels).item())
    return losses, {k: t.detach().clone() for k, t in model.state_dict().items()}


@pytest.mark.slow      # one inductor compilation: about 15-30 s on a busy 2-core machine
def test_channels_last_and_compiled_steps_follow_the_eager_loss_curve():
    eager, eager_weights = _loss_curve(Variant(False, False))
    assert eager[-1] < eager[0]    # it learns: the curve is not flat
    for v in (Variant(True, False), Variant(True, True)):
        losses, weights = _loss_curve(v)
        assert losses == pytest.approx(eager, rel=LOSS_RTOL), v
        assert all(torch.allclose(weights[k].float(), eager_weights[k].float(), rtol=1e-3, atol=1e-5)
                   for k in eager_weights), v
        again, again_weights = _loss_curve(v)     # one variant, one seed: one result, bit for bit
        assert again == losses and all(torch.equal(again_weights[k], weights[k]) for k in weights), v


def test_the_rule_compiles_long_trainings_of_plain_convolutions_only(monkeypatch):
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: False)     # fp32, as on a CPU without bf16 instructions
    cnn, mlp = _small_cnn(), nn.Sequential(nn.Flatten(), nn.Linear(144, 10))
    patches = nn.Sequential(nn.Conv2d(1, 8, 4, stride=4), nn.Flatten(), nn.LayerNorm(72))    # a ViT's stem
    depthwise = nn.Sequential(nn.Conv2d(1, 4, 1), nn.Conv2d(4, 4, 3, groups=4), nn.Flatten())
    auto = _recipe().train
    long_steps = variant.COMPILE_MIN_STEPS_PER_THREAD
    assert choose_variant(cnn, auto, long_steps, 1) == Variant(True, True)
    assert choose_variant(cnn, auto, long_steps - 1, 1) == Variant(True, False)
    assert choose_variant(cnn, auto, long_steps, 2) == Variant(True, False)     # twice the threads: half the time to pay back
    assert choose_variant(mlp, auto, 10 * long_steps, 1) == Variant(True, False)    # not measured: eager
    assert choose_variant(patches, auto, 10 * long_steps, 1) == Variant(True, False)
    assert choose_variant(depthwise, auto, 10 * long_steps, 1) == Variant(True, False)  # measured: no faster
    eager, compiled = _recipe(accelerate="eager", channels_last=False).train, _recipe(accelerate="compiled").train
    assert choose_variant(cnn, eager, 10 * long_steps, 1) == Variant(False, False)
    assert choose_variant(cnn, compiled, 1, 4) == Variant(True, True)
    monkeypatch.setattr(variant, "has_cpp_compiler", lambda: False)    # inductor could not build its kernels
    assert choose_variant(cnn, auto, 10 * long_steps, 1) == Variant(True, False)


def test_eager_forces_the_plain_loop_where_auto_compiles(monkeypatch):
    """With the rule lowered to compile this tiny training, `auto` trains through torch.compile
    (a spy here, returning the model itself) and `eager` never calls it; both say so."""
    config = load_config(tiny_config(space="cell201"))
    space = api.build_space(config)
    arch = space.max()
    compiled = []

    def spy(model, **options):
        compiled.append(options)
        return model

    monkeypatch.setattr(variant, "COMPILE_MIN_STEPS_PER_THREAD", 1)
    monkeypatch.setattr(variant.torch, "compile", spy)
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: False)     # auto and eager: both fp32
    results = {}
    for accelerate in ("auto", "eager"):
        recipe = _recipe(space="cell201", accelerate=accelerate)
        model = api.standalone_model(config, arch, 5)
        results[accelerate] = standalone.train_standalone(model, recipe, build_source(recipe.data), 0,
                                                          resolution=space.input_size(arch))
        assert len(compiled) == 1, accelerate     # auto compiled once; eager added no call
    assert results["auto"].to_dict()["compiled"] is True and results["eager"].to_dict()["compiled"] is False
    assert results["eager"].to_dict()["memory_format"] == "channels_last"
    assert results["auto"].test_top1 == results["eager"].test_top1     # the spy's forward is the model's


@pytest.mark.parametrize("has_bf16", [True, False])
def test_auto_trains_in_bf16_only_the_spaces_measured_faster_on_a_cpu_with_bf16_instructions(monkeypatch, has_bf16):
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: has_bf16)
    picked = {}
    for space in ("cell201", "mobilenetv3", "vit"):
        config = load_config(tiny_config(space=space))
        arch = api.build_space(config).max()
        for accelerate in ("auto", "eager", "compiled"):
            train = _recipe(space=space, accelerate=accelerate).train
            picked[space, accelerate] = choose_variant(api.standalone_model(config, arch, 0), train, STEPS, 1).bf16
    # benchmarks/notes/23-bf16.md: cell201 faster in bf16; MobileNetV3 (depthwise) and ViT slower
    assert picked == {(space, accelerate): has_bf16 and space == "cell201" and accelerate == "auto"
                      for space, accelerate in picked}
    cell201 = load_config(tiny_config(space="cell201"))
    model = api.standalone_model(cell201, api.build_space(cell201).max(), 0)
    auto = _recipe(space="cell201").train
    assert not choose_variant(model, auto, STEPS, 1, ground_truth=True).bf16      # ground truths stay fp32
    for accelerate in ("auto", "eager", "compiled"):       # an explicit bf16 recipe trains in bf16 everywhere
        explicit = _recipe(space="cell201", accelerate=accelerate, precision="bf16").train
        assert all(choose_variant(model, explicit, STEPS, 1, ground_truth=truth).bf16 for truth in (False, True))
    assert not choose_variant(model.to("meta"), auto, STEPS, 1).bf16    # off the CPU: CPU autocast is not its


def test_a_bf16_training_runs_under_autocast_and_says_so(monkeypatch):
    """The variant's bf16 reaches the step: `auto` on a bf16 CPU trains cell201 under autocast
    (its losses differ from fp32's in more than the last bits) and records precision bf16."""
    config = load_config(tiny_config(space="cell201"))
    arch = api.build_space(config).max()
    results = {}
    for has_bf16 in (True, False):
        monkeypatch.setattr(precision, "cpu_has_bf16", lambda: has_bf16)
        recipe = _recipe(space="cell201")
        autocast, real_autocast = [], torch.autocast
        monkeypatch.setattr(torch, "autocast", lambda *a, **k: autocast.append(k) or real_autocast(*a, **k))
        model = api.standalone_model(config, arch, 5)
        results[has_bf16] = standalone.train_standalone(model, recipe, build_source(recipe.data), 0,
                                                        resolution=api.build_space(config).input_size(arch))
        assert autocast == ([{"dtype": torch.bfloat16}] * STEPS if has_bf16 else [])
        monkeypatch.setattr(torch, "autocast", real_autocast)
    assert results[True].to_dict()["precision"] == "bf16" and results[False].to_dict()["precision"] == "fp32"
