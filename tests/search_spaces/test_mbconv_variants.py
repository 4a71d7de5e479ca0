"""Expand ratio 1 (no expansion conv, timm's `ds` block), per-stage choice lists and Once-for-All's
kernel transformation: each against an independent computation and a strict timm rebuild."""
from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

from nas.core.config import load_config
from nas.core.errors import ConfigError
from nas.engine.export import save_export
from search_spaces.ops import ElasticDepthwiseConv2d
from search_spaces.ops.mbconv import DepthwiseSeparable, ElasticInvertedResidual
from search_spaces.timm_models import load_timm_export
from tests.conftest import make_space, make_supernet

# A fixed depthwise-separable first stage (as Once-for-All's and AlphaNet's), then per-stage lists.
PER_STAGE = dict(resolutions=(20, 24), depths=((1,), (1, 2), (1, 2)), widths=((16,), (16, 24), (32,)),
                 kernel_sizes=((3,), (3, 5, 7), (3, 5)), expand_ratios=((1,), (3, 4), (1, 6)),
                 strides=(1, 2, 2), se=(True, False, True), activations=("relu", "relu", "hswish"),
                 head_width=32, num_features=64)


def _bn_eval(bn, x):
    return F.batch_norm(x, bn.running_mean[: x.shape[1]], bn.running_var[: x.shape[1]],
                        bn.weight[: x.shape[1]], bn.bias[: x.shape[1]], False, 0.0, bn.eps)


def test_expand_ratio_one_block_has_no_expansion_conv_and_computes_dw_se_project():
    torch.manual_seed(0)
    block = ElasticInvertedResidual(16, 16, 1, 3, 1, True, "relu").eval()
    assert block.conv_pw is None and block.bn1 is None
    for bn in (block.bn2, block.bn3):
        torch.nn.init.uniform_(bn.running_var, 0.5, 2.0)
        torch.nn.init.normal_(bn.running_mean)
    x = torch.randn(2, 16, 9, 9)
    out = F.relu(_bn_eval(block.bn2, F.conv2d(x, block.conv_dw.weight.full(), None, 1, 1, groups=16)))
    se = block.se
    pooled = out.mean((2, 3), keepdim=True)
    scale = F.conv2d(F.relu(F.conv2d(pooled, se.conv_reduce.weight.full(), se.conv_reduce.bias.full())),
                     se.conv_expand.weight.full(), se.conv_expand.bias.full())
    out = out * F.hardsigmoid(scale)
    expected = _bn_eval(block.bn3, F.conv2d(out, block.conv_pwl.weight.full())) + x
    with torch.no_grad():
        assert torch.allclose(block(x), expected, atol=1e-5)
        static = block.to_static().eval()
        assert isinstance(static, DepthwiseSeparable)
        assert list(static.state_dict()) [:2] == ["conv_dw.weight", "bn1.weight"]
        assert torch.allclose(static(x), expected, atol=1e-5)


def test_a_block_with_ratio_one_among_others_skips_its_expansion_conv_at_one():
    torch.manual_seed(0)
    block = ElasticInvertedResidual(8, 8, 4, 3, 1, False, "relu").eval()
    block.configure(8, 8, 1, 3)
    x = torch.randn(1, 8, 5, 5)
    expected = _bn_eval(block.bn3, F.conv2d(F.relu(_bn_eval(block.bn2, F.conv2d(
        x, block.conv_dw.weight.full()[:8], None, 1, 1, groups=8))), block.conv_pwl.weight.full()[:, :8])) + x
    with torch.no_grad():
        assert torch.allclose(block(x), expected, atol=1e-5)
    fixed = ElasticInvertedResidual(8, 8, 1, 3, 1, False, "relu")
    with pytest.raises(ValueError, match="without an expansion conv"):
        fixed.configure(8, 8, 3, 3)


def test_per_stage_lists_give_each_stage_its_own_choices_and_flat_lists_still_work():
    space = make_space("mobilenetv3", **PER_STAGE)
    choices = space.choices()
    assert choices["stage0.block0.kernel_size"] == (3,) and choices["stage0.block0.expand_ratio"] == (1,)
    assert choices["stage1.block1.kernel_size"] == (3, 5, 7) and choices["stage1.block1.expand_ratio"] == (3, 4)
    assert choices["stage2.block0.expand_ratio"] == (1, 6)
    flat = make_space("mobilenetv3", small=True)
    assert flat.choices()["stage0.block0.kernel_size"] == flat.choices()["stage1.block1.kernel_size"] == (3, 5)


def test_per_stage_lists_must_have_one_list_per_stage():
    with pytest.raises(ConfigError, match=r"kernel_sizes: a list per stage needs one per stage \(3"):
        make_space("mobilenetv3", **{**PER_STAGE, "kernel_sizes": ((3,), (3, 5))})
    with pytest.raises(ConfigError, match=r"kernel_sizes\[1\]: must be odd"):
        make_space("mobilenetv3", **{**PER_STAGE, "kernel_sizes": ((3,), (3, 4), (3,))})


def test_per_stage_lists_load_from_yaml():
    config = load_config("fashion_mnist_mbv3", [
        "space.options.depths=[[1],[1,2]]", "space.options.widths=[[16],[24]]", "space.options.strides=[1,2]",
        "space.options.se=[false,true]", "space.options.activations=[relu,hswish]",
        "space.options.kernel_sizes=[[3],[3,5]]", "space.options.expand_ratios=[[1],[3,6]]"])
    assert config.space.options.stage_kernel_sizes(0) == (3,)
    assert config.space.options.stage_expand_ratios(1) == (3, 6)


@pytest.mark.slow
def test_ds_blocks_per_stage_lists_and_transformed_kernels_rebuild_in_timm_strictly(tmp_path):
    space = make_space("mobilenetv3", **PER_STAGE, kernel_transform=True)
    net = make_supernet(space)
    with torch.no_grad():
        for name, matrix in net.named_parameters():
            if ".transforms." in name:
                matrix.add_(0.1 * torch.randn_like(matrix))
    rng = random.Random(3)
    archs = [space.min(), space.max()] + [space.sample(rng) for _ in range(4)]
    assert any(a["stage2.block0.expand_ratio"] == 1 for a in archs)
    for i, arch in enumerate(archs):
        save_export(net, arch, tmp_path / str(i))
        model = load_timm_export(tmp_path / str(i))     # strict=True inside
        net.set_active(arch)
        x = torch.randn(2, 1, arch["resolution"], arch["resolution"])
        with torch.no_grad():
            assert (model(x) - net(x)).abs().max().item() <= 1e-5, arch
        assert sum(p.numel() for p in model.parameters()) == space.params(arch)


def _transformed(weight: torch.Tensor, matrices: dict, kernel: int) -> torch.Tensor:
    """Once-for-All's rule written out per channel: crop, flatten, multiply by the matrix, step by step."""
    out = []
    for channel in weight[:, 0]:
        k = channel.shape[-1]
        while k > kernel:
            small = k - 2
            taps = channel[1:-1, 1:-1].reshape(-1)
            channel = (matrices[f"{k}to{small}"] @ taps).reshape(small, small)
            k = small
        out.append(channel)
    return torch.stack(out)[:, None]


def test_kernel_transformation_chains_learned_matrices_and_is_baked_into_the_export():
    torch.manual_seed(0)
    dw = ElasticDepthwiseConv2d(6, 7, kernel_sizes=(3, 5, 7), kernel_transform=True)
    assert sorted(dw.transforms) == ["5to3", "7to5"]
    assert torch.equal(dw.transforms["7to5"], torch.eye(25))
    dw.configure(4, 3)
    crop = dw.weight.full()[:4, :, 2:5, 2:5]
    assert torch.equal(dw.active_weight(), crop)           # identity: the centre crop
    with torch.no_grad():
        for matrix in dw.transforms.values():
            matrix.add_(0.1 * torch.randn_like(matrix))
    matrices = dict(dw.transforms.items())
    for kernel in (3, 5):
        dw.configure(4, kernel)
        expected = _transformed(dw.weight.full()[:4].detach(), matrices, kernel)
        assert torch.allclose(dw.active_weight(), expected, atol=1e-6)
        x = torch.randn(2, 4, 8, 8)
        with torch.no_grad():
            assert torch.allclose(dw.to_static()(x), F.conv2d(x, expected, None, 1, kernel // 2, groups=4), atol=1e-5)
    dw.configure(4, 3)
    dw(torch.randn(1, 4, 6, 6)).sum().backward()
    assert dw.transforms["7to5"].grad.abs().sum() > 0 and dw.transforms["5to3"].grad.abs().sum() > 0
    with pytest.raises(ValueError, match="outside"):
        ElasticDepthwiseConv2d(6, 7, kernel_sizes=(5, 7), kernel_transform=True).configure(6, 3)


def test_kernel_transform_option_puts_the_matrices_in_the_supernet():
    space = make_space("mobilenetv3", **{**PER_STAGE, "kernel_transform": True})
    names = [n for n, _ in space.build_supernet().named_parameters() if ".transforms." in n]
    assert "blocks.1.0.conv_dw.transforms.7to5" in names and "blocks.2.0.conv_dw.transforms.5to3" in names
    assert not any(n.startswith("blocks.0.") for n in names)        # one kernel: nothing to transform
