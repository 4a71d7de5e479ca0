"""Contract of every registered space: exact analytic costs, exact exports, valid archs."""
from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nas.core.registry import SPACES
from nas.engine.counting import counted_flops, parameter_count
from nas.engine.export import export_program
from tests.conftest import SMALL_OPTIONS, make_space, make_supernet

SPACE_NAMES = SPACES.names()


def test_every_space_has_test_options():
    assert set(SPACE_NAMES) <= set(SMALL_OPTIONS)


def _archs(space, n: int, seed: int = 0):
    rng = random.Random(seed)
    return [space.min(), space.max()] + [space.sample(rng) for _ in range(n)]


@pytest.mark.parametrize("name", SPACE_NAMES)
def test_analytic_macs_and_params_equal_counted_on_export(name):
    """MACs x 2 equals FlopCounterMode's count on the export at batch 1, exactly.

    The counter counts convolutions (depthwise included, bias excluded), linear layers and
    matmuls; it ignores batch norm, activations, pooling, residual adds and SE's products,
    and the analytic count leaves them out the same way.
    """
    space = make_space(name)
    net = make_supernet(space, randomize_bn=False)
    for arch in _archs(space, 50):
        model = net.export(arch)
        size = space.input_size(arch)
        flops = counted_flops(model, torch.randn(1, space.in_chans, size, size))
        assert flops == 2 * space.macs(arch), arch
        assert parameter_count(model) == space.params(arch), arch


@pytest.mark.parametrize("name", SPACE_NAMES)
def test_export_equals_supernet_output(name):
    space = make_space(name)
    net = make_supernet(space)
    for arch in _archs(space, 20, seed=1):
        model = net.export(arch)
        net.set_active(arch)
        size = space.input_size(arch)
        x = torch.randn(4, space.in_chans, size, size)
        with torch.no_grad():
            difference = (net(x) - model(x)).abs().max().item()
        assert difference <= 1e-5, (arch, difference)


@pytest.mark.parametrize("name", SPACE_NAMES)
def test_min_is_cheaper_than_max(name):
    space = make_space(name)
    assert space.macs(space.min()) < space.macs(space.max())
    assert space.params(space.min()) <= space.params(space.max())


_LOADER = r"""
import json, sys, torch
results = {}
for job in json.loads(sys.argv[1]):
    model = torch.export.load(job["pt2"]).module()
    x = torch.load(job["input"])
    with torch.no_grad():
        results[job["pt2"]] = (model(x) - torch.load(job["expected"])).abs().max().item()
assert not any(m == "nas" or m.startswith(("nas.", "search_spaces")) for m in sys.modules), "imported nas"
print(json.dumps(results))
"""


@pytest.mark.slow
@pytest.mark.parametrize("name", SPACE_NAMES)
def test_saved_pt2_loads_in_plain_torch_at_another_batch_size(name, tmp_path):
    """model.pt2 traced at batch 2 loads in a process that never imports nas, runs at batch 5."""
    space = make_space(name)
    net = make_supernet(space)
    jobs = []
    for i, arch in enumerate(_archs(space, 2, seed=2)):
        model = net.export(arch)
        size = space.input_size(arch)
        x = torch.randn(5, space.in_chans, size, size)
        with torch.no_grad():
            torch.save(model(x), tmp_path / f"{i}.expected.pt")
        torch.save(x, tmp_path / f"{i}.input.pt")
        torch.export.save(export_program(model, x[:2]), str(tmp_path / f"{i}.pt2"))
        jobs.append({k: str(tmp_path / f"{i}.{k}.pt") for k in ("input", "expected")} | {"pt2": str(tmp_path / f"{i}.pt2")})
    out = subprocess.run([sys.executable, "-c", _LOADER, json.dumps(jobs)], capture_output=True, text=True,
                         cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    differences = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(differences) == 4 and max(differences.values()) <= 1e-5, differences


# -- properties of the arch space ---------------------------------------------------------
_SEEDS = st.integers(min_value=0, max_value=2**32 - 1)


@pytest.mark.parametrize("name", SPACE_NAMES)
@settings(deadline=None, max_examples=40)
@given(seed=_SEEDS, prob=st.floats(min_value=0.0, max_value=1.0))
def test_sampled_mutated_crossed_archs_validate(name, seed, prob):
    space = make_space(name)
    rng = random.Random(seed)
    a, b = space.sample(rng), space.sample(rng)
    for arch in (a, space.mutate(a, prob, rng), space.crossover(a, b, rng)):
        space.validate(arch)
        assert space.canonical(arch) == arch
        assert space.macs(space.min()) <= space.macs(arch) <= space.macs(space.max())


@pytest.mark.parametrize("name", SPACE_NAMES)
@settings(deadline=None, max_examples=40)
@given(seed=_SEEDS)
def test_canonical_is_idempotent_and_encode_has_fixed_length(name, seed):
    space = make_space(name)
    rng = random.Random(seed)
    raw = {key: rng.choice(values) for key, values in space.choices().items()}
    once = space.canonical(raw)
    assert space.canonical(once) == once
    assert space.encode(raw).shape == (sum(len(v) for v in space.choices().values()),)
    assert torch.equal(space.encode(raw), space.encode(once))


@pytest.mark.parametrize("name", SPACE_NAMES)
def test_mutation_with_probability_zero_and_crossover_of_twins_return_the_parent(name, rng):
    space = make_space(name)
    arch = space.sample(rng)
    assert space.mutate(arch, 0.0, rng) == arch
    assert space.crossover(arch, arch, rng) == arch


@pytest.mark.parametrize("name", SPACE_NAMES)
def test_size_equals_brute_force_enumeration_on_a_small_space(name):
    import itertools

    space = make_space(name, small=True)
    choices = space.choices()
    distinct = {json.dumps(space.canonical(dict(zip(choices, values))), sort_keys=True)
                for values in itertools.product(*choices.values())}
    assert space.size() == len(distinct)
    assert space.raw_size() == len(list(itertools.product(*choices.values())))


def test_a_cost_only_space_searches_costs_but_says_it_has_no_supernet():
    from search_spaces.base import ArchSpace, LayerCost, Supernet

    class Widths(ArchSpace):
        name = "widths_only"

        def __init__(self):
            super().__init__({"width": (1, 2, 3)})

        def layers(self, arch):
            return [LayerCost("w", 10 * arch["width"], arch["width"], (1,), ())]

    space = Widths()
    assert space.costs(space.max()) == (30, 3)
    with pytest.raises(NotImplementedError, match="space 'widths_only' builds no supernet"):
        space.build_supernet()
    with pytest.raises(NotImplementedError, match="space 'widths_only' defines no input size"):
        space.input_size(space.min())
    with pytest.raises(TypeError, match="abstract"):
        type("NoLayers", (ArchSpace,), {})({"width": (1,)})
    with pytest.raises(TypeError, match="_build_static"):
        type("HalfSupernet", (Supernet,), {"_configure": lambda self, arch: None})()
