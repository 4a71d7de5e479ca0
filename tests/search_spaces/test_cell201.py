"""NAS-Bench-201 cell space: dead-edge pruning, distinct-network count, NB201 strings, exports."""
from __future__ import annotations

import itertools
import random

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from nas.core.errors import ArchError
from search_spaces.cell201 import (
    EDGES,
    by_sum_then_order,
    edge_key,
    from_nb201_string,
    live_edges,
    to_nb201_string,
)
from tests.conftest import make_space, make_supernet

# node 1 unreachable (edge1<-0 none), node 2 fed only by node 1: only edge3<-0 is live
DEAD_HEAVY = {"edge1<-0": "none", "edge2<-0": "none", "edge2<-1": "conv_3x3",
              "edge3<-0": "conv_1x1", "edge3<-1": "conv_3x3", "edge3<-2": "avg_pool_3x3"}
PRUNED = {**DEAD_HEAVY, "edge2<-1": "none", "edge3<-1": "none", "edge3<-2": "none"}
# node 1 reachable but leads nowhere (edges out of node 1 are none)
DEAD_END = {"edge1<-0": "conv_3x3", "edge2<-0": "skip_connect", "edge2<-1": "none",
            "edge3<-0": "none", "edge3<-1": "none", "edge3<-2": "conv_1x1"}
ALL_NONE = {edge_key(to, source): "none" for to, source in EDGES}


def _outputs(net, arch, x):
    net.set_active(arch)
    with torch.no_grad():
        return net(x)


def test_archs_differing_only_on_dead_edges_are_one_network():
    space = make_space("cell201")
    net = make_supernet(space)
    x = torch.randn(4, 1, 28, 28)
    assert space.canonical(DEAD_HEAVY) == space.canonical(PRUNED) == PRUNED
    assert torch.equal(_outputs(net, DEAD_HEAVY, x), _outputs(net, PRUNED, x))
    assert space.macs(DEAD_HEAVY) == space.macs(PRUNED)
    dead_end_variant = {**DEAD_END, "edge1<-0": "avg_pool_3x3"}
    assert space.canonical(DEAD_END) == space.canonical(dead_end_variant)
    assert space.canonical(DEAD_END)["edge1<-0"] == "none"
    assert torch.equal(_outputs(net, DEAD_END, x), _outputs(net, dead_end_variant, x))
    # a live edge does change the output
    live_change = {**PRUNED, "edge3<-0": "conv_3x3"}
    assert not torch.allclose(_outputs(net, live_change, x), _outputs(net, PRUNED, x))


def test_dead_convolutions_are_not_built_in_the_export():
    space = make_space("cell201")
    net = make_supernet(space)
    model = net.export(DEAD_HEAVY)
    cells = [m for m in model.cells if hasattr(m, "edges")]
    assert len(cells) == 3 * space.options.cells_per_stage
    for cell in cells:
        assert list(cell.edges) == ["3<-0"]
        assert sum(isinstance(m, nn.Conv2d) for m in cell.modules()) == 1
    x = torch.randn(4, 1, 28, 28)
    assert (model(x) - _outputs(net, DEAD_HEAVY, x)).abs().max().item() <= 1e-5


def test_unpruned_dead_convolution_would_change_the_output():
    """Why pruning matters: a conv fed by an all-zero node outputs its BN shift in eval mode."""
    space = make_space("cell201")
    net = make_supernet(space)
    conv = net.cells[0].convs["3<-1"]["conv_3x3"]
    zeros = torch.zeros(2, space.options.channels, 28, 28)
    with torch.no_grad():
        assert conv(zeros).abs().max().item() > 1e-3


def test_all_none_cells_output_zeros_and_export_exactly():
    space = make_space("cell201")
    net = make_supernet(space)
    arch = ALL_NONE
    model = net.export(arch)
    x = torch.randn(3, 1, 28, 28)
    with torch.no_grad():
        assert torch.equal(model.cells[0](model.stem(x)), torch.zeros(3, 8, 28, 28))
        assert torch.allclose(model(x), _outputs(net, arch, x), atol=1e-5)
        assert torch.allclose(model(x), model(torch.randn(3, 1, 28, 28)), atol=1e-6)   # input ignored


def test_min_is_a_live_network_as_cheap_as_the_dead_all_none_cell():
    space = make_space("cell201")
    low = space.min()
    assert space.is_live(low) and not space.is_live(ALL_NONE)
    assert space.costs(low) == space.costs(ALL_NONE)
    assert low == {**ALL_NONE, "edge3<-0": "skip_connect"}   # fewest and cheapest operations
    for arch in space.enumerate():            # nothing live is cheaper; only dead archs tie with it
        assert space.costs(arch) >= space.costs(low)
    assert space.is_live(space.max()) and set(space.max().values()) == {"conv_3x3"}
    net = make_supernet(space)
    x = torch.randn(3, 1, 28, 28)
    assert not torch.allclose(_outputs(net, low, x), _outputs(net, low, torch.randn(3, 1, 28, 28)))


def test_the_extremes_search_order_is_the_sorted_one_made_lazily():
    for sizes in ([5] * 6, [3, 1, 4, 2], [2]):
        expected = sorted(itertools.product(*(range(n) for n in sizes)), key=lambda t: (sum(t), t))
        assert list(by_sum_then_order(sizes)) == expected


def test_min_and_max_of_a_fresh_space_cost_far_less_than_sorting_the_space():
    """They used to sort every index tuple of the space (1.6 s a call on a loaded machine, 6 calls
    a GM split); the sort is timed here as the yardstick, on the same machine and load."""
    import time

    sizes = [5] * 6
    start = time.perf_counter()
    sorted(itertools.product(*(range(n) for n in sizes)), key=lambda t: (sum(t), [i for i in t]))
    sorting = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(3):
        space = make_space("cell201")
        space.min(), space.max()
    assert (time.perf_counter() - start) / 3 < sorting / 5


def test_min_stays_dead_when_every_live_network_costs_more():
    space = make_space("cell201", operations=("none", "conv_1x1"))
    assert space.min() == ALL_NONE and not space.is_live(space.min())
    assert space.max() == {key: "conv_1x1" for key in ALL_NONE}
    only_none = make_space("cell201", operations=("none",))
    assert only_none.min() == only_none.max() == ALL_NONE


def test_min_of_a_restricted_space_is_its_own():
    full = make_space("cell201")
    assert full.min()["edge3<-0"] == "skip_connect"      # cached on `full` before restricting
    space = full.restrict("edge3<-0", ["none"])
    low = space.min()
    assert space.is_live(low) and low["edge3<-0"] == "none"
    assert space.costs(low) == space.costs(ALL_NONE)
    assert full.min()["edge3<-0"] == "skip_connect"


def _closed_edge_sets() -> list[tuple[tuple[int, int], ...]]:
    """Edge sets S whose every edge is live when exactly S is non-`none`."""
    closed = []
    for r in range(len(EDGES) + 1):
        for subset in itertools.combinations(EDGES, r):
            arch = {edge_key(*e): ("conv_3x3" if e in subset else "none") for e in EDGES}
            if {(to, source) for to, source, _ in live_edges(arch)} == set(subset):
                closed.append(subset)
    return closed


def test_size_counts_distinct_canonical_networks():
    space = make_space("cell201")
    assert space.raw_size() == 5 ** 6 == 15_625
    choices = space.choices()
    distinct = {tuple(space.canonical(dict(zip(choices, values))).values())
                for values in itertools.product(*choices.values())}
    # independently: each closed set of live edges with 4 non-none operations per edge
    assert space.size() == len(distinct) == sum(4 ** len(s) for s in _closed_edge_sets()) == 9445


def test_restricted_space_admits_only_archs_with_the_restricted_edge_live():
    full = make_space("cell201")
    space = full.restrict("edge2<-1", ["conv_1x1", "conv_3x3"])
    rng = random.Random(0)
    for _ in range(50):
        arch = space.sample(rng)
        assert "edge2<-1" in space.active_keys(arch) and full.canonical(arch) == arch
    # independently: the full space's networks whose edge2<-1 is live and a convolution
    networks = {tuple(full.canonical(dict(zip(full.choices(), values))).items())
                for values in itertools.product(*full.choices().values())}
    expected = {a for a in networks if dict(a)["edge2<-1"] in ("conv_1x1", "conv_3x3")}
    assert space.size() == len(expected) == len(space.enumerate()) < full.size()
    assert {tuple(a.items()) for a in space.enumerate()} == expected
    for arch in (space.min(), space.max()):
        assert tuple(arch.items()) in expected
    assert space.macs(space.min()) == min(full.macs(dict(a)) for a in expected)


def test_nb201_string_exact_and_round_trip():
    arch = {"edge1<-0": "conv_3x3", "edge2<-0": "none", "edge2<-1": "skip_connect",
            "edge3<-0": "avg_pool_3x3", "edge3<-1": "conv_1x1", "edge3<-2": "none"}
    text = "|nor_conv_3x3~0|+|none~0|skip_connect~1|+|avg_pool_3x3~0|nor_conv_1x1~1|none~2|"
    assert to_nb201_string(arch) == text
    assert from_nb201_string(text) == arch
    space = make_space("cell201")
    rng = random.Random(5)
    for _ in range(20):
        raw = {key: rng.choice(values) for key, values in space.choices().items()}
        assert from_nb201_string(to_nb201_string(raw)) == raw


@pytest.mark.parametrize("text, problem", [
    ("|nor_conv_3x3~0|+|none~0|skip_connect~1|", "expected 3 nodes"),
    ("|nor_conv_3x3~0|+|none~0|+|none~0|none~1|none~2|", "node 2 must read"),
    ("|nor_conv_3x3~0|+|none~0|skip_connect~0|+|none~0|none~1|none~2|", "must end with ~1"),
    ("|conv_3x3~0|+|none~0|none~1|+|none~0|none~1|none~2|", "did you mean 'nor_conv_3x3'"),
])
def test_malformed_nb201_strings_say_what_is_wrong(text, problem):
    with pytest.raises(ArchError, match=problem):
        from_nb201_string(text)


def test_layers_run_their_modules_with_the_counted_macs():
    space = make_space("cell201")
    net = make_supernet(space)
    for arch in (space.min(), space.max(), DEAD_HEAVY, space.sample(random.Random(2))):
        model = net.export(arch)
        layers = space.layers(arch)
        assert sum(layer.macs for layer in layers) == space.macs(arch)
        for layer in layers:
            x = torch.randn(2, *layer.in_shape)
            with torch.no_grad(), FlopCounterMode(display=False) as counter:
                for path in layer.modules:
                    x = model.get_submodule(path)(x)
            assert counter.get_total_flops() == 2 * 2 * layer.macs, layer.key   # batch 2
        assert x.shape == (2, space.num_classes)
    edge_layers = [layer for layer in space.layers(DEAD_HEAVY) if layer.key.startswith("edge:")]
    assert [layer.modules for layer in edge_layers] == [("cells.0.edges.3<-0",), ("cells.2.edges.3<-0",),
                                                        ("cells.4.edges.3<-0",)]


def test_layer_keys_are_few_per_operation_and_stage():
    """Cells are listed edge by edge, so a latency table covers the space with a few entries."""
    space = make_space("cell201")
    keys = {layer.key for arch in space.enumerate() for layer in space.layers(arch)}
    # 4 edge operations x 3 stages, the stem, 2 reduction blocks and the head
    assert len(keys) == 4 * 3 + 1 + 2 + 1


def _bn_channels(model: nn.Module) -> int:
    return sum(m.num_features for m in model.modules() if isinstance(m, nn.BatchNorm2d))


def test_bn_without_affine_learns_no_scale_and_exports_exactly():
    """`bn_affine: false`: no BN holds a weight or bias, the analytic params drop by exactly
    two per BN channel of the export, and the export equals the supernet in train and eval mode."""
    from nas.engine.counting import parameter_count
    affine, plain = make_space("cell201"), make_space("cell201", bn_affine=False)
    net = make_supernet(plain)
    bns = [m for m in net.modules() if isinstance(m, nn.BatchNorm2d)]
    assert bns and all(m.weight is None and m.bias is None for m in bns)
    rng = random.Random(3)
    for arch in [plain.max(), plain.min(), DEAD_HEAVY] + [plain.sample(rng) for _ in range(8)]:
        model = net.export(arch)
        assert parameter_count(model) == plain.params(arch)
        assert plain.params(arch) == affine.params(arch) - 2 * _bn_channels(model)
        assert plain.macs(arch) == affine.macs(arch)
        x = torch.randn(6, 1, 28, 28)
        assert (model(x) - _outputs(net, arch, x)).abs().max().item() <= 1e-5
        net.train(), model.train()
        with torch.no_grad():
            assert (model(x) - net(x)).abs().max().item() <= 1e-5   # batch statistics alike
        net.eval()


def test_bn_affine_must_be_a_boolean():
    from nas.core.errors import ConfigError
    from search_spaces.cell201 import Cell201Options
    with pytest.raises(ConfigError, match="bn_affine: must be true or false, got 'no'"):
        Cell201Options(bn_affine="no")


def test_bn_affine_false_from_the_yaml_key_builds_a_supernet_without_bn_scale(tmp_path):
    from nas import api
    from tests.support.fake_data import write_png_tree
    write_png_tree(tmp_path / "tree", train_per_class=2, val_per_class=1)
    config = api.load_config("cifar10_nb201_cpu", [f"data.root={tmp_path / 'tree'}", "space.options.bn_affine=false",
                                                   "space.options.channels=4", "space.options.cells_per_stage=1"])
    net = api.build_space(config).build_supernet()
    bns = [m for m in net.modules() if isinstance(m, nn.BatchNorm2d)]
    assert bns and not any(m.affine for m in bns)
