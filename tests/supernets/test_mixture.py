"""Mixture-of-supernets: routing on the simplex, mixed weights sliced like plain ones, exact
exports, one expert = the plain supernet bit for bit, resume, and config errors."""
from __future__ import annotations

import random

import pytest
import torch

from nas import api
from nas.cli import main
from nas.core.config import load_config
from nas.core.errors import ConfigError
from nas.engine.counting import counted_flops, parameter_count
from nas.engine.data.datasets import load_dataset
from nas.engine.run_dir import RunDir
from nas.engine.training.trainer import Trainer
from search_spaces.cell201 import Cell201Supernet
from supernets.mixture import MixtureOptions, MixtureSource, apply_mixture, parity_scales
from supernets.router import Router
from tests.conftest import SMALL_OPTIONS, make_space, make_supernet
from tests.support.helpers import straight_and_resumed
from tests.support.tiny import tiny_config

SPACES = ["vit", "mobilenetv3", "cell201"]
ROUTINGS = ["layer", "neuron"]


def _mixed(space_name: str, routing: str, experts: int = 3, seed: int = 0):
    """A small supernet (realistic BN statistics) with a mixture whose routers are randomised,
    so that different archs really get different weights."""
    supernet = make_supernet(make_space(space_name, small=True), seed=seed)
    apply_mixture(supernet, MixtureOptions(experts=experts, routing=routing, hidden=16), seed)
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for router in _routers(supernet):
            for p in router.parameters():
                p.copy_(torch.randn(p.shape, generator=generator))
    return supernet


def _routers(supernet) -> list[Router]:
    return [m for m in supernet.modules() if isinstance(m, Router)]


def _mixtures(supernet) -> dict[str, MixtureSource]:
    return {k: s for k, s in supernet.weight_sources().items() if isinstance(s, MixtureSource)}


def _archs(space, n: int, seed: int = 0):
    rng = random.Random(seed)
    return [space.min(), space.max()] + [space.sample(rng) for _ in range(n)]


def _input(space, arch, n: int = 4, seed: int = 0):
    size = space.input_size(arch)
    return torch.randn(n, space.in_chans, size, size, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("groups", [1, 7])
def test_router_weights_are_non_negative_and_sum_to_one_per_row(groups):
    torch.manual_seed(0)
    router = Router(encoding_size=12, hidden=8, experts=4, groups=groups)
    for p in router.parameters():
        torch.nn.init.normal_(p, std=3.0)
    encodings = (torch.rand(20, 12) < 0.4).float()
    for encoding in encodings:
        weights = router(encoding)
        assert weights.shape == (groups, 4)
        assert (weights >= 0).all()
        assert torch.allclose(weights.sum(dim=1), torch.ones(groups), atol=1e-6)
    assert not torch.allclose(router(encodings[0]), router(encodings[1]))   # the arch matters


@pytest.mark.parametrize("routing, rows", [("layer", lambda source: 1), ("neuron", lambda source: source.shape[0])])
def test_each_layer_or_output_neuron_gets_one_softmax(routing, rows):
    supernet = _mixed("vit", routing)
    for name, source in _mixtures(supernet).items():
        weights = source.router.routes()
        assert weights.shape == (rows(source), 3), name
        assert (weights >= 0).all() and torch.allclose(weights.sum(dim=1), torch.ones(len(weights)), atol=1e-6)
    layer = supernet.mixable_layers()[0]
    shared = {id(_mixtures(supernet)[name].router) for op in layer.ops for name in op}
    assert len(shared) == (1 if routing == "layer" else len(layer.ops))   # per layer, or per op


@pytest.mark.parametrize("space_name", SPACES)
@pytest.mark.parametrize("routing", ROUTINGS)
def test_the_mixed_weight_is_sliced_as_the_plain_weight(space_name, routing):
    supernet = _mixed(space_name, routing)
    space = supernet.space
    arch = space.sample(random.Random(3))
    supernet.set_active(arch)
    encoding = space.encode(arch)
    modules = dict(supernet.named_modules())
    for name, source in _mixtures(supernet).items():
        router = source.router
        hidden = torch.relu(encoding @ router.hidden.weight.T + router.hidden.bias)
        logits = (hidden @ router.out.weight.T + router.out.bias).view(router.groups, router.experts)
        weights = torch.exp(logits - logits.max(dim=1, keepdim=True).values)
        weights = weights / weights.sum(dim=1, keepdim=True)
        shape = (router.groups,) + (1,) * (len(source.shape) - 1)
        expected = source.scale * sum(weights[:, i].view(shape) * e for i, e in enumerate(source.experts))
        op_name, attribute = name.rsplit(".", 1)
        op = modules[op_name]
        active = op.active_weight() if attribute == "weight" else op.active_bias()
        index = tuple(slice(0, n) for n in active.shape)
        assert torch.allclose(active, expected[index], atol=1e-6), name


@pytest.mark.parametrize("space_name", SPACES)
@pytest.mark.parametrize("routing", ROUTINGS)
def test_equal_experts_make_the_output_independent_of_the_router(space_name, routing):
    plain = make_supernet(make_space(space_name, small=True))
    supernet = _mixed(space_name, routing)
    plain_sources = plain.weight_sources()
    with torch.no_grad():
        for name, source in _mixtures(supernet).items():
            for expert in source.experts:       # the mix is the plain tensor whatever the weights
                expert.copy_(plain_sources[name].full() / source.scale)
    for arch in _archs(plain.space, 3):
        x = _input(plain.space, arch)
        plain.set_active(arch)
        supernet.set_active(arch)
        with torch.no_grad():
            reference = plain(x)
            outputs = [supernet(x)]
            for router in _routers(supernet):
                torch.nn.init.normal_(router.out.weight, std=5.0)
            outputs.append(supernet(x))
        for output in outputs:
            assert torch.allclose(output, reference, atol=1e-5)


@pytest.mark.parametrize("routing", ROUTINGS)
def test_archs_with_equal_encodings_get_equal_weights(routing):
    supernet = _mixed("vit", routing)
    space = supernet.space
    low = dict(space.min())
    hidden_choice = dict(low, **{"layer1.mlp_ratio": 4.0})    # layer1 is beyond depth 1: inactive
    assert hidden_choice != low and torch.equal(space.encode(hidden_choice), space.encode(low))

    def weights(arch):
        supernet.set_active(arch)
        with torch.no_grad():
            return {k: s.full().clone() for k, s in _mixtures(supernet).items()}

    a, b, other = weights(low), weights(hidden_choice), weights(space.max())
    assert all(torch.equal(a[k], b[k]) for k in a)
    # a different encoding mixes otherwise (biases start at zero in every expert: weights only)
    assert not any(torch.equal(a[k], other[k]) for k in a if k.endswith(".weight"))


def test_a_restricted_space_encodes_like_its_parent():
    space = make_space("mobilenetv3", small=True)
    sub = space.restrict("stage1.width", [24])
    arch = dict(space.max())
    assert torch.equal(sub.encode(arch), space.encode(arch))


@pytest.mark.parametrize("space_name", SPACES)
@pytest.mark.parametrize("routing", ROUTINGS)
def test_export_folds_the_mixture_exactly_with_unchanged_costs(space_name, routing):
    supernet = _mixed(space_name, routing)
    space = supernet.space
    for i, arch in enumerate(_archs(space, 20, seed=1)):
        model = supernet.export(arch)
        assert not any(isinstance(m, (MixtureSource, Router)) for m in model.modules())
        supernet.set_active(arch)
        x = _input(space, arch, seed=i)
        with torch.no_grad():
            assert (supernet(x) - model(x)).abs().max().item() <= 1e-5, arch
        assert counted_flops(model, x[:1]) == 2 * space.macs(arch), arch
        assert parameter_count(model) == space.params(arch), arch


def _train_steps(data: dict, splits, root, steps: int = 4):
    config = load_config(data)
    strategy = api.build_strategy(config)
    trainer = Trainer(config, strategy, splits, RunDir(root), progress=False)
    logs = []
    for i in range(steps):
        logs.append(trainer.train_one_step(splits.train_images[64 * i:64 * i + 64].float() / 255,
                                           splits.train_labels[64 * i:64 * i + 64]))
    return logs, [p.detach().clone() for p in strategy.model.parameters()], torch.get_rng_state()


VIT_TINY = {"name": "vit", "options": dict(SMALL_OPTIONS["vit"], embed_dims=[16, 32], depths=[1, 2])}
CELL_TINY = {"name": "cell201", "options": SMALL_OPTIONS["cell201"]}


@pytest.mark.parametrize("space", [None, VIT_TINY, CELL_TINY], ids=["mobilenetv3", "vit", "cell201"])
def test_one_expert_reproduces_the_plain_supernet_bit_for_bit(tmp_path, space):
    splits = load_dataset("fashion_mnist", val_size=256, train_size=512)
    data = tiny_config(distill="kl")
    if space is not None:
        data["space"] = space
    mixed = dict(data, strategy=dict(data["strategy"], mixture={"experts": 1, "routing": "neuron"}))
    plain_logs, plain_params, plain_rng = _train_steps(data, splits, tmp_path / "plain")
    mixed_logs, mixed_params, mixed_rng = _train_steps(mixed, splits, tmp_path / "mixed")
    assert plain_logs == mixed_logs
    assert len(plain_params) == len(mixed_params)
    assert all(torch.equal(a, b) for a, b in zip(plain_params, mixed_params))
    assert torch.equal(plain_rng, mixed_rng)


def test_a_mixture_run_resumes_bit_exactly(tmp_path, monkeypatch):
    data = tiny_config(steps=8)
    data["strategy"]["mixture"] = {"experts": 2, "routing": "neuron", "hidden": 16}

    def train(name, resume):
        config = load_config(tmp_path / name / "config.yaml") if resume else load_config(data)
        return api.train(config, name=name, resume=resume, runs_dir=tmp_path, progress=False, device="cpu")

    a, b = straight_and_resumed(train, 5, monkeypatch)
    assert a["step"] == b["step"] == 8
    assert any(".mixture_router." in k for k in a["model"]) and any(".experts.1" in k for k in a["model"])
    assert a["model"].keys() == b["model"].keys() and all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    for key, value in a["optimizer"]["state"].items():
        assert torch.equal(value["momentum_buffer"], b["optimizer"]["state"][key]["momentum_buffer"])



@pytest.mark.parametrize("space_name", SPACES)
@pytest.mark.parametrize("routing", ROUTINGS)
@pytest.mark.parametrize("parity", ["sgd", "adam"])
def test_the_mixed_weight_starts_at_the_plain_weight_s_scale(space_name, routing, parity):
    plain = make_supernet(make_space(space_name, small=True)).weight_sources()
    for experts in (2, 4):
        supernet = make_supernet(make_space(space_name, small=True))
        apply_mixture(supernet, MixtureOptions(experts=experts, routing=routing, hidden=16, parity=parity), 0)
        supernet.set_active(supernet.space.max())
        mixtures = _mixtures(supernet)
        weights = [name for name in mixtures if plain[name].full().std() > 0]   # zero biases stay zero
        assert weights and all(not mixtures[n].full().any() for n in mixtures if n not in weights)
        ratios = []
        with torch.no_grad():
            for name in weights:
                mixed, reference = mixtures[name].full(), plain[name].full()
                assert not torch.equal(mixed, reference)              # really a mix of other draws
                ratios.append((mixed.std() / reference.std()).item())
                if reference.numel() >= 1024:                         # sampling error below 5%
                    assert ratios[-1] == pytest.approx(1.0, abs=0.1), name
        assert sum(ratios) / len(ratios) == pytest.approx(1.0, abs=0.03), ratios


@pytest.mark.parametrize("parity, scales", [("sgd", (1.0, 2.0)), ("adam", (2.0, 1.0))])
def test_one_step_moves_the_mix_as_the_parity_optimiser_moves_a_plain_weight(parity, scales):
    """m = 4 experts, a linear loss <W, G>: a plain weight moves by -lr G under SGD and by
    -lr sign(G) under Adam's first step; the mix at initialisation must move alike."""
    assert parity_scales(4, parity) == scales and parity_scales(1, parity) == (1.0, 1.0)
    torch.manual_seed(0)
    plain = torch.randn(16, 8)
    source = MixtureSource(
        [e * scales[0] for e in (plain, plain.flip(0), plain.flip(1), plain.flip(0, 1))],
        Router(encoding_size=5, hidden=4, experts=4), scales[1])
    source.bind(torch.ones(5))
    assert torch.allclose(source.full().std(), plain.std(), rtol=0.2)
    target = torch.randn(16, 8)
    before = source.full().detach().clone()
    (source.full() * target).sum().backward()
    optimizer = (torch.optim.SGD if parity == "sgd" else torch.optim.Adam)(source.experts.parameters(), lr=0.01)
    optimizer.step()
    moved = source.full().detach() - before
    expected = -0.01 * (target if parity == "sgd" else target.sign())
    assert torch.allclose(moved, expected, atol=1e-5)


def test_mixture_options_are_checked_with_their_key():
    with pytest.raises(ConfigError, match=r"strategy\.mixture\.experts: must be an integer >= 1"):
        load_config("fashion_mnist_vit", ["strategy.mixture.experts=0"])
    with pytest.raises(ConfigError, match=r"strategy\.mixture\.routing: neurons is not allowed.*did you mean 'neuron'"):
        load_config("fashion_mnist_vit", ["strategy.mixture.routing=neurons"])
    with pytest.raises(ConfigError, match=r"strategy\.mixture\.ops: space 'vit' has no 'pointwise' layers"):
        api.build_strategy(load_config("fashion_mnist_vit", ["strategy.mixture.ops=pointwise"]))


def test_cell201_conv_role_replaces_exactly_the_cell_convolutions():
    supernet = make_supernet(make_space("cell201", small=True))
    convs = {name for name in supernet.weight_sources()
             if name.startswith("cells.") and ".convs." in name and name.endswith(".conv.weight")}
    replaced = apply_mixture(supernet, MixtureOptions(experts=2, ops="conv", hidden=8), 0)
    assert convs and set(replaced) == convs
    with pytest.raises(ConfigError, match=r"strategy\.mixture\.ops: space 'cell201' has no 'ffn' layers; "
                                          r"choose conv or all"):
        api.build_strategy(load_config("fashion_mnist_cell201", ["strategy.mixture.ops=ffn"]))


def test_a_space_without_mixable_layers_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(Cell201Supernet, "mixable_layers", lambda self: [])   # a space declaring none
    code = main(["train", "fashion_mnist_cell201", "--set", "strategy.mixture.experts=2", "--name", "x",
                 "--runs-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "strategy.mixture.ops: space 'cell201' declares no layers a mixture can replace" in err[0]
    assert not (tmp_path / "x").exists()
