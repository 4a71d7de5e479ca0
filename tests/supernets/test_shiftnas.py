"""ShiftNAS: bin probabilities, the shift criterion, prefix masks, the generator's cost term,
resume, and option errors."""
from __future__ import annotations

import contextlib
import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nas import api
from nas.core.config import load_config
from nas.core.errors import ConfigError
from nas.core.rng import python_rng, torch_generator
from search_spaces.ops.soft import prefix_masks, soft_prefix_mask
from supernets.base import StepIO
from supernets.samplers import StepFeedback
from supernets.shiftnas import ShiftNASOptions, ShiftNASSampler
from supernets.shiftnas_lookahead import lookahead_scores
from tests.support.helpers import straight_and_resumed
from tests.support.tiny import TINY_SPACE, tiny_config

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


def test_bin_probabilities_are_a_distribution_uniform_at_zero_logits_and_never_below_the_floor():
    sampler = _sampler(bins=12, generator=False, floor=0.3)
    probs, reachable = sampler.probabilities(), sampler.reachable()
    count = int(reachable.sum())
    assert probs.min() >= 0 and probs.sum().item() == pytest.approx(1.0, abs=1e-6)
    assert 1 < count <= 12
    assert torch.all(probs[~reachable] == 0)
    assert torch.allclose(probs[reachable], torch.full((count,), 1 / count))
    with torch.no_grad():
        sampler.logits.copy_(torch.randn(12, generator=torch.Generator().manual_seed(0)) * 30)
    probs = sampler.probabilities()
    assert probs.min() >= 0 and probs.sum().item() == pytest.approx(1.0, abs=1e-6)
    assert probs[reachable].min().item() >= 0.3 / count - 1e-7      # the floor, however extreme the logits
    assert probs[reachable].max().item() > 0.5


def test_slots_draw_bins_by_their_probabilities_and_archs_inside_the_bin():
    sampler = _sampler(generator=False, num_random=2, floor=0.0)
    target = int(torch.nonzero(sampler.reachable())[-1])
    with torch.no_grad():
        sampler.logits[target] = 20.0           # nearly all mass on one bin
    for step in range(30):
        slots = sampler.slots(step)
        assert [s.role for s in slots] == ["max", "random0", "random1", "min"]
        assert all(sampler.draw_bin(step, i) == target for i in range(2))
        assert all(sampler.table.bin_of(s.arch) == target for s in slots[1:3])
    assert [s.role for s in _sampler(generator=False, sandwich=False).slots(0)] == ["random0"]


def test_update_moves_probability_to_the_bins_with_larger_scores_and_equal_scores_move_nothing():
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


def _step_io(batch, val_batch=None):
    return StepIO(forward=lambda x: x, pass_context=lambda final: contextlib.nullcontext(),
                  all_reduce_mean=lambda t: t,
                  batches=lambda split, count, key: [val_batch if split == "val" and val_batch else batch] * count)


def _flat(tensors):
    return torch.cat([t.reshape(-1) for t in tensors]).double()


def test_lookahead_scores_match_the_exact_hypergradient_and_leave_the_model_untouched():
    strategy = api.build_strategy(_config())
    sampler, supernet = strategy.sampler, strategy.supernet
    supernet.train()
    generator = torch.Generator().manual_seed(0)
    batch = (torch.randn(16, 1, 28, 28, generator=generator), torch.randint(0, 10, (16,), generator=generator))
    val = (torch.randn(16, 1, 28, 28, generator=generator), torch.randint(0, 10, (16,), generator=generator))
    for p in supernet.parameters():
        p.grad = torch.full_like(p, 0.5)
    state = copy.deepcopy(supernet.state_dict())
    archs = sampler.probe_archs()
    with torch.no_grad():
        sampler.logits.copy_(torch.tensor([0.5, -0.3, 0.2, 0.0]))
    probs = sampler.probabilities().detach()
    reference = torch.tensor([0.0, 2.0, 0.5, 3.0], dtype=torch.float64)   # bin 0 takes its own norm
    xi = 0.5
    result = lookahead_scores(strategy.subnet_for, archs, probs, reference, xi, [batch], [val])
    assert all(torch.equal(p.grad, torch.full_like(p, 0.5)) for p in supernet.parameters())
    assert all(torch.equal(v, state[k]) for k, v in supernet.state_dict().items())
    # independently: explicit per-bin gradients on a copy, w' = w - xi sum p g, d = sum v_k / R_k
    model = copy.deepcopy(supernet)
    params = list(model.parameters())
    live = [j for j, arch in enumerate(archs) if arch is not None]
    assert len(live) >= 3

    def grad(arch, data):
        model.set_active(arch)
        model.zero_grad()
        F.cross_entropy(model(data[0]), data[1]).backward()
        return _flat([p.grad if p.grad is not None else torch.zeros_like(p) for p in params])

    g = {j: grad(archs[j], batch) for j in live}
    with torch.no_grad():
        step = sum(probs[j].item() * g[j] for j in live)
        offset = 0
        for p in params:
            p -= xi * step[offset:offset + p.numel()].view_as(p).to(p.dtype)
            offset += p.numel()
    v = {k: grad(archs[k], val) for k in live}
    norms = {k: v[k].pow(2).sum().item() for k in live}
    direction = sum(v[k] / (reference[k].item() if reference[k] > 0 else norms[k]) for k in live)
    for j in range(len(archs)):
        if j not in live:
            assert result.scores[j] == 0 and result.val_sq_norms[j] == 0
            continue
        assert result.val_sq_norms[j].item() == pytest.approx(norms[j], rel=1e-4)
        assert result.scores[j].item() == pytest.approx((direction @ g[j]).item(), rel=0.03)


def test_two_ranks_share_the_lookaheads_bins_and_get_the_scores_of_one_process(monkeypatch):
    """As gradient matching's probes: each rank runs half the bins' passes, the ranks' shares
    summed (a fake all-reduce between two threads) give what one process computes."""
    import threading

    from supernets import shiftnas_lookahead

    strategy = api.build_strategy(_config())
    strategy.supernet.train()
    generator = torch.Generator().manual_seed(1)
    batch = (torch.randn(16, 1, 28, 28, generator=generator), torch.randint(0, 10, (16,), generator=generator))
    val = (torch.randn(16, 1, 28, 28, generator=generator), torch.randint(0, 10, (16,), generator=generator))
    archs = strategy.sampler.probe_archs()
    probs, reference = strategy.sampler.probabilities().detach(), torch.zeros(len(archs), dtype=torch.float64)
    passes: dict[str, int] = {}
    measure = shiftnas_lookahead._mean_loss

    def counted(subnet_for, arch, batches):
        who = threading.current_thread().name
        passes[who] = passes.get(who, 0) + 1
        return measure(subnet_for, arch, batches)

    monkeypatch.setattr(shiftnas_lookahead, "_mean_loss", counted)
    threading.current_thread().name = "alone"
    alone = lookahead_scores(copy.deepcopy(strategy).subnet_for, archs, probs, reference, 0.5, [batch], [val])
    barrier, posted, results = threading.Barrier(2), {}, {}

    def all_reduce_mean(tensor):
        posted[threading.current_thread().name] = tensor.clone()
        barrier.wait()
        total = (posted["rank0"] + posted["rank1"]) / 2
        barrier.wait()
        return total

    def rank(index):
        results[index] = lookahead_scores(copy.deepcopy(strategy).subnet_for, archs, probs, reference, 0.5, [batch],
                                          [val], index, 2, all_reduce_mean)

    threads = [threading.Thread(target=rank, args=(k,), name=f"rank{k}") for k in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    live = [j for j, arch in enumerate(archs) if arch is not None]
    assert len(live) >= 3 and passes["alone"] == 4 * len(live)     # per bin: train, val, two finite differences
    assert [passes["rank0"], passes["rank1"]] == [4 * len(live[0::2]), 4 * len(live[1::2])]
    for result in results.values():
        assert torch.allclose(result.val_sq_norms, alone.val_sq_norms, rtol=1e-5)
        assert torch.allclose(result.scores, alone.scores, rtol=1e-3, atol=1e-6), (result.scores, alone.scores)


class PerBinLinear(nn.Module):
    """A toy 'supernet': bin k's archs run their own linear classifier on the first `sizes[k]`
    pixels, so bins share no weights and a bin's raw gradient norm grows with its size."""

    def __init__(self, sizes, bin_of):
        super().__init__()
        self.sizes, self.bin_of, self.active = sizes, bin_of, 0
        self.heads = nn.ModuleList(nn.Linear(n, 10) for n in sizes)

    def set_active(self, arch):
        self.active = self.bin_of(arch)
        return self

    def forward(self, x):
        return self.heads[self.active](x.flatten(1)[:, :self.sizes[self.active]])


def _planted_run() -> tuple[ShiftNASSampler, int, list[float]]:
    """Ten shifts with bin probes on `PerBinLinear`; between them every bin but the smallest
    reachable one (planted: it never trains) takes SGD steps."""
    sampler = _sampler(generator=False, lr=0.2, floor=0.2)
    reachable = torch.nonzero(sampler.reachable()).flatten().tolist()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        net = PerBinLinear([16 * (b + 1) ** 2 for b in range(4)], sampler.table.bin_of)
    planted = reachable[0]
    teacher = torch.zeros(10, 784)       # labels depend on the 16 pixels every bin sees
    teacher[:, :16] = 3 * torch.randn(10, 16, generator=torch.Generator().manual_seed(1))

    def batch(key: int):
        images = torch.randn(256, 1, 28, 28, generator=torch.Generator().manual_seed(key))
        return images, (images.flatten(1) @ teacher.T).argmax(1)

    io = StepIO(forward=net, pass_context=lambda final: contextlib.nullcontext(), all_reduce_mean=lambda t: t,
                batches=lambda split, count, key: [batch(len(key) + (split == "val"))] * count)
    optimizer = torch.optim.SGD([p for b, head in enumerate(net.heads) if b != planted for p in head.parameters()],
                                lr=0.5)
    trajectory = [sampler.probabilities()[planted].item()]
    for update in range(10):
        sampler.shift(StepFeedback(update, [], [], None, io, net.set_active))
        trajectory.append(sampler.probabilities()[planted].item())
        assert sampler.probabilities()[reachable].min().item() >= 0.2 / len(reachable) - 1e-7   # the floor
        for step in range(5):
            images, labels = batch(1000 * update + step + 10)
            optimizer.zero_grad()
            sum(F.cross_entropy(net.set_active(sampler.probe_archs()[b])(images), labels)
                for b in reachable if b != planted).backward()
            optimizer.step()
    return sampler, planted, trajectory


def test_probability_shifts_to_a_planted_under_trained_bin_even_the_smallest_and_never_below_the_floor():
    sampler, planted, trajectory = _planted_run()
    reachable = sampler.reachable()
    raw = sampler.reference[reachable]                  # squared norms at the first update
    # the smallest raw signal: a raw squared norm would rank it last
    assert raw.min().item() == sampler.reference[planted].item() < raw.max().item() / 3
    assert trajectory[-1] > trajectory[0] + 0.12, trajectory
    assert sampler.probabilities()[planted].item() == sampler.probabilities().max().item()
    assert all(b >= a - 1e-6 for a, b in zip(trajectory[2:], trajectory[3:])), trajectory


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


@pytest.mark.slow
def test_resumed_shiftnas_run_with_the_generator_choosing_matches_an_uninterrupted_one(tmp_path, monkeypatch):
    overrides = ["strategy.sampler.update_every=3", "strategy.sampler.warmup_epochs=0.25",
                 "strategy.sampler.generator_every=2", "strategy.sampler.generator=train"]

    def train(name, resume):
        config = _config(*overrides, steps=12) if not resume else load_config(tmp_path / name / "config.yaml")
        return api.train(config, name=name, resume=resume, runs_dir=tmp_path, progress=False, device="cpu")

    a, b = straight_and_resumed(train, 7, monkeypatch)
    assert a["step"] == b["step"] == 12
    for key, value in a["model"].items():
        assert torch.equal(value, b["model"][key]), key
    sa, sb = a["strategy"]["sampler"], b["strategy"]["sampler"]
    assert torch.equal(sa["logits"], sb["logits"]) and not torch.all(sa["logits"] == 0)   # it shifted
    assert torch.equal(sa["reference"], sb["reference"]) and torch.all(sa["reference"][sa["logits"] != 0] > 0)
    for key, value in sa["generator"]["net"].items():
        assert torch.equal(value, sb["generator"]["net"][key]), key


def test_bad_options_are_one_line_errors_naming_the_key():
    base = {"space": "mobilenetv3", "strategy": {"sampler": {"name": "shiftnas"}}}
    assert load_config(base).strategy.sampler.options == ShiftNASOptions()
    for key, value, message in [("bins", 1, "bins: must be >= 2"), ("update_every", 0, "update_every: must be >= 1"),
                                ("lr", 0, "lr: must be > 0"), ("warmup_epochs", -1, "warmup_epochs: must be >= 0"),
                                ("temperature", 0, "temperature: must be > 0"), ("bin", 3, "bin: unknown"),
                                ("lr", ".inf", "lr: must be finite, got inf"),
                                ("lookahead_lr", "-.inf", "lookahead_lr: must be finite"),
                                ("cost_weight", ".inf", "cost_weight: must be finite"),
                                ("floor", 1, r"floor: must be in \[0, 1\), got 1"),
                                ("generator", "sometimes",
                                 r"generator: expected bool or 'off' \| 'alongside' \| 'train', got sometimes")]:
        with pytest.raises(ConfigError, match=rf"strategy\.sampler\.options\.{message}") as error:
            load_config(base, [f"strategy.sampler.{key}={value}"])
        assert "\n" not in str(error.value)


def test_generator_modes_accept_the_old_booleans_and_an_old_run_config_still_loads(tmp_path):
    base = {"space": "mobilenetv3", "strategy": {"sampler": {"name": "shiftnas"}}}
    for value, mode in [(True, "alongside"), (False, "off"), ("off", "off"), ("alongside", "alongside"),
                        ("train", "train")]:
        options = load_config(base, [f"strategy.sampler.generator={str(value).lower()}"]).strategy.sampler.options
        assert options.generator == mode
    assert ShiftNASOptions(generator=True) == ShiftNASOptions()
    old = tmp_path / "config.yaml"                      # as older runs wrote it
    old.write_text("space: mobilenetv3\nstrategy:\n  sampler: {name: shiftnas, lr: 0.05, generator: true}\n")
    assert load_config(old).strategy.sampler.options.generator == "alongside"
    assert _sampler(generator=False).generator is None and _sampler(generator="train").generator is not None
