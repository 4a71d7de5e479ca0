"""cell201 at NAS-Bench-201's scale: its costs counted the benchmark's way, and its strings."""
from __future__ import annotations

import random
import re

import pytest

from nas.core.arch import write_arch_file
from nas.core.errors import ArchError, ConfigError
from nas.core.config import load_config
from nas.engine.run import build_space, resolve_arch
from search_spaces.cell201 import Cell201Options, Cell201Space, from_nb201_string, to_nb201_string

# (NAS-Bench-201 string, MFLOPs, M params) as NASLib's zero-cost file records them
# (`naslib/data/zc_nasbench201.json` of automl/NASLib at commit 6639fd15, CIFAR-10 part, keys
# (2, 2, 2, 2, 2, 2), (4, 0, 4, 1, 2, 0) and (3, 4, 4, 4, 4, 4) written as strings; a copy is in
# ../shared/data/nb201/naslib_zc_nb201_cifar10.json). None of these archs has a dead edge.
NASLIB_COSTS = [
    ("|nor_conv_3x3~0|+|nor_conv_3x3~0|nor_conv_3x3~1|+|nor_conv_3x3~0|nor_conv_3x3~1|nor_conv_3x3~2|",
     222.860992, 1.531546),
    ("|avg_pool_3x3~0|+|skip_connect~0|none~1|+|avg_pool_3x3~0|nor_conv_3x3~1|skip_connect~2|", 46.343872, 0.316346),
    ("|nor_conv_1x1~0|+|avg_pool_3x3~0|avg_pool_3x3~1|+|avg_pool_3x3~0|avg_pool_3x3~1|avg_pool_3x3~2|",
     18.757312, 0.101306),
]
# Key (0, 2, 3, 2, 3, 1) of the same file: node 2 feeds nothing, so its two conv_3x3 edges are
# dead; the benchmark runs and counts them, nas prunes them.
NASLIB_DEAD = ("|skip_connect~0|+|nor_conv_3x3~0|nor_conv_3x3~1|+|nor_conv_1x1~0|nor_conv_1x1~1|none~2|",
               88.307392, 0.615386)
CELL_ELEMENTS = 5 * (16 * 32 * 32 + 32 * 16 * 16 + 64 * 8 * 8)    # one edge's output over the 15 cells


def paper_space(costs: str = "nb201") -> Cell201Space:
    return Cell201Space(Cell201Options(image_size=32, channels=16, cells_per_stage=5, costs=costs), 3, 10)


@pytest.mark.parametrize("text, mflops, mparams", NASLIB_COSTS)
def test_nb201_costs_equal_the_benchmarks(text, mflops, mparams):
    macs, params = paper_space().costs(from_nb201_string(text))
    assert (macs, params) == (round(mflops * 1e6), round(mparams * 1e6))


def test_the_benchmark_also_counts_dead_edges_which_nas_prunes():
    text, mflops, mparams = NASLIB_DEAD
    macs, params = paper_space().costs(from_nb201_string(text))
    conv_macs = 5 * 9 * (16 * 16 * 32 * 32 + 32 * 32 * 16 * 16 + 64 * 64 * 8 * 8)
    conv_params = 5 * (9 * (16 * 16 + 32 * 32 + 64 * 64) + 2 * (16 + 32 + 64))
    assert round(mflops * 1e6) - macs == 2 * (conv_macs + 3 * CELL_ELEMENTS)
    assert round(mparams * 1e6) - params == 2 * conv_params


def test_nb201_costs_add_bn_relu_and_pooling_to_the_macs():
    """What `costs: nb201` adds over plain MACs, counted here by hand: a conv edge's ReLU (1) and
    BN (2) per element of its 16x32x32 / 32x16x16 / 64x8x8 cells, a pooling edge's 9 per element."""
    plain, counted = paper_space("macs"), paper_space()
    base = "|skip_connect~0|+|skip_connect~0|skip_connect~1|+|skip_connect~0|skip_connect~1|{}~2|"
    fixed = counted.macs(from_nb201_string(base.format("skip_connect"))) - \
        plain.macs(from_nb201_string(base.format("skip_connect")))
    for op, per_element in (("nor_conv_3x3", 3), ("nor_conv_1x1", 3), ("avg_pool_3x3", 9)):
        arch = from_nb201_string(base.format(op))
        assert counted.macs(arch) - plain.macs(arch) - fixed == per_element * CELL_ELEMENTS
        assert counted.params(arch) == plain.params(arch)


def test_the_shipped_config_builds_the_benchmarks_network():
    space = build_space(load_config("cifar10_nb201"))
    assert (space.in_chans, space.num_classes, space.options) == (3, 10, paper_space().options)
    assert space.costs(space.max()) == (222_860_992, 1_531_546)


def test_strings_round_trip_and_are_accepted_as_archs(tmp_path):
    space, rng = paper_space(), random.Random(0)
    for _ in range(50):
        arch = space.sample(rng)
        text = to_nb201_string(arch)
        assert from_nb201_string(text) == arch and space.arch_label(arch) == text
        assert resolve_arch(space, text) == arch
    arch = space.sample(rng)
    write_arch_file({"arch": space.arch_label(arch)}, tmp_path / "a.yaml")
    assert resolve_arch(space, str(tmp_path / "a.yaml")) == arch


def test_a_dead_edge_is_written_none_beside_the_arch_id():
    # node 1 feeds no node and node 2 is fed by none: 1<-0 and 3<-2 are dead
    text = "|nor_conv_3x3~0|+|none~0|none~1|+|skip_connect~0|none~1|nor_conv_3x3~2|"
    assert paper_space().arch_label(from_nb201_string(text)) == \
        "|none~0|+|none~0|none~1|+|skip_connect~0|none~1|none~2|"


@pytest.mark.parametrize("text, needle", [
    ("|nor_conv_3x3~0|+|none~0|", "expected 3 nodes separated by '+', got 2"),
    ("|nor_conv_3x3~0|+|none~0|conv~1|+|none~0|none~1|none~2|", "unknown operation 'conv'"),
])
def test_bad_strings_are_one_line(text, needle):
    with pytest.raises(ArchError, match=re.escape(needle)):
        resolve_arch(paper_space(), text)


def test_a_string_in_an_arch_file_of_another_space_is_refused(tmp_path):
    from nas.engine.run import build_space as build
    space = build(load_config("fashion_mnist_mbv3"))
    write_arch_file({"arch": "|none~0|+|none~0|none~1|+|none~0|none~1|none~2|"}, tmp_path / "a.yaml")
    with pytest.raises(ArchError, match="is no arch of space 'mobilenetv3'"):
        resolve_arch(space, str(tmp_path / "a.yaml"))


def test_an_unknown_way_of_counting_is_refused():
    with pytest.raises(ConfigError, match="costs: 'nb2O1' is not a way of counting"):
        Cell201Options(costs="nb2O1")


def test_all_725_archs_of_naslibs_file_cost_as_the_benchmark_says(capsys):
    import benchmarks.nb201_costs as costs
    if not costs.NASLIB_FILE.is_file():
        pytest.skip(f"no {costs.NASLIB_FILE} (the shared reference data is absent)")
    assert costs.main() == 0
    out = capsys.readouterr().out
    assert "447/447 equal" in out and "278/278 differ by exactly" in out
