"""MobileNetV3 space: worth searching by default, and every export is a timm MobileNetV3."""
from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

from nas.core.config import load_config
from nas.engine.export import save_export
from search_spaces.timm_models import build_timm_model, load_timm_export
from tests.conftest import make_space, make_supernet


def test_default_space_is_worth_searching():
    space = make_space("mobilenetv3")
    assert space.macs(space.max()) >= 3 * space.macs(space.min())
    assert space.size() >= 10**6
    assert len(space.choices()["resolution"]) >= 2


def test_shipped_default_config_space_is_worth_searching():
    from nas.api import build_space

    space = build_space(load_config("fashion_mnist_mbv3"))
    assert space.macs(space.max()) >= 3 * space.macs(space.min())
    assert space.size() >= 10**6 and len(space.choices()["resolution"]) >= 2


def test_inactive_blocks_do_not_change_the_network():
    space = make_space("mobilenetv3")
    arch = dict(space.min())
    other = dict(arch, **{"stage1.block2.kernel_size": 7})   # stage1 has depth 1 in min
    assert space.canonical(other) == space.canonical(arch)
    assert space.macs(other) == space.macs(arch)


@pytest.mark.slow
def test_mixed_archs_rebuild_in_timm_with_strict_weights(tmp_path):
    space = make_space("mobilenetv3")
    net = make_supernet(space)
    rng = random.Random(7)
    archs = [space.min(), space.max()] + [space.sample(rng) for _ in range(5)]
    assert len({a["resolution"] for a in archs}) > 1
    for i, arch in enumerate(archs):
        out = tmp_path / str(i)
        save_export(net, arch, out)
        model = load_timm_export(out)   # strict=True inside
        net.set_active(arch)
        size = arch["resolution"]
        x = torch.randn(3, 1, size, size)
        with torch.no_grad():
            assert (model(x) - net(x)).abs().max().item() <= 1e-5, arch
        assert sum(p.numel() for p in model.parameters()) == space.params(arch)


def test_timm_config_only_for_stride_two_stem():
    space = make_space("mobilenetv3", stem_stride=1)
    net = make_supernet(space, randomize_bn=False)
    assert net.timm_config(space.max()) is None
    assert build_timm_model(make_supernet(make_space("mobilenetv3"), randomize_bn=False)
                            .timm_config(space.min())) is not None


def test_supernet_resizes_inputs_to_the_active_resolution():
    space = make_space("mobilenetv3")
    net = make_supernet(space)
    arch = dict(space.max(), resolution=24)
    net.set_active(arch)
    x = torch.randn(2, 1, 28, 28)
    resized = F.interpolate(x, size=(24, 24), mode="bilinear", align_corners=False, antialias=False)
    with torch.no_grad():
        assert torch.allclose(net(x), net.export(arch)(resized), atol=1e-5)


def test_invalid_arch_names_the_key_and_allowed_values():
    from nas.core.errors import ArchError

    space = make_space("mobilenetv3")
    arch = dict(space.max(), **{"stage2.width": 30})
    with pytest.raises(ArchError, match=r"stage2.width: 30 is not allowed; choose one of \[24, 32, 40\]"):
        space.validate(arch)
    with pytest.raises(ArchError, match="did you mean 'stage2.width'"):
        space.validate(dict(space.max(), **{"stage2.widht": 32}))
    missing = dict(space.max())
    del missing["resolution"]
    with pytest.raises(ArchError, match="resolution: missing"):
        space.validate(missing)
