"""Shared fixtures and helpers: spaces by name at their default and at a small test size, and the
registry coverage check of the contract suites."""
from __future__ import annotations

import random

import pytest
import torch

from nas.core.registry import SPACES
from tests.support.runs import trained  # noqa: F401  (fixture: a tiny trained run shared by the suite)

# A small instance of every registered space, for brute-force and export tests.
SMALL_OPTIONS = {
    "attentive_mbv3": dict(resolutions=(20, 25), stem_widths=(8, 16), depths=((1, 2), (1, 2)),
                           widths=((8, 16), (16, 24)), kernel_sizes=((3,), (3, 5)), expand_ratios=((1,), (4, 6)),
                           strides=(1, 2), se=(False, True), activations=("swish", "relu"), head_widths=(16, 24)),
    "mobilenetv3": dict(resolutions=(20, 28), depths=((1, 2), (1, 2)), widths=((16,), (16, 24)),
                        kernel_sizes=(3, 5), expand_ratios=(3, 6), strides=(1, 2), se=(False, True),
                        activations=("relu", "hswish"), head_width=32, num_features=64),
    "vit": dict(embed_dims=(16, 32), depths=(1, 2), num_heads=(1, 2), mlp_ratios=(2.0, 4.0), head_dim=8,
                patch_size=7),
    "cell201": dict(channels=4, cells_per_stage=1, image_size=12,
                    operations=("none", "skip_connect", "avg_pool_3x3", "conv_1x1", "conv_3x3")),
}
# (in_chans, num_classes) each space is tested with.
TEST_DATA_SHAPE = {"attentive_mbv3": (1, 10), "mobilenetv3": (1, 10), "vit": (1, 10), "cell201": (1, 10)}


def make_space(name: str, small: bool = False, **overrides):
    """A space by registry name, default or small options, with overrides."""
    entry = SPACES.get(name)
    options = {**(SMALL_OPTIONS[name] if small else {}), **overrides}
    in_chans, num_classes = TEST_DATA_SHAPE[name]
    return entry.obj(entry.options(**options), in_chans, num_classes)


def make_supernet(space, seed: int = 0, randomize_bn: bool = True):
    """A seeded supernet whose BN statistics are not the trivial initial ones."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = space.build_supernet()
        if randomize_bn:
            for module in net.modules():     # non-trivial affine parameters (some start at 0 or 1)
                if isinstance(module, torch.nn.modules.batchnorm._BatchNorm) and module.affine:
                    torch.nn.init.uniform_(module.weight, 0.5, 1.5)
                    torch.nn.init.uniform_(module.bias, -0.2, 0.2)
            net.train()
            rng = random.Random(seed)
            with torch.no_grad():
                for arch in [space.max(), space.min(), space.sample(rng), space.sample(rng)]:
                    net.set_active(arch)
                    size = space.input_size(arch)
                    net(torch.randn(8, space.in_chans, size, size) * 2 + 0.5)
    return net.eval()


@pytest.fixture
def rng() -> random.Random:
    return random.Random(1234)


def shipped_names(registry) -> list[str]:
    """The registry's members less those a test module registered (at import, so in every pytest
    worker that collects it): doubles of the suite, not plugins a user gets."""
    return [name for name in registry.names()
            if getattr(registry.get(name).obj, "__module__", "").split(".")[0] != "tests"]


def check_contract_coverage(registry, contract: list[str], skip: dict[str, str]) -> None:
    """A contract suite's check that every member of `registry` is run (`contract`) or skipped
    with a reason (`skip`), so a newly registered one cannot go unchecked."""
    registered = set(shipped_names(registry))
    assert set(skip) <= registered, f"skipped but not registered: {sorted(set(skip) - registered)}"
    assert registered == set(contract) | set(skip) and not set(contract) & set(skip)
    assert all(reason.strip() for reason in skip.values())
