"""Elastic ops: slices equal independent static layers; weight sources swap per op."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from nas.engine.counting import counted_flops
from search_spaces.ops import (
    ElasticBatchNorm2d,
    ElasticConv2d,
    ElasticDepthwiseConv2d,
    ElasticLinear,
    ElasticSqueezeExcite,
    SharedTensor,
    WeightSource,
    make_divisible,
    set_source,
)
from search_spaces.ops.conv import conv_macs
from tests.conftest import make_space, make_supernet


def test_conv_slices_prefix_channels_and_centre_of_kernel():
    torch.manual_seed(0)
    conv = ElasticConv2d(8, 12, 7, stride=2, bias=True)
    conv.configure(5, 6, 3)
    x = torch.randn(2, 5, 9, 9)
    full = conv.weight.full()
    expected = F.conv2d(x, full[:6, :5, 2:5, 2:5], conv.bias.full()[:6], stride=2, padding=1)
    assert torch.allclose(conv(x), expected, atol=1e-6)
    static = conv.to_static()
    assert isinstance(static, nn.Conv2d) and static.weight.shape == (6, 5, 3, 3)
    assert torch.allclose(static(x), expected, atol=1e-6)
    assert counted_flops(static, x[:1]) == 2 * conv.macs((9, 9)) == 2 * conv_macs(5, 6, 3, (5, 5))


def test_depthwise_and_linear_slices():
    torch.manual_seed(0)
    dw = ElasticDepthwiseConv2d(16, 5)
    dw.configure(8, 3)
    x = torch.randn(2, 8, 6, 6)
    expected = F.conv2d(x, dw.weight.full()[:8, :, 1:4, 1:4], padding=1, groups=8)
    assert torch.allclose(dw(x), expected, atol=1e-6)
    assert torch.allclose(dw.to_static()(x), expected, atol=1e-6)
    linear = ElasticLinear(10, 7)
    linear.configure(4, 3)
    v = torch.randn(5, 4)
    expected = v @ linear.weight.full()[:3, :4].T + linear.bias.full()[:3]
    assert torch.allclose(linear(v), expected, atol=1e-6)
    assert torch.allclose(linear.to_static()(v), expected, atol=1e-6)


def test_batch_norm_updates_only_the_sliced_statistics():
    bn = ElasticBatchNorm2d(8)
    x = torch.randn(16, 5, 4, 4) * 3 + 2
    bn.train()(x)
    assert torch.allclose(bn.running_mean[:5], 0.1 * x.mean((0, 2, 3)), atol=1e-5)
    assert torch.equal(bn.running_mean[5:], torch.zeros(3))
    assert torch.equal(bn.running_var[5:], torch.ones(3))
    assert int(bn.num_batches_tracked) == 1
    static = bn.to_static(5).eval()
    assert torch.allclose(static(x), bn.eval()(x), atol=1e-6)


def test_se_reduced_width_follows_timm_rounding():
    se = ElasticSqueezeExcite(96)
    se.configure(72)
    assert se.reduced == make_divisible(0.25 * 72, 8) == 24
    x = torch.randn(2, 72, 3, 3)
    assert torch.allclose(se.to_static()(x), se(x), atol=1e-6)


class _Scaled(WeightSource):
    """A different source with the same shape: the shared tensor times a constant."""

    def __init__(self, base: torch.Tensor, scale: float):
        super().__init__()
        self.base, self.scale, self.shape = base, scale, tuple(base.shape)

    def full(self) -> torch.Tensor:
        return self.base * self.scale


def test_swapping_one_ops_weight_source_changes_only_that_op():
    space = make_space("mobilenetv3")
    net = make_supernet(space)
    net.set_active(space.max())
    seen = {}
    ops = {name: m for name, m in net.named_modules()
           if isinstance(m, (ElasticConv2d, ElasticDepthwiseConv2d, ElasticLinear))}
    handles = [m.register_forward_hook(lambda m, i, o, name=name: seen.__setitem__(name, (i[0].clone(), o.clone())))
               for name, m in ops.items()]
    with torch.no_grad():
        net(torch.randn(2, 1, 28, 28))
    for handle in handles:
        handle.remove()
    target = net.blocks[1][0].conv_pw
    original = target.weight
    set_source(target, "weight", _Scaled(original.tensor.detach(), 2.0))
    with torch.no_grad():
        changed = {name for name, m in ops.items()
                   if not torch.allclose(m(seen[name][0]), seen[name][1], atol=1e-6)}
    assert changed == {"blocks.1.0.conv_pw"}
    assert isinstance(original, SharedTensor)
