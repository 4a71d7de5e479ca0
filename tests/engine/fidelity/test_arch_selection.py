"""Arch selection of `nas fidelity`: MACs-stratified, min and max included, deterministic."""
from __future__ import annotations

import math
import re
from collections import Counter

import pytest

from nas.core.arch import arch_id
from nas.core.errors import ConfigError
from nas.core.rng import python_rng
from nas.engine.fidelity.arch_selection import candidate_pool, level_sample, select_archs
from tests.conftest import make_space


def _bin(macs, low, high, count):
    """Equal-width bin of `macs` in [low, high] (the top edge belongs to the last bin)."""
    return min(math.floor((macs - low) / ((high - low) / count)), count - 1)


def _check_stratified(space, archs, pool):
    count = len(archs)
    low, high = space.macs(space.min()), space.macs(space.max())
    ids = [arch_id(a) for a in archs]
    assert len(set(ids)) == count and all(space.canonical(a) == a for a in archs)
    assert archs[0] == space.min() and archs[-1] == space.max()
    assert [space.macs(a) for a in archs] == sorted(space.macs(a) for a in archs)
    assert all(space.is_live(a) for a in archs)
    inner = {_bin(space.macs(a), low, high, count - 2) for a in archs[1:-1]}
    reachable = {_bin(space.macs(a), low, high, count - 2) for a in pool
                 if space.is_live(a) and arch_id(a) not in (ids[0], ids[-1])}
    assert inner == reachable      # every bin the candidates reach holds a selected arch, and no other


@pytest.mark.parametrize("count", [2, 10, 24])
def test_every_distinct_arch_of_a_small_space_is_a_candidate(count):
    space = make_space("cell201", small=True, operations=("none", "skip_connect", "avg_pool_3x3", "conv_3x3"))
    pool = candidate_pool(space, 0)
    assert len(pool) == space.size()          # enumerated: every distinct network
    archs = select_archs(space, count)
    assert len(archs) == count
    if count > 2:
        _check_stratified(space, archs, pool)
    assert archs == select_archs(space, count)
    assert count < 10 or archs != select_archs(space, count, seed=1)


def test_a_large_space_draws_a_pool_that_reaches_both_ends():
    space = make_space("mobilenetv3")
    pool = candidate_pool(space, 0)
    assert space.raw_size() > 20_000 and len(pool) > 3000
    archs = select_archs(space, 16)
    _check_stratified(space, archs, pool)
    low, high = space.macs(space.min()), space.macs(space.max())
    reached = {_bin(space.macs(a), low, high, 14) for a in pool}
    assert reached == set(range(14))          # level draws fill the tails uniform draws miss
    assert [arch_id(a) for a in archs] == [arch_id(a) for a in select_archs(space, 16)]


def test_level_draws_span_the_choices():
    space = make_space("mobilenetv3")
    rng = python_rng(0, "test")
    assert level_sample(space, 0.0, rng) == space.min() and level_sample(space, 1.0, rng) == space.max()


def test_too_many_archs_or_too_few_are_errors():
    space = make_space("cell201", small=True, operations=("none", "skip_connect"))
    with pytest.raises(ConfigError, match="archs: the space 'cell201' offers only"):
        select_archs(space, 1000)
    with pytest.raises(ConfigError, match="archs: must be an integer >= 2"):
        select_archs(space, 1)


@pytest.mark.parametrize("space_name, base, count", [("cell201", 10, 24), ("mobilenetv3", 16, 30)])
def test_an_extended_selection_keeps_its_base_and_fills_the_thinnest_bins(space_name, base, count):
    space = (make_space("cell201", small=True, operations=("none", "skip_connect", "avg_pool_3x3", "conv_3x3"))
             if space_name == "cell201" else make_space("mobilenetv3"))
    smaller = select_archs(space, base)
    archs = select_archs(space, count, extends=base)
    ids = [arch_id(a) for a in archs]
    assert len(set(ids)) == count and {arch_id(a) for a in smaller} <= set(ids)
    assert archs[0] == space.min() and archs[-1] == space.max() and all(space.is_live(a) for a in archs)
    assert [space.macs(a) for a in archs[1:-1]] == sorted(space.macs(a) for a in archs[1:-1])
    assert [arch_id(a) for a in select_archs(space, count, extends=base)] == ids
    # greedy fill of count - 2 bins: a bin given an added arch held the fewest among the bins with
    # candidates left, so no bin with candidates left ends more than one arch below it
    low, high = space.macs(space.min()), space.macs(space.max())
    def bin_of(a):
        return _bin(space.macs(a), low, high, count - 2)

    held = Counter(bin_of(a) for a in archs)
    added = {bin_of(a) for a in archs if arch_id(a) not in {arch_id(s) for s in smaller}}
    left = {bin_of(a) for a in candidate_pool(space, 0) if space.is_live(a) and arch_id(a) not in set(ids)}
    assert added and all(held[b] >= max(held[a] for a in added) - 1 for b in left)


def test_extends_names_a_smaller_selection():
    space = make_space("cell201", small=True, operations=("none", "skip_connect", "avg_pool_3x3", "conv_3x3"))
    assert select_archs(space, 12, extends=12) == select_archs(space, 12)
    with pytest.raises(ConfigError, match="extends: 13 is more than archs=12"):
        select_archs(space, 12, extends=13)
    with pytest.raises(ConfigError, match="extends: must be an integer >= 2"):
        select_archs(space, 12, extends=1)


def test_a_grown_selection_grows_again_when_named_by_its_lineage():
    space = make_space("cell201", small=True, operations=("none", "skip_connect", "avg_pool_3x3", "conv_3x3"))
    grown = {arch_id(a) for a in select_archs(space, 12, extends=6)}
    assert not grown <= {arch_id(a) for a in select_archs(space, 24, extends=12)}    # the plain 12 is another
    again = [arch_id(a) for a in select_archs(space, 24, extends="12-ext6")]
    assert grown <= set(again) and len(set(again)) == 24
    three = {arch_id(a) for a in select_archs(space, 30, extends="24-ext12-ext6")}
    assert set(again) <= three


@pytest.mark.parametrize("extends, message", [
    ("12-ext", "extends: '12-ext' is not a selection: M (the plain M-arch selection) or M-extK (the M-arch "
               "selection grown from the K-arch one, K < M), e.g. 48-ext24"),
    ("twelve", "extends: 'twelve' is not a selection"),
    ("12-ext12", "extends: '12-ext12' is not a selection"),
    ("12-ext1", "extends: must be an integer >= 2"),
    ("30-ext12", "extends: 30 is more than archs=24"),
])
def test_a_lineage_that_is_no_selection_is_refused(extends, message):
    space = make_space("cell201", small=True, operations=("none", "skip_connect", "avg_pool_3x3", "conv_3x3"))
    with pytest.raises(ConfigError, match=re.escape(message)):
        select_archs(space, 24, extends=extends)
