"""A ViT's channel sorting before progressive shrinking opens heads, MLP ratios and the embedding:
the full network computes the same outputs after every sort, what each sort reads comes out in
descending L1 importance, tiers keep their members, and a ViT run says what it sorted."""
from __future__ import annotations

import pytest
import torch

from nas.core.config import load_config
from search_spaces.ops.transformer import mlp_hidden
from search_spaces.vit import ViTOptions, ViTSpace, ViTSupernet
from supernets.channel_order_vit import sort_block_expansions, sort_embedding, sort_heads, sort_mlp_hidden
from tests.support.helpers import tiny_trainer
from tests.support.tiny import tiny_config

OPTIONS = ViTOptions(image_size=28, patch_size=7, embed_dims=(16, 24), depths=(1, 2), num_heads=(2, 3, 4),
                     head_dim=4, mlp_ratios=(2.0, 3.0, 4.0))


def _random_supernet(pool: str = "token", seed: int = 0) -> ViTSupernet:
    """Every weight drawn at random (distinct importances; layer norms away from 1 and 0)."""
    torch.manual_seed(seed)
    supernet = ViTSupernet(ViTSpace(ViTOptions(**{**OPTIONS.__dict__, "pool": pool}), in_chans=1, num_classes=10))
    with torch.no_grad():
        for parameter in supernet.parameters():
            parameter.copy_(torch.randn_like(parameter) * 0.3)
    return supernet.eval()


def _outputs(supernet: ViTSupernet, arch) -> torch.Tensor:
    supernet.set_active(arch)
    with torch.no_grad():
        return supernet(torch.randn(4, 1, 28, 28, generator=torch.Generator().manual_seed(1)))


def _head_importance(attn) -> torch.Tensor:
    proj = attn.proj.weight.tensor
    return proj.abs().view(proj.shape[0], attn.qkv.max_heads, attn.qkv.head_dim).sum(dim=(0, 2))


@pytest.mark.parametrize("pool", ["token", "avg"])
def test_sorting_leaves_the_full_networks_function_unchanged(pool):
    supernet = _random_supernet(pool)
    largest = supernet.space.max()
    before = _outputs(supernet, largest)
    opened = {key: values for key, values in supernet.space.choices().items() if key.startswith("layer")}
    assert sort_block_expansions(supernet, opened, tier=1) == 2
    sort_embedding(supernet)
    after = _outputs(supernet, largest)
    torch.testing.assert_close(after, before, rtol=1e-5, atol=1e-5)
    smaller = {**largest, "layer0.num_heads": 2, "layer0.mlp_ratio": 2.0, "embed_dim": 16}
    assert not torch.allclose(_outputs(_random_supernet(pool), smaller), _outputs(supernet, smaller))


def test_heads_hidden_units_and_features_come_out_most_important_first():
    supernet = _random_supernet()
    block = supernet.blocks[0]
    qkv_rows_of_head = block.attn.qkv.weight.tensor.view(3, 4, 4, -1)[:, 2].clone()
    order = sort_heads(block.attn)
    importance = _head_importance(block.attn)
    assert torch.all(importance[:-1] >= importance[1:])
    torch.testing.assert_close(block.attn.qkv.weight.tensor.view(3, 4, 4, -1)[:, int((order == 2).nonzero())],
                               qkv_rows_of_head)       # a head's q, k and v rows moved together
    fc1_row = block.mlp.fc1.weight.tensor[5].clone()
    order = sort_mlp_hidden(block.mlp)
    columns = block.mlp.fc2.weight.tensor.abs().sum(dim=0)
    assert torch.all(columns[:-1] >= columns[1:])
    assert torch.equal(block.mlp.fc1.weight.tensor[int((order == 5).nonzero())], fc1_row)
    sort_embedding(supernet)
    readers = sum(w.abs().sum(dim=0) for b in supernet.blocks for w in (b.attn.qkv.weight.tensor, b.mlp.fc1.weight.tensor))
    readers = readers + supernet.head.weight.tensor.abs().sum(dim=0)
    assert torch.all(readers[:-1] >= readers[1:])


def test_tiers_keep_the_heads_and_units_the_previous_phase_trained():
    supernet = _random_supernet(seed=3)
    block = supernet.blocks[1]
    heads = sort_heads(block.attn, head_counts=(4, 3, 2), tier=1)
    assert set(heads[:3].tolist()) == {0, 1, 2} and heads[3] == 3
    widths = [mlp_hidden(24, r) for r in (4.0, 3.0, 2.0)]
    units = sort_mlp_hidden(block.mlp, widths, tier=1)
    assert set(units[:widths[1]].tolist()) == set(range(widths[1]))
    inside = block.mlp.fc2.weight.tensor.abs().sum(dim=0)[:widths[1]]
    assert torch.all(inside[:-1] >= inside[1:])


def test_a_vit_run_says_what_it_sorted_entering_each_phase(tmp_path):
    data = tiny_config(steps=16, space="vit")
    data["strategy"] = {"name": "progressive_shrinking", "distill": {"name": "kl"}, "options": {"phases": [
        {"name": "full", "share": 2}, {"name": "depth", "share": 1}, {"name": "expand_partial", "share": 1},
        {"name": "expand", "share": 1}, {"name": "width", "share": 1}]}}
    from nas.engine.data.datasets import load_dataset
    splits = load_dataset("fashion_mnist", val_size=128, train_size=256)
    trainer = tiny_trainer(load_config(data), splits, tmp_path)
    for step in range(16):
        images = splits.train_images[16 * step:16 * step + 16].float() / 255
        trainer.train_one_step(images, splits.train_labels[16 * step:16 * step + 16])
    reasons = {trainer.strategy.phases[i].name: change.reason for i, (_, change) in
               zip(range(1, 6), trainer.restructures)}
    assert "heads and MLP hidden units of 2 layers sorted by L1 importance (OFA stage 0)" in reasons["expand_partial"]
    assert "OFA stage 1" not in reasons["expand_partial"] and "sorted" not in reasons["depth"]
    assert "embedding features sorted by L1 importance" in reasons["width"]
