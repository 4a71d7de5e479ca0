"""BN recalibration (idempotent, exact pooled statistics, weights untouched)."""
from __future__ import annotations

import torch
from torch import nn

from nas.engine.bn import recalibrate_bn
from tests.conftest import make_space, make_supernet


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 6, 3), nn.BatchNorm2d(6), nn.ReLU(), nn.Conv2d(6, 4, 1), nn.BatchNorm2d(4))


def test_one_batch_sets_running_mean_to_the_batch_channel_mean():
    net = _net()
    x = torch.randn(16, 3, 8, 8) * 2 + 1
    recalibrate_bn(net, [x])
    with torch.no_grad():
        h = net[0](x)
        assert torch.allclose(net[1].running_mean, h.mean((0, 2, 3)), atol=1e-5)
        assert torch.allclose(net[1].running_var, h.var((0, 2, 3), unbiased=True), rtol=1e-4)


def test_equal_batches_average_to_the_mean_of_batch_means_and_is_idempotent():
    net = _net()
    batches = [torch.randn(8, 3, 8, 8) + i for i in range(3)]
    recalibrate_bn(net, batches)
    first = {k: v.clone() for k, v in net.state_dict().items()}
    with torch.no_grad():
        means = torch.stack([net[0](b).mean((0, 2, 3)) for b in batches])
    assert torch.allclose(net[1].running_mean, means.mean(0), atol=1e-5)
    recalibrate_bn(net, batches)
    for key, value in net.state_dict().items():
        assert torch.allclose(value.float(), first[key].float(), atol=1e-6), key


def test_weights_and_mode_are_untouched_and_eval_is_deterministic():
    net = _net().eval()
    weights = {k: v.clone() for k, v in net.named_parameters()}
    tracked = net[1].num_batches_tracked.clone()
    recalibrate_bn(net, [torch.randn(8, 3, 8, 8)])
    assert not net.training and all(not m.training for m in net.modules())
    assert all(torch.equal(v, weights[k]) for k, v in net.named_parameters())
    assert torch.equal(net[1].num_batches_tracked, tracked) and net[1].momentum == 0.1
    x = torch.randn(2, 3, 8, 8)
    assert torch.equal(net(x), net(x))


def test_supernet_recalibration_matches_its_export_recalibrated_alike():
    space = make_space("mobilenetv3")
    supernet = make_supernet(space)
    arch = space.sample(__import__("random").Random(3))
    supernet.set_active(arch)
    size = space.input_size(arch)
    batches = [torch.randn(16, 1, size, size) for _ in range(2)]
    export = supernet.export(arch)
    recalibrate_bn(supernet, batches)
    recalibrate_bn(export, batches)
    x = torch.randn(4, 1, size, size)
    with torch.no_grad():
        assert (supernet.eval()(x) - export.eval()(x)).abs().max() <= 1e-4
