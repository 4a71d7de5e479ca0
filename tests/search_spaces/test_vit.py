"""ViT space: timm rebuilds of uniform archs, attention MACs, depth gating, runnable layers."""
from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from nas.core.config import load_config
from nas.core.errors import ConfigError
from nas.engine.counting import counted_flops
from nas.engine.export import save_export
from search_spaces.ops import ElasticPatchEmbed
from search_spaces.timm_models import load_timm_export
from tests.conftest import make_space, make_supernet


def _perturbed_supernet(space, seed: int = 0):
    """A supernet whose every parameter (layer norms and class token too) is non-trivial."""
    net = make_supernet(space, seed=seed, randomize_bn=False)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in net.parameters():
            parameter.add_(0.2 * torch.randn(parameter.shape, generator=generator))
    return net


def _uniform(space, dim: int, depth: int, heads: int, ratio: float) -> dict:
    arch = {"embed_dim": dim, "depth": depth}
    for i in range(space.max_depth):
        arch[f"layer{i}.num_heads"], arch[f"layer{i}.mlp_ratio"] = heads, ratio
    return space.canonical(arch)


@pytest.mark.slow
@pytest.mark.parametrize("pool", ["token", "avg"])
def test_uniform_archs_rebuild_in_timm_with_strict_weights(pool, tmp_path):
    space = make_space("vit", pool=pool)
    net = _perturbed_supernet(space)
    # the mid arch slices every elastic dimension: 48 of 64 features, 3 of 4 heads, ratio 3 of 4
    for i, arch in enumerate([space.max(), _uniform(space, 48, 3, 3, 3.0)]):
        config = net.timm_config(arch)
        assert config["model"] == "VisionTransformer" and config["kwargs"]["global_pool"] == pool
        save_export(net, arch, tmp_path / str(i))
        model = load_timm_export(tmp_path / str(i))   # strict=True inside
        net.set_active(arch)
        x = torch.randn(3, 1, 28, 28)
        with torch.no_grad():
            assert (model(x) - net(x)).abs().max().item() <= 1e-5, arch
        assert sum(p.numel() for p in model.parameters()) == space.params(arch)


def test_fewer_heads_and_features_share_the_first_heads_of_q_k_and_v():
    space = make_space("vit")
    net = _perturbed_supernet(space)
    full = net.export(space.max()).blocks[0].attn.qkv
    small = net.export(_uniform(space, 48, 2, 3, 2.0)).blocks[0].attn.qkv
    # timm splits qkv rows as (3, heads, head_dim): each of q, k, v keeps its first 3 heads
    expected_weight = full.weight.view(3, 4, 16, 64)[:, :3, :, :48].reshape(3 * 48, 48)
    assert torch.equal(small.weight, expected_weight)
    assert torch.equal(small.bias, full.bias.view(3, 4, 16)[:, :3].reshape(-1))


def test_timm_config_only_for_uniform_archs_with_full_attention_width():
    space = make_space("vit")
    net = make_supernet(space, randomize_bn=False)
    assert net.timm_config(_uniform(space, 64, 4, 4, 2.0)) is not None
    mixed_heads = dict(_uniform(space, 64, 4, 4, 2.0), **{"layer1.num_heads": 3})
    mixed_ratio = dict(_uniform(space, 64, 4, 4, 2.0), **{"layer3.mlp_ratio": 4.0})
    narrow_attention = _uniform(space, 64, 4, 2, 2.0)   # 2 heads x 16 = 32 != 64
    for arch in (mixed_heads, mixed_ratio, narrow_attention):
        assert net.timm_config(arch) is None, arch
    # heads beyond the depth are inactive: they do not make an arch non-uniform
    assert net.timm_config(dict(_uniform(space, 64, 4, 4, 2.0), **{"layer5.num_heads": 2})) is not None


def test_block_macs_include_both_attention_matmuls():
    space = make_space("vit")
    net = make_supernet(space, randomize_bn=False)
    arch = dict(_uniform(space, 48, 2, 2, 2.0), **{"layer1.num_heads": 3, "layer1.mlp_ratio": 4.0})
    tokens, dim, heads, head_dim, hidden = 17, 48, 3, 16, 192   # 16 patches + class token
    projections = tokens * dim * 3 * heads * head_dim + tokens * heads * head_dim * dim
    attention = 2 * heads * tokens * tokens * head_dim            # QK^T and AV
    mlp = 2 * tokens * dim * hidden
    block = space.layers(arch)[2]
    assert block.modules == ("blocks.1",) and block.in_shape == (tokens, dim)
    assert block.macs == projections + attention + mlp
    static_block = net.export(arch).get_submodule("blocks.1")
    assert counted_flops(static_block, torch.randn(1, tokens, dim)) == 2 * block.macs


def test_every_layer_runs_its_modules_with_the_counted_macs():
    for pool in ("token", "avg"):
        space = make_space("vit", pool=pool)
        net = make_supernet(space, randomize_bn=False)
        for arch in (space.min(), space.max(), space.sample(random.Random(3))):
            model = net.export(arch)
            layers = space.layers(arch)
            assert sum(layer.macs for layer in layers) == space.macs(arch)
            for layer in layers:
                x = torch.randn(1, *layer.in_shape)
                with torch.no_grad(), FlopCounterMode(display=False) as counter:
                    for path in layer.modules:
                        x = model.get_submodule(path)(x)
                assert counter.get_total_flops() == 2 * layer.macs, layer.key
            assert x.shape == (1, space.num_classes)


def test_inactive_layers_change_neither_canonical_form_nor_output():
    space = make_space("vit")
    net = _perturbed_supernet(space)
    arch = space.canonical(dict(space.max(), depth=2))
    other = dict(arch, **{"layer4.num_heads": 2, "layer5.mlp_ratio": 2.0, "layer2.num_heads": 3})
    assert space.canonical(other) == arch
    assert space.macs(other) == space.macs(arch)
    x = torch.randn(2, 1, 28, 28)
    with torch.no_grad():
        net.set_active(arch)
        first = net(x)
        net.set_active(other)
        assert torch.equal(net(x), first)
    changed = dict(arch, **{"layer1.num_heads": 2})
    with torch.no_grad():
        net.set_active(changed)
        assert not torch.allclose(net(x), first)


def test_patch_embedding_takes_even_patches_without_padding():
    torch.manual_seed(0)
    embed = ElasticPatchEmbed(1, 32, 4)
    embed.configure(24)
    x = torch.randn(2, 1, 28, 28)
    expected = F.conv2d(x, embed.proj.weight.full()[:24], embed.proj.bias.full()[:24], stride=4)
    assert embed(x).shape == (2, 49, 24)
    assert torch.allclose(embed(x), expected.flatten(2).transpose(1, 2), atol=1e-6)
    assert torch.allclose(embed.to_static()(x), embed(x), atol=1e-6)
    assert embed.proj.macs((28, 28)) == 49 * 24 * 16


def test_patch_size_4_space_exports_exactly():
    space = make_space("vit", patch_size=4, embed_dims=(16, 32), depths=(1, 2))
    assert space.num_tokens == 50
    net = _perturbed_supernet(space)
    for arch in (space.min(), space.max()):
        model = net.export(arch)
        x = torch.randn(2, 1, 28, 28)
        net.set_active(arch)
        with torch.no_grad():
            assert (net(x) - model(x)).abs().max().item() <= 1e-5
        assert counted_flops(model, x[:1]) == 2 * space.macs(arch)


def test_options_errors_name_the_field():
    with pytest.raises(ConfigError, match="patch_size: must divide image_size 28, got 6"):
        make_space("vit", patch_size=6)
    with pytest.raises(ConfigError, match="num_heads: must be a non-empty list"):
        make_space("vit", num_heads=())


def test_shipped_config_has_a_max_subnet_of_a_few_mmacs():
    from nas.api import build_space

    space = build_space(load_config("fashion_mnist_vit"))
    assert 1e6 <= space.macs(space.max()) <= 10e6
    assert space.macs(space.max()) >= 10 * space.macs(space.min())
    assert space.size() > 10**6
