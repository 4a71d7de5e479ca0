"""The `attentive_mbv3` space: AlphaNet's models counted as their code counts them, and its blocks."""
from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from nas.api import build_space
from nas.cli import main
from nas.core.config import load_config
from search_spaces.attentive_mbv3 import AttentiveMbv3Space
from search_spaces.ops.attentive import ElasticAttentiveBlock
from tests.conftest import make_space, make_supernet

# AlphaNet's configs/eval_alphanet_models.yml (commit 1df57bf): resolution, widths (stem, 7 stages,
# feature mix), kernel sizes, expand ratios, depths; and the MMACs AttentiveNAS's
# compute_active_subnet_flops gives each (the README rounds them; A5-1's 596 is not reproduced).
ALPHANET_MODELS = {
    "a0": (192, [16, 16, 24, 32, 64, 112, 192, 216, 1792], [3, 3, 3, 3, 3, 3, 3], [1, 4, 4, 4, 4, 6, 6],
           [1, 3, 3, 3, 3, 3, 1], 203.390),
    "a1": (224, [16, 16, 24, 32, 64, 112, 192, 216, 1984], [3, 3, 3, 5, 3, 5, 3], [1, 4, 4, 4, 4, 6, 6],
           [1, 3, 3, 3, 3, 3, 1], 279.239),
    "a2": (224, [16, 16, 24, 32, 64, 112, 200, 224, 1984], [3, 3, 3, 3, 3, 5, 3], [1, 4, 5, 4, 4, 6, 6],
           [1, 3, 3, 3, 3, 4, 1], 316.730),
    "a3": (224, [16, 16, 24, 32, 64, 112, 208, 224, 1984], [3, 3, 3, 5, 3, 3, 3], [1, 4, 4, 4, 4, 6, 6],
           [2, 3, 3, 4, 3, 5, 1], 356.518),
    "a4": (256, [16, 16, 24, 32, 64, 112, 192, 216, 1984], [3, 3, 3, 5, 3, 5, 3], [1, 4, 4, 5, 4, 6, 6],
           [1, 3, 3, 4, 3, 5, 1], 443.531),
    "a5": (256, [16, 16, 24, 32, 64, 112, 208, 216, 1984], [3, 3, 3, 3, 3, 5, 3], [1, 4, 4, 5, 4, 6, 6],
           [1, 3, 3, 4, 4, 5, 1], 491.481),
    "a5_1": (288, [16, 16, 24, 32, 64, 112, 200, 216, 1984], [3, 3, 5, 5, 3, 3, 3], [1, 4, 4, 4, 5, 6, 6],
             [2, 3, 4, 3, 3, 5, 1], 594.786),
    "a6": (288, [16, 16, 24, 32, 64, 112, 216, 224, 1984], [3, 3, 3, 3, 3, 5, 3], [1, 4, 6, 5, 4, 6, 6],
           [1, 3, 3, 4, 4, 6, 1], 709.007),
}


def alphanet_arch(resolution, widths, kernels, expands, depths) -> dict:
    """An arch of the `attentive_mbv3` space from AlphaNet's per-stage lists."""
    arch = {"resolution": resolution, "stem_width": widths[0], "head_width": widths[-1]}
    for i, (width, kernel, expand, depth) in enumerate(zip(widths[1:-1], kernels, expands, depths)):
        arch.update({f"stage{i}.depth": depth, f"stage{i}.width": width, f"stage{i}.kernel_size": kernel,
                     f"stage{i}.expand_ratio": expand})
    return arch


@pytest.fixture(scope="module")
def alphanet_space() -> AttentiveMbv3Space:
    """The shipped imagenet_alphanet space (its 1000 classes from data.num_classes: no data needed)."""
    space = build_space(load_config("imagenet_alphanet"))
    assert (space.in_chans, space.num_classes) == (3, 1000)
    return space


@pytest.mark.parametrize("name", ALPHANET_MODELS)
def test_alphanet_models_cost_what_their_code_counts(alphanet_space, name):
    *choices, mmacs = ALPHANET_MODELS[name]
    assert alphanet_space.macs(alphanet_arch(*choices)) / 1e6 == pytest.approx(mmacs, abs=0.01)


def test_alphanet_space_spans_their_min_and_max(alphanet_space):
    assert alphanet_space.macs(alphanet_space.min()) / 1e6 == pytest.approx(203.390, abs=0.01)
    assert alphanet_space.macs(alphanet_space.max()) / 1e6 == pytest.approx(1939.336, abs=0.01)
    assert alphanet_space.min() == alphanet_space.canonical(alphanet_arch(*ALPHANET_MODELS["a0"][:-1]))


def test_nas_space_counts_the_alphanet_space_without_data(capsys):
    assert main(["space", "imagenet_alphanet", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["space"] == "attentive_mbv3"
    assert summary["macs"] == {"min": 203_389_568, "max": 1_939_335_808}


def test_alphanet_arch_keys_are_per_stage():
    space = make_space("attentive_mbv3")
    keys = set(space.choices())
    assert {"stem_width", "head_width", "stage1.kernel_size", "stage1.expand_ratio"} <= keys
    assert not any(".block" in key for key in keys)


def _pool_by_hand(x: torch.Tensor) -> torch.Tensor:
    """2x2 windows at stride 2 over x zero-padded by one on each side where the side is odd,
    each summed and divided by 4 (padding counted)."""
    pad = x.shape[-1] % 2
    x = F.pad(x, (pad, pad, pad, pad))
    n = (x.shape[-1] - 2) // 2 + 1
    out = torch.zeros(*x.shape[:2], n, n)
    for i in range(n):
        for j in range(n):
            out[..., i, j] = x[..., 2 * i:2 * i + 2, 2 * j:2 * j + 2].sum((-1, -2)) / 4
    return out


@pytest.mark.parametrize("side", [6, 7])
def test_block_shortcut_pools_then_projects_without_bn_or_bias(side):
    torch.manual_seed(0)
    block = ElasticAttentiveBlock(8, 16, 4, 3, 2, use_se=False, activation="swish", expands=True, has_projection=True)
    block.configure(8, 16, 4, 3)
    torch.nn.init.zeros_(block.bn_pwl.weight)     # the main branch adds exactly 0
    torch.nn.init.zeros_(block.bn_pwl.bias)
    block.eval()
    x = torch.randn(2, 8, side, side)
    expected = F.conv2d(_pool_by_hand(x), block.projection.weight.full())
    with torch.no_grad():
        assert torch.allclose(block(x), expected, atol=1e-6)
        assert torch.allclose(block.to_static()(x), expected, atol=1e-6)
    block.configure(8, 8, 4, 3)                   # same width: the pooled input itself
    with torch.no_grad():
        assert torch.allclose(block(x), _pool_by_hand(x), atol=1e-6)


def test_a_stage_whose_only_expand_ratio_is_one_has_no_expansion_conv():
    net = make_supernet(make_space("attentive_mbv3"))
    assert net.blocks[0][0].expand is None and net.blocks[1][0].expand is not None
    static = net.export(net.space.max())
    assert not any(name.startswith("blocks.0.0.expand") for name, _ in static.named_parameters())
    assert any(name.startswith("blocks.1.0.expand") for name, _ in static.named_parameters())


def test_swish_everywhere_and_head_activation_as_an_option():
    space = make_space("attentive_mbv3", head_activation="hswish")
    static = make_supernet(space).export(space.max())
    assert isinstance(static.stem.act, torch.nn.SiLU) and isinstance(static.act_head, torch.nn.Hardswish)
    assert isinstance(static.blocks[1][0].act_dw, torch.nn.SiLU)


def test_inputs_of_another_size_are_resized_bicubically():
    space = make_space("attentive_mbv3")
    net = make_supernet(space)
    arch = net.set_active(space.max())
    x = torch.rand(2, 1, 40, 40)
    resized = F.interpolate(x, size=(28, 28), mode="bicubic", align_corners=False)
    with torch.no_grad():
        assert torch.equal(net(x), net(resized))
        assert not torch.allclose(net(x), net(F.interpolate(x, size=(28, 28), mode="bilinear")))
    assert arch["resolution"] == 28


def test_bad_options_name_the_key():
    with pytest.raises(Exception, match=r"interpolation: unknown 'nearest'"):
        make_space("attentive_mbv3", interpolation="nearest")
    with pytest.raises(Exception, match=r"kernel_sizes: needs one entry per stage"):
        make_space("attentive_mbv3", kernel_sizes=((3,),))


@pytest.mark.parametrize("name", ALPHANET_MODELS)
def test_released_models_are_named_archs(alphanet_space, name):
    *choices, _ = ALPHANET_MODELS[name]
    arch = alphanet_space.arch_from_text(f"alphanet_{name}")
    assert arch == alphanet_space.canonical(alphanet_arch(*choices))
    assert alphanet_space.arch_label(arch) == f"alphanet_{name}"


def test_a_space_without_a_released_model_does_not_name_it():
    space = make_space("attentive_mbv3")
    assert space.arch_from_text("alphanet_a0") is None and space.arch_label(space.max()) is None
