"""The attentive sampler: its invariants (bins, conditionals, BestUp), its table cache and scoring."""
from __future__ import annotations

import contextlib
import json

import pytest
import torch

from nas import api
from nas.core.config import load_config
from nas.core.errors import ConfigError
from search_spaces.base import ArchSpace, LayerCost
from supernets import attentive_table
from supernets.attentive import AttentiveOptions, AttentiveSampler
from supernets.base import StepIO
from tests.support.tiny import tiny_config


class WidthSpace(ArchSpace):
    """MACs = 100 x width; `noise` is free, so every bin's width distribution pins the bin."""

    name = "width_toy"

    def __init__(self):
        super().__init__({"width": tuple(range(1, 9)), "noise": ("a", "b", "c")})

    def layers(self, arch):
        return [LayerCost("w", 100 * arch["width"], arch["width"], (1,), ())]


def _tiny_space():
    return api.build_space(load_config(tiny_config()))


def _sampler(space, seed=0, **options):
    return AttentiveSampler(space, AttentiveOptions(**options), seed)


def test_prior_and_every_conditional_sum_to_one_and_unreached_bins_get_prior_zero():
    table = _sampler(_tiny_space(), bins=40).table
    assert sum(table.prior) == pytest.approx(1.0, abs=1e-12)
    reached = {table.bins.index(row.macs) for row in table.rows if row.uniform}
    assert 0 < len(reached) < 40                                  # some bins are never reached
    assert all((p > 0) == (b in reached) for b, p in enumerate(table.prior))
    for conditional in table.conditionals:
        assert conditional.keys() == _tiny_space().choices().keys()
        for probs in conditional.values():
            assert sum(probs) == pytest.approx(1.0, abs=1e-12) and min(probs) >= 0


def test_candidates_fall_in_the_drawn_bin():
    sampler = _sampler(WidthSpace(), bins=4, k=3)
    targets = set()
    for step in range(100):
        for slot in range(2):
            target, candidates = sampler.candidates(step, slot)
            targets.add(target)
            assert len(candidates) == 3
            assert all(sampler.table.bin_of(arch) == target for arch in candidates)
    assert targets == {0, 1, 2, 3}
    tiny = _sampler(_tiny_space())                 # a real space: feasible bins are hit too
    for step in range(50):
        target, candidates = tiny.candidates(step, 0)
        assert all(tiny.table.bin_of(arch) == target for arch in candidates)


def test_candidate_draw_is_a_pure_function_of_seed_step_and_slot():
    a, b = _sampler(_tiny_space()), _sampler(_tiny_space())
    assert [a.candidates(s, i) for s in range(5) for i in range(2)] == \
           [b.candidates(s, i) for s in range(5) for i in range(2)]
    assert a.candidates(0, 0) != a.candidates(0, 1) or a.candidates(1, 0) != a.candidates(0, 0)
    assert _sampler(_tiny_space(), seed=1).table.prior != a.table.prior


@pytest.mark.parametrize("mode, pick", [("best", min), ("worst", max)])
def test_best_up_trains_the_lowest_loss_candidate_worst_up_the_highest(mode, pick):
    space = WidthSpace()
    sampler = _sampler(space, mode=mode, k=3, num_random=2, bins=2)
    calls = []

    def score(archs):                              # a stand-in loss: the arch's MACs
        calls.append(list(archs))
        return [float(space.macs(arch)) for arch in archs]

    for step in range(20):
        slots = sampler.slots(step, score)
        assert [s.role for s in slots] == ["max", "random0", "random1", "min"]
        for i in range(2):
            candidates = sampler.candidates(step, i)[1]
            assert slots[i + 1].arch == pick(candidates, key=space.macs)
    assert len(calls) == 20 and all(len(c) == 6 for c in calls)    # one scoring call per step


def test_k_equal_one_is_macs_stratified_sampling_without_scoring():
    sampler = _sampler(_tiny_space(), k=1, num_random=1)

    def score(archs):
        raise AssertionError("k = 1 must not score")

    counts = [0] * 16
    draws = 3000
    for step in range(draws):
        arch = sampler.slots(step, score)[1].arch
        assert arch == sampler.candidates(step, 0)[1][0]
        counts[sampler.table.bin_of(arch)] += 1
    total_variation = sum(abs(c / draws - p) for c, p in zip(counts, sampler.table.prior)) / 2
    assert total_variation < 0.05, (counts, sampler.table.prior)


def test_table_is_cached_reused_and_rebuilt_when_the_options_change(tmp_path, monkeypatch):
    space = _tiny_space()
    first = _sampler(space)
    first.cache_dir = tmp_path
    prior = first.table.prior
    path = tmp_path / attentive_table.TABLE_FILE
    stored = json.loads(path.read_text())
    assert stored["key"]["settings"]["bins"] == 16 and len(stored["archs"]) == len(first.table.rows)

    def no_build(*args, **kwargs):
        raise AssertionError("the cached table should have been used")

    monkeypatch.setattr(attentive_table, "build_rows", no_build)
    again = _sampler(space, k=5, mode="worst")       # options that do not shape the table
    again.cache_dir = tmp_path
    assert again.table.prior == prior and again.table.conditionals == first.table.conditionals
    monkeypatch.undo()
    changed = _sampler(space, bins=8)
    changed.cache_dir = tmp_path
    assert len(changed.table.prior) == 8
    assert json.loads(path.read_text())["key"]["settings"]["bins"] == 8


def test_scoring_leaves_parameters_and_every_buffer_bit_identical():
    config = load_config(tiny_config(sampler="attentive", distill="alpha"))
    strategy = api.build_strategy(config)
    supernet = strategy.supernet
    supernet.train()
    generator = torch.Generator().manual_seed(0)
    x, y = torch.randn(16, 1, 28, 28, generator=generator), torch.randint(0, 10, (16,), generator=generator)
    supernet.set_active(supernet.space.max())
    supernet(x)                                       # non-trivial running statistics first
    before = {k: v.clone() for k, v in supernet.state_dict().items()}
    assert any("num_batches_tracked" in k for k in before)
    io = StepIO(forward=supernet, pass_context=lambda final: contextlib.nullcontext(),
                all_reduce_mean=lambda t: t)
    candidates = strategy.sampler.candidates(0, 0)[1] + [supernet.space.min()]
    losses = strategy.scorer(x, y, io)(candidates)
    after = supernet.state_dict()
    for key, value in before.items():
        assert torch.equal(value, after[key]), key
    assert all(p.grad is None for p in supernet.parameters())
    supernet.set_active(supernet.space.min())
    with torch.no_grad():
        expected = strategy._label_loss(supernet(x), y).item()
    assert losses[-1] == expected and len(losses) == 4
    assert not torch.equal(before[next(k for k in before if "num_batches_tracked" in k)],
                           supernet.state_dict()[next(k for k in before if "num_batches_tracked" in k)])


def test_options_are_validated_from_yaml():
    base = {"space": "mobilenetv3", "strategy": {"sampler": {"name": "attentive"}}}
    config = load_config(base)
    assert config.strategy.sampler.options == AttentiveOptions()
    for key, value, message in [("bins", 1, "bins: must be >= 2"), ("k", 0, "k: must be >= 1"),
                                ("mode", "avg", "mode: avg is not allowed")]:
        with pytest.raises(ConfigError, match=rf"strategy\.sampler\.options\.{message}"):
            load_config(base, [f"strategy.sampler.{key}={value}"])


def test_ranks_with_different_batches_train_the_same_subnets_from_all_reduced_losses():
    config = load_config(tiny_config(sampler="attentive", distill="alpha"), ["strategy.sampler.k=4"])
    strategy = api.build_strategy(config)
    supernet = strategy.supernet
    supernet.train()
    generator = torch.Generator().manual_seed(1)
    batches = [(torch.randn(8, 1, 28, 28, generator=generator), torch.randint(0, 10, (8,), generator=generator))
               for _ in range(2)]

    def io(reduce):
        return StepIO(forward=supernet, pass_context=lambda final: contextlib.nullcontext(), all_reduce_mean=reduce)

    step = 3
    candidates = [arch for slot in range(2) for arch in strategy.sampler.candidates(step, slot)[1]]
    local = [torch.tensor(strategy.scorer(x, y, io(lambda t: t))(candidates)) for x, y in batches]
    mean = (local[0] + local[1]) / 2
    chosen = [[s.arch for s in strategy.sampler.slots(step, strategy.scorer(x, y, io(lambda t: mean)))]
              for x, y in batches]
    assert chosen[0] == chosen[1]
    for slot in range(2):
        losses = mean[slot * 4:(slot + 1) * 4]
        assert chosen[0][1 + slot] == candidates[slot * 4 + int(losses.argmin())]
