"""Channel sorting before elastic widths open: Once-for-All's order, and the function kept.

The expanded-channel sort is compared with the `ofa` package's own `re_organize_middle_weights`
on the same weights (its plain sort, and the tiered sort of its second expand phase); the full
network computes the same outputs before and after every sort, stage outputs included, also
where a shortcut joins the stem's or another stage's stream.
"""
from __future__ import annotations

import pytest
import torch

from nas.core.config import load_config
from nas.engine.run import build_space
from search_spaces.ops.mbconv import ElasticInvertedResidual
from supernets.base import preserved_buffers, seeded_supernet
from supernets.channel_order import (
    expanded_widths,
    importance_order,
    residual_streams,
    sort_block_middle,
    sort_middle_channels,
    sort_stage_widths,
)
from tests.support.tiny import TINY_SPACE

# nas name -> ofa DynamicMBConvLayer name of the same tensor
OFA_NAMES = {
    "conv_pw.weight.tensor": "inverted_bottleneck.conv.conv.weight",
    "conv_dw.weight.tensor": "depth_conv.conv.conv.weight",
    "se.conv_reduce.weight.tensor": "depth_conv.se.fc.reduce.weight",
    "se.conv_reduce.bias.tensor": "depth_conv.se.fc.reduce.bias",
    "se.conv_expand.weight.tensor": "depth_conv.se.fc.expand.weight",
    "se.conv_expand.bias.tensor": "depth_conv.se.fc.expand.bias",
    "conv_pwl.weight.tensor": "point_linear.conv.conv.weight",
    **{f"{nas}.{field}": f"{ofa}.{field}" for nas, ofa in (("bn1", "inverted_bottleneck.bn.bn"),
                                                           ("bn2", "depth_conv.bn.bn"), ("bn3", "point_linear.bn.bn"))
       for field in ("weight", "bias", "running_mean", "running_var")},
}


def _randomised(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Every parameter and BN statistic drawn at random (distinct importances, no ties)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, tensor in module.state_dict().items():
            if tensor.is_floating_point():
                values = torch.rand(tensor.shape, generator=generator) + 0.5 if "running_var" in name \
                    else torch.randn(tensor.shape, generator=generator)
                tensor.copy_(values)
    return module


@pytest.mark.parametrize("tier, ratios", [(0, (4, 6)), (1, (3, 4, 6))])
def test_expanded_channels_sort_as_ofa_reorganizes_them(tier, ratios):
    ofa_layers = pytest.importorskip("ofa.imagenet_classification.elastic_nn.modules.dynamic_layers",
                                     reason="the ofa package (the dev extra) is the reference")
    block = _randomised(ElasticInvertedResidual(16, 24, 6, 7, 1, True, "hswish"), seed=tier)
    reference = ofa_layers.DynamicMBConvLayer([16], [24], [3, 5, 7], list(ratios), 1, "h_swish", True)
    ours, theirs = block.state_dict(), reference.state_dict()
    with torch.no_grad():
        for nas_name, ofa_name in OFA_NAMES.items():
            theirs[ofa_name].copy_(ours[nas_name])

    sort_block_middle(block, expanded_widths(block, ratios), tier)
    reference.re_organize_middle_weights(expand_ratio_stage=tier)

    ours, theirs = block.state_dict(), reference.state_dict()
    for nas_name, ofa_name in OFA_NAMES.items():
        assert torch.equal(ours[nas_name], theirs[ofa_name]), nas_name


def test_tiers_keep_their_channels_and_sort_inside():
    importance = torch.tensor([1.0, 9.0, 5.0, 7.0, 3.0, 8.0])
    assert importance_order(importance).tolist() == [1, 5, 3, 2, 4, 0]
    # tiers [0, 2) and [2, 6): channels 0 and 1 stay first, sorted; the rest sorted after them
    assert importance_order(importance, [2]).tolist() == [1, 0, 5, 3, 2, 4]
    assert importance_order(importance, [2, 4]).tolist() == [1, 0, 3, 2, 5, 4]


def test_the_expanded_sort_puts_the_largest_l1_columns_first():
    block = _randomised(ElasticInvertedResidual(16, 24, 6, 7, 1, True, "hswish"), seed=3)
    before = block.conv_pwl.weight.tensor.detach().abs().sum(dim=(0, 2, 3))
    sort_block_middle(block)
    after = block.conv_pwl.weight.tensor.detach().abs().sum(dim=(0, 2, 3))
    assert torch.equal(after, before.sort(descending=True).values)


def _space(options: dict | None = None):
    data = {"space": {"name": "mobilenetv3", "options": options or TINY_SPACE["options"]},
            "data": {"name": "fashion_mnist"}}
    return build_space(load_config(data))


def _outputs(net, space, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The max subnet's outputs in eval mode (running statistics) and train mode (batch statistics)."""
    net.set_active(space.max())
    with torch.no_grad(), preserved_buffers(net):
        evaluated = net.eval()(x)
        trained = net.train()(x)
    return evaluated, trained


JOINED = {**TINY_SPACE["options"], "widths": [[8], [8, 16], [16, 24]], "strides": [1, 1, 2],
          "depths": [[1], [1, 2], [1, 2]], "se": [False, True, True], "activations": ["relu", "hswish", "hswish"]}


@pytest.mark.parametrize("options", [None, JOINED], ids=["tiny", "shortcuts-join-streams"])
def test_sorting_leaves_the_full_networks_function_unchanged(options):
    space = _space(options)
    net = _randomised(seeded_supernet(space, 0), seed=1)
    x = torch.randn(8, 1, 28, 28)
    before = _outputs(net, space, x)
    blocks = {(i, j): space.choices()[f"stage{i}.block{j}.expand_ratio"]
              for i, stage in enumerate(net.blocks[:-1]) for j in range(len(stage))}
    sort_middle_channels(net, blocks, tier=1)
    sorted_streams = sort_stage_widths(net, range(space.num_stages))
    after = _outputs(net, space, x)
    assert sorted_streams       # something moved
    for a, b in zip(before, after):     # equal up to the order of float sums
        assert (a - b).abs().max() <= 1e-5 * a.abs().max(), (a - b).abs().max() / a.abs().max()


def test_shortcuts_at_full_width_join_streams():
    space = _space(JOINED)
    streams = residual_streams(seeded_supernet(space, 0))
    # stem (8) -> stage 0 (8, stride 1) -> stage 1 (16, stride 1, from 8: no shortcut) -> stage 2 (stride 2)
    assert [s.stages for s in streams] == [(0,), (1,), (2,)]
    same = _space({**JOINED, "widths": [[8], [8, 16], [16]], "strides": [1, 2, 1], "depths": [[1], [1, 2], [1]]})
    net = seeded_supernet(same, 0)
    streams = residual_streams(net)
    assert [s.stages for s in streams] == [(0,), (1, 2)]      # stage 2's first block keeps stage 1's 16 channels
    assert (net.conv_stem, net.bn1) in streams[0].producers    # stage 0's first block adds the stem's output


def test_stage_outputs_sort_by_the_l1_columns_that_read_them():
    space = _space()
    net = _randomised(seeded_supernet(space, 0), seed=2)
    stream = next(s for s in residual_streams(net) if s.stages == (1,))
    def importance():
        return sum(c.weight.tensor.detach().abs().sum(dim=(0, 2, 3)) for c in stream.consumers)
    before = importance()
    sort_stage_widths(net, [1])
    assert torch.allclose(importance(), before.sort(descending=True).values)
