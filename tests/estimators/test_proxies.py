"""Zero-cost proxies against independent computations on tiny networks, and what they share on
every space (the contract of every estimator is `test_estimator_contract.py`)."""
from __future__ import annotations

import copy
import math
import random

import numpy as np
import pytest
import torch
from torch import nn

from estimators import EstimatorContext, build_estimator
from estimators.jacov import Jacov, jacov_score
from estimators.naswot import Naswot
from estimators.synflow import Synflow
from estimators.zero_cost import ZeroCostProxy, fresh_export, inputs
from estimators.zico import Zico, zico_score
from nas.core.errors import ConfigError
from nas.core.registry import ESTIMATORS
from tests.conftest import make_space

PROXIES = [name for name in ESTIMATORS.names() if issubclass(ESTIMATORS.get(name).obj, ZeroCostProxy)]
SHAPE = (1, 6, 6)


def _batches(n: int = 2, size: int = 8, side: int = 28, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(size, 1, side, side, generator=g), torch.randint(0, 10, (size,), generator=g))
            for _ in range(n)]


def _tiny_cnn(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(1, 3, 3), nn.BatchNorm2d(3), nn.ReLU(), nn.Flatten(), nn.Linear(48, 4)).train()


def _tiny_batch(seed: int = 1, n: int = 5):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, *SHAPE, generator=g), torch.randint(0, 4, (n,), generator=g)


def _hand_gradients(model: nn.Module, batch) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(weight, dL/dweight) of the conv and linear layers, by a plain backward pass on a copy."""
    model = copy.deepcopy(model)
    nn.functional.cross_entropy(model(batch[0]), batch[1]).backward()
    return [(m.weight.detach(), m.weight.grad) for m in model if isinstance(m, (nn.Conv2d, nn.Linear))]


def test_grad_norm_and_snip_match_a_plain_backward_pass():
    model, batch = _tiny_cnn(), _tiny_batch()
    pairs = _hand_gradients(model, batch)
    norm = sum(math.sqrt(float((g.double() ** 2).sum())) for _, g in pairs)
    snip = sum(float((w.double() * g.double()).abs().sum()) for w, g in pairs)
    assert build_estimator("grad_norm").measure(copy.deepcopy(model), [batch], SHAPE) == pytest.approx(norm, rel=1e-6)
    assert build_estimator("snip").measure(copy.deepcopy(model), [batch], SHAPE) == pytest.approx(snip, rel=1e-6)
    assert all(p.grad is None for p in model.parameters())


def test_synflow_of_a_two_layer_linear_net_is_log_of_twice_the_path_sum():
    # R = 1' |W2| |W1| 1, and sum |W * dR/dW| over either layer is R itself: S = 2 R
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(36, 5, bias=False), nn.Linear(5, 3, bias=False))
    w1, w2 = model[1].weight.detach().double().abs(), model[2].weight.detach().double().abs()
    paths = float(torch.ones(3, dtype=torch.float64) @ w2 @ w1 @ torch.ones(36, dtype=torch.float64))
    assert Synflow().measure(model, [], SHAPE) == pytest.approx(math.log(2 * paths), rel=1e-12)


def test_naswot_kernel_from_hand_computed_codes():
    # pre-activations x @ W.T: sample codes 1010, 0010, 1101; agreements 3, 1, 0 -> det 24
    layer = nn.Linear(3, 4, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[1., 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0]]))
    model = nn.Sequential(layer, nn.ReLU(), nn.Linear(4, 2))
    x = torch.tensor([[1., -1, 1], [-1, -1, 2], [2, 1, -1]])
    kernel = np.array([[4, 3, 1], [3, 4, 0], [1, 0, 4]])
    assert np.linalg.det(kernel) == pytest.approx(24)
    assert Naswot().measure(model, [(x, torch.zeros(3, dtype=torch.long))], SHAPE) == pytest.approx(math.log(24))


def test_naswot_codes_gelu_units_by_the_sign_of_their_input():
    layer = nn.Linear(3, 4, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[1., 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0]]))
    x = torch.tensor([[1., -1, 1], [-1, -1, 2], [2, 1, -1]])
    batch = [(x, torch.zeros(3, dtype=torch.long))]
    relu, gelu = (Naswot().measure(nn.Sequential(layer, act()), batch, SHAPE) for act in (nn.ReLU, nn.GELU))
    assert relu == gelu == pytest.approx(math.log(24))


def _jacov_by_formula(j: np.ndarray, k: float = 1e-5) -> float:
    s = np.linalg.eigvals(np.corrcoef(j)).real
    return float(-sum(math.log(v + k) + 1 / (v + k) for v in s))


def test_jacov_eigen_formula_on_hand_built_jacobians():
    k = 1e-5
    orthogonal = np.array([[1., -1, 0, 0], [0, 0, 1, -1]])       # correlation matrix I: s = 1, 1
    assert jacov_score(orthogonal) == pytest.approx(-2 * (math.log(1 + k) + 1 / (1 + k)))
    j = np.random.default_rng(0).normal(size=(5, 9))
    assert jacov_score(j) == pytest.approx(_jacov_by_formula(j), rel=1e-9)


def test_jacov_of_a_linear_net_sees_identical_jacobians():
    # f(x) = A x: every sample's Jacobian is A' 1, so C is all ones with eigenvalues n, 0, ..., 0
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(36, 3))
    n, k = 5, 1e-5
    expected = -(math.log(n + k) + 1 / (n + k)) - (n - 1) * (math.log(k) + 1 / k)
    assert Jacov().measure(model, [_tiny_batch(n=n)], SHAPE) == pytest.approx(expected, rel=1e-6)


def test_jacov_takes_constant_jacobians_as_identical():
    n, k = 4, 1e-5
    identical = -(math.log(n + k) + 1 / (n + k)) - (n - 1) * (math.log(k) + 1 / k)   # C all ones
    assert jacov_score(np.zeros((n, 6))) == pytest.approx(identical, rel=1e-9)
    rows = np.array([[0., 0, 0, 0], [3., 3, 3, 3], [1., -1, 0, 0], [0, 0, 1., -1]])   # 2 constant, 2 orthogonal
    corr = np.array([[1., 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]])
    s = np.linalg.eigvalsh(corr)
    assert jacov_score(rows) == pytest.approx(float(-np.sum(np.log(s + k) + 1 / (s + k))), rel=1e-9)


def test_a_network_blind_to_its_input_gets_every_proxy_s_lowest_score():
    # a cell201 arch with every edge `none` has no live path: its output does not depend on x
    space = make_space("cell201", small=True)
    dead = {key: "none" for key in space.choices()}
    assert not space.is_live(dead)
    for name in PROXIES:
        context = EstimatorContext(space=space, batches=_batches(), init_seeds=2, seed=5)
        blind, *live = build_estimator(name).scores([dead, space.min(), space.max()], context)
        assert not math.isnan(blind) and blind < min(live), (name, blind, live)


def test_zico_formula_by_hand():
    # layer 1: mean|g| (2, 3), std (1, 0): the zero-std weight is skipped -> log 2; layer 2: log(1 / 1)
    per_batch = [[torch.tensor([1., 3.]), torch.tensor([-1.])], [torch.tensor([3., 3.]), torch.tensor([1.])]]
    assert zico_score(per_batch) == pytest.approx(math.log(2))


def test_zico_of_a_tiny_cnn_matches_plain_backward_passes():
    model, batches = _tiny_cnn(), [_tiny_batch(seed) for seed in (1, 2, 3)]
    grads = [[g.double().numpy() for _, g in _hand_gradients(model, b)] for b in batches]
    expected = 0.0
    for layer in zip(*grads):
        g = np.stack(layer)
        std = g.std(axis=0)
        expected += math.log(float((np.abs(g).mean(axis=0)[std > 0] / std[std > 0]).sum()))
    assert Zico().measure(copy.deepcopy(model), batches, SHAPE) == pytest.approx(expected, rel=1e-6)


def test_the_proxies_are_the_registered_zero_cost_ones():
    assert {"synflow", "naswot", "jacov", "snip", "grad_norm", "zico"} <= set(PROXIES)


@pytest.mark.parametrize("space_name", ["mobilenetv3", "vit", "cell201"])
def test_proxies_share_one_seeded_supernet_per_init_and_leave_no_gradients(space_name):
    space = make_space(space_name, small=True)
    archs = [space.max(), space.sample(random.Random(3))]
    context = EstimatorContext(space=space, batches=_batches(), init_seeds=2, seed=5)
    rng_state = torch.get_rng_state()
    for name in PROXIES:
        build_estimator(name).scores(archs, context)
    assert torch.equal(torch.get_rng_state(), rng_state)
    supernets = [v for key, v in context.cache.items() if key[0] == "seeded_supernet"]
    assert len(supernets) == 2
    assert all(p.grad is None for net in supernets for p in net.parameters())


@pytest.mark.parametrize("name", PROXIES)
def test_proxies_do_not_depend_on_the_order_of_a_batch(name):
    space = make_space("cell201", small=True)
    batches = _batches(size=12)
    order = torch.randperm(12, generator=torch.Generator().manual_seed(9))
    shuffled = [(x[order], y[order]) for x, y in batches]
    archs = [space.max(), space.sample(random.Random(4))]
    plain = build_estimator(name).scores(archs, EstimatorContext(space=space, batches=batches, init_seeds=1))
    permuted = build_estimator(name).scores(archs, EstimatorContext(space=space, batches=shuffled, init_seeds=1))
    assert permuted == pytest.approx(plain, rel=1e-4, abs=1e-6)


def test_init_seeds_change_the_score_and_are_averaged():
    space = make_space("cell201", small=True)
    arch, snip = space.max(), build_estimator("snip")
    context = EstimatorContext(space=space, batches=_batches(), init_seeds=2)
    resized = inputs("snip", context, arch)
    each = [snip.measure(fresh_export(context, arch, k, torch.device("cpu")).train(), resized, (1, 12, 12))
            for k in range(2)]
    assert each[0] != each[1]
    assert snip.score(arch, context) == pytest.approx(sum(each) / 2, rel=1e-12)


def test_data_proxies_need_batches_and_zico_two():
    space = make_space("cell201", small=True)
    with pytest.raises(ConfigError, match="score: 'naswot' needs training batches"):
        build_estimator("naswot").scores([space.max()], EstimatorContext(space=space))
    with pytest.raises(ConfigError, match="score: 'zico' needs at least 2 batches"):
        build_estimator("zico").scores([space.max()], EstimatorContext(space=space, batches=_batches(n=1)))
    assert math.isfinite(build_estimator("synflow").score(space.max(), EstimatorContext(space=space)))


@pytest.mark.parametrize("name", ["synflow", "snip", "grad_norm"])
def test_gradient_proxies_see_the_depth_of_a_mobilenetv3_stage(name):
    # training starts MobileNetV3's residual blocks as identities (last BN scale 0); a proxy's
    # export is standard-initialised, so a second block of stage 1 adds weights with gradients
    space = make_space("mobilenetv3", small=True)
    deep = space.max()
    shallow = {**deep, "stage1.depth": 1}
    assert space.canonical(shallow) != space.canonical(deep)
    context = EstimatorContext(space=space, batches=_batches(), init_seeds=2, seed=0)
    low, high = build_estimator(name).scores([shallow, deep], context)
    assert high - low > 0.05 * abs(low), (name, low, high)


def test_a_proxy_export_has_standard_norm_scales_on_every_space():
    for space_name in ("mobilenetv3", "vit", "cell201"):
        space = make_space(space_name, small=True)
        context = EstimatorContext(space=space, init_seeds=1)
        model = fresh_export(context, space.max(), 0, torch.device("cpu"))
        norms = [m for m in model.modules() if isinstance(m, (nn.modules.batchnorm._NormBase, nn.LayerNorm))]
        assert norms, space_name
        assert all(torch.all(m.weight == 1) and torch.all(m.bias == 0) for m in norms), space_name
        if space_name == "mobilenetv3":        # training's init is left as it was
            assert torch.all(context.cache[("seeded_supernet", 0, 0)].blocks[1][1].bn3.weight == 0)
