"""ShiftNAS: bin probabilities, the shift criterion, prefix masks, the generator's cost term,
resume, and option errors."""
from __future__ import annotations

import contextlib
import copy

import pytest
import torch
import torch.nn.functional as F

from nas import api
from nas.core.config import load_config
from nas.core.errors import ConfigError
from nas.core.rng import python_rng, torch_generator
from search_spaces.ops.soft import prefix_masks, soft_prefix_mask
from supernets.base import StepIO
from supernets.samplers import StepFeedback
from supernets.shiftnas import ShiftNASOptions, ShiftNASSampler
from tests.nas.helpers import straight_and_resumed
from tests.nas.tiny import TINY_SPACE, tiny_config

SMALL_TABLE = {"table_size": 200, "table_fill": 2, "table_tries": 20}


def _config(*overrides: str, space: dict | None = None, steps: int = 24):
    data = tiny_config(sampler="shiftnas", distill="none", steps=steps)
    data["strategy"]["sampler"].update(bins=4, **SMALL_TABLE)
    if space is not None:
        data["space"] = space
    return load_config(data, list(overrides))


def _sampler(**options) -> ShiftNASSampler:
    space = api.build_space(_config())
    return ShiftNASSampler(space, ShiftNASOptions(**{"bins": 4, **SMALL_TABLE, **options}), seed=0)


def _one_hot(space, arch, keys):
    choices = space.choices()
    return {key: F.one_hot(torch.tensor(choices[key].index(arch[key])), len(choices[key])).float() for key in keys}


def test_bin_probabilities_are_a_distribution_uniform_over_reachable_bins_at_zero_logits():
    sampler = _sampler(bins=12, generator=False)
    probs, reachable = sampler.probabilities(), sampler.reachable()
    assert probs.min() >= 0 and probs.sum().item() == pytest.approx(1.0, abs=1e-6)
    assert 1 < int(reachable.sum()) <= 12
    assert torch.all(probs[~reachable] == 0)
    assert torch.allclose(probs[reachable], torch.full((int(reachable.sum()),), 1 / int(reachable.sum())))
    with torch.no_grad():
        sampler.logits.copy_(torch.randn(12, generator=torch.Generator().manual_seed(0)) * 3)
    probs = sampler.probabilities()
    assert probs.min() >= 0 and probs.sum().item() == pytest.approx(1.0, abs=1e-6)


def test_slots_draw_bins_by_their_probabilities_and_archs_inside_the_bin():
    sampler = _sampler(generator=False, num_random=2)
    target = int(torch.nonzero(sampler.reachable())[-1])
    with torch.no_grad():
        sampler.logits[target] = 20.0           # nearly all mass on one bin
    for step in range(30):
        slots = sampler.slots(step)
        assert [s.role for s in slots] == ["max", "random0", "random1", "min"]
        assert all(sampler.draw_bin(step, i) == target for i in range(2))
        assert all(sampler.table.bin_of(s.arch) == target for s in slots[1:3])
    assert [s.role for s in _sampler(generator=False, sandwich=False).slots(0)] == ["random0"]


def test_update_moves_probability_to_the_bins_with_larger_gradients_and_equal_scores_move_nothing():
    sampler = _sampler(generator=False, lr=0.1)
    reachable = sampler.reachable()
    before = sampler.probabilities().detach().clone()
    sampler.update_logits(reachable.double())          # every reachable bin alike: no shift
    assert torch.equal(sampler.probabilities().detach(), before)
    high = int(torch.nonzero(reachable)[0])
    scores = reachable.double().clone()
    scores[high] = 5.0                                 # one bin still far from trained
    trajectory = [sampler.probabilities()[high].item()]
    for _ in range(10):
        sampler.update_logits(scores)
        trajectory.append(sampler.probabilities()[high].item())
    assert all(b > a for a, b in zip(trajectory, trajectory[1:])), trajectory
    others = sampler.probabilities().detach()[reachable].tolist()
    assert max(p for i, p in enumerate(others) if i != 0) < before[reachable][0].item()


def _step_io(batch):
    return StepIO(forward=lambda x: x, pass_context=lambda final: contextlib.nullcontext(),
                  all_reduce_mean=lambda t: t, batches=lambda split, count, key: [batch] * count)


def test_bin_scores_are_the_validation_gradient_norms_and_leave_the_model_untouched():
    strategy = api.build_strategy(_config())
    sampler, supernet = strategy.sampler, strategy.supernet
    supernet.train()
    generator = torch.Generator().manual_seed(0)
    batch = (torch.randn(16, 1, 28, 28, generator=generator), torch.randint(0, 10, (16,), generator=generator))
    for p in supernet.parameters():
        p.grad = torch.full_like(p, 0.5)
    state = copy.deepcopy(supernet.state_dict())
    slots = sampler.slots(9)
    scores = sampler.bin_scores(StepFeedback(9, slots, [0.0] * len(slots), None, _step_io(batch),
                                             strategy.subnet_for))
    assert all(torch.equal(p.grad, torch.full_like(p, 0.5)) for p in supernet.parameters())
    assert all(torch.equal(v, state[k]) for k, v in supernet.state_dict().items())
    for b, reachable in enumerate(sampler.reachable().tolist()):
        if not reachable:
            assert scores[b] == 0
            continue
        arch = sampler.table.draw_in(b, python_rng(0, "shiftnas-probe", 9, b), sampler.options.tries)
        model = copy.deepcopy(supernet)
        model.set_active(arch)
        model.zero_grad()
        F.cross_entropy(model(batch[0]), batch[1]).backward()
        expected = sum(p.grad.double().pow(2).sum() for p in model.parameters() if p.grad is not None)
        assert scores[b].item() == pytest.approx(expected.item(), rel=1e-5)


def test_prefix_masks_are_monotone_full_at_the_last_choice_and_soft_equals_hard_for_one_hots():
    sizes, total = [8, 16, 24], 24
    masks = prefix_masks(sizes, total)
    assert torch.all(masks[1:] >= masks[:-1]) and torch.all(masks[-1] == 1)
    assert masks.sum(1).tolist() == sizes
    for j in range(3):
        assert torch.equal(soft_prefix_mask(F.one_hot(torch.tensor(j), 3).float(), sizes, total), masks[j])
    weights = torch.tensor([0.2, 0.5, 0.3], requires_grad=True)
    mixed = soft_prefix_mask(weights, sizes, total)
    assert torch.allclose(mixed, 0.2 * masks[0] + 0.5 * masks[1] + 0.3 * masks[2])
    mixed.sum().backward()
    assert weights.grad.tolist() == [8.0, 16.0, 24.0]


def test_soft_supernet_with_one_hot_weights_computes_the_hard_subnet_and_the_plain_path_returns():
    space_data = copy.deepcopy(TINY_SPACE)
    space_data["options"]["se"] = [False, False]   # SE widths follow the widest config (documented)
    supernet = api.build_supernet(_config(space=space_data)).eval()
    space = supernet.space
    x = torch.randn(4, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    for seed in range(4):
        arch = space.sample(python_rng(seed, "soft"))
        supernet.set_active(arch)
        with torch.no_grad():
            plain = supernet(x)
            supernet.set_soft(arch, _one_hot(space, arch, supernet.soft_keys()))
            soft = supernet(x)
            supernet.set_active(arch)
            again = supernet(x)
        assert torch.allclose(soft, plain, atol=1e-5) and torch.equal(again, plain)


def test_relaxed_cost_equals_the_linear_cost_of_one_hots_and_the_cost_term_vanishes_only_at_the_target():
    sampler = _sampler()
    trainer, space = sampler.generator, sampler.space
    for seed in range(5):
        arch = space.sample(python_rng(seed, "cost"))
        weights = _one_hot(space, arch, space.choices())
        assert torch.equal(trainer.cost.soft_encoding(weights), space.encode(arch))
        fitted = float(torch.cat([space.encode(arch), torch.ones(1)]).double() @ trainer.cost.coef)
        assert trainer.cost.expected(weights).item() == pytest.approx(fitted)
    weights, _ = trainer.relaxed(0.5 * (trainer.cost.low + trainer.cost.high), torch_generator(0, "t"))
    expected = trainer.cost.expected(weights).item()
    assert trainer.cost_term(weights, expected).item() == pytest.approx(0.0, abs=1e-18)
    span = trainer.cost.high - trainer.cost.low
    for offset in (-0.2, 0.1, 0.3):
        assert trainer.cost_term(weights, expected + offset * span).item() == pytest.approx(offset ** 2)


def test_resumed_shiftnas_run_matches_an_uninterrupted_one(tmp_path, monkeypatch):
    overrides = ["strategy.sampler.update_every=3", "strategy.sampler.warmup_epochs=0.25",
                 "strategy.sampler.generator_every=2"]

    def train(name, resume):
        config = _config(*overrides, steps=12) if not resume else load_config(tmp_path / name / "config.yaml")
        return api.train(config, name=name, resume=resume, runs_dir=tmp_path, progress=False, device="cpu")

    a, b = straight_and_resumed(train, 7, monkeypatch)
    assert a["step"] == b["step"] == 12
    for key, value in a["model"].items():
        assert torch.equal(value, b["model"][key]), key
    sa, sb = a["strategy"]["sampler"], b["strategy"]["sampler"]
    assert torch.equal(sa["logits"], sb["logits"]) and not torch.all(sa["logits"] == 0)   # it shifted
    for key, value in sa["generator"]["net"].items():
        assert torch.equal(value, sb["generator"]["net"][key]), key


def test_bad_options_are_one_line_errors_naming_the_key():
    base = {"space": "mobilenetv3", "strategy": {"sampler": {"name": "shiftnas"}}}
    assert load_config(base).strategy.sampler.options == ShiftNASOptions()
    for key, value, message in [("bins", 1, "bins: must be >= 2"), ("update_every", 0, "update_every: must be >= 1"),
                                ("lr", 0, "lr: must be > 0"), ("warmup_epochs", -1, "warmup_epochs: must be >= 0"),
                                ("temperature", 0, "temperature: must be > 0"), ("bin", 3, "bin: unknown")]:
        with pytest.raises(ConfigError, match=rf"strategy\.sampler\.options\.{message}") as error:
            load_config(base, [f"strategy.sampler.{key}={value}"])
        assert "\n" not in str(error.value)
