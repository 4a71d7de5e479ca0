"""PA&DA path sampling: distributions, draws, gradient norms, the move toward larger norms,
resume, and option errors."""
from __future__ import annotations

import contextlib
import math

import pytest
import torch

from nas import api
from nas.core.config import load_config
from nas.core.errors import ConfigError
from supernets.base import StepIO
from supernets.pada import PADAOptions, PADASampler, pick
from supernets.samplers import StepFeedback
from tests.support.helpers import resumed_api_run
from tests.support.tiny import tiny_config

OPS = ("none", "skip_connect", "conv_1x1", "conv_3x3")   # the tiny cell201 space's operations


def _config(space: str = "cell201", *overrides: str, steps: int = 24, **train):
    data = tiny_config(sampler="pada", distill="none", steps=steps, space=space, **train)
    return load_config(data, list(overrides))


def _io(steps_per_epoch: int, total_steps: int) -> StepIO:
    return StepIO(forward=lambda x: x, pass_context=lambda final: contextlib.nullcontext(),
                  all_reduce_mean=lambda t: t, steps_per_epoch=steps_per_epoch, total_steps=total_steps)


def _plant(supernet: torch.nn.Module, by_op: dict[str, float], other: float = 0.5) -> None:
    """Gradients of value `by_op[op]` in every element of each cell operation, `other` elsewhere."""
    for name, p in supernet.named_parameters():
        op = next((op for op in by_op if f".{op}." in name), None)
        p.grad = torch.full_like(p, by_op[op] if op is not None else other)


def test_cell201_edges_share_one_distribution_and_mobilenet_kinds_have_their_own():
    cell = api.build_strategy(_config()).sampler
    assert cell.groups == [("edge*<-*", OPS)]
    assert set(cell.group_of) == set(cell.space.choices())
    mobile = api.build_strategy(_config("mobilenetv3")).sampler
    kinds = [kind for kind, _ in mobile.groups]
    assert kinds == ["resolution", "stage*.block*.kernel_size", "stage*.block*.expand_ratio", "stage*.depth",
                     "stage*.width"]
    assert mobile.group_of["stage0.block0.kernel_size"] == mobile.group_of["stage1.block1.kernel_size"]


def test_probabilities_sum_to_one_and_are_uniform_at_tau_zero():
    sampler = api.build_strategy(_config("mobilenetv3")).sampler
    generator = torch.Generator().manual_seed(0)
    for g, count in zip(sampler.g, sampler.counts):
        g.copy_(torch.rand(len(g), generator=generator, dtype=torch.float64))
        count.fill_(1)
    sampler.update(0.0)
    for p in sampler.ip:
        assert torch.equal(p, torch.full_like(p, 1 / len(p)))
    for tau in (0.3, 1.0):
        sampler.update(tau)
        for p, g in zip(sampler.ip, sampler.g):
            assert p.sum().item() == pytest.approx(1.0, abs=1e-12) and p.min() >= 0
            assert torch.allclose(p, tau * g / g.sum() + (1 - tau) / len(g))


def test_draws_are_a_pure_function_of_seed_step_slot_and_follow_ip():
    config = _config()
    a, b = api.build_strategy(config).sampler, api.build_strategy(config).sampler
    assert [a.slots(s) for s in range(5)] == [b.slots(s) for s in range(5)]
    assert a.slots(3) != a.slots(4)
    a.ip[0] = torch.tensor([0.0, 0.0, 0.0, 1.0], dtype=torch.float64)
    assert all(set(slot.arch.values()) == {"conv_3x3"} for step in range(10) for slot in a.slots(step))
    counts = dict.fromkeys(OPS, 0)
    b.ip[0] = torch.tensor([0.0, 0.1, 0.2, 0.7], dtype=torch.float64)
    for step in range(300):
        for op in b.draw(step, 0).values():
            counts[op] += 1
    assert counts["none"] == 0 and counts["skip_connect"] < counts["conv_1x1"] < counts["conv_3x3"]
    assert pick([0.0, 0.5, 0.5], 0.0) == 1 and pick([0.5, 0.5, 0.0], 1.0 - 1e-18) == 1
    options = PADAOptions(num_random=2, sandwich=True)
    sandwich = PADASampler(a.space, options, seed=0)
    assert [s.role for s in sandwich.slots(0)] == ["max", "random0", "random1", "min"]
    assert sandwich.trains_max and sandwich.anchors() == [a.space.max(), a.space.min()]
    assert [s.role for s in a.slots(0)] == ["random0"] and a.anchors() == []


def test_norms_are_the_l2_norms_of_each_operations_gradients_and_fold_into_a_running_mean():
    strategy = api.build_strategy(_config())
    sampler, supernet = strategy.sampler, strategy.supernet
    _plant(supernet, {"conv_1x1": 0.1, "conv_3x3": 1.0})
    arch = {key: "conv_3x3" for key in sampler.space.choices()}
    arch["edge2<-1"] = "conv_1x1"
    norms = sampler.path_norms(supernet)
    layout = sampler.layout([])

    def expected(edge: str, op: str, value: float) -> float:   # every cell's weights of that edge and op
        return math.sqrt(sum(p.numel() * value ** 2 for name, p in supernet.named_parameters()
                             if f"convs.{edge}.{op}." in name))

    entries = {(key, value): norms[i].item() for i, (key, value, _) in enumerate(layout)}
    assert entries[("edge2<-1", "conv_1x1")] == pytest.approx(expected("2<-1", "conv_1x1", 0.1))
    assert entries[("edge3<-0", "conv_3x3")] == pytest.approx(expected("3<-0", "conv_3x3", 1.0))
    assert entries[("edge3<-0", "skip_connect")] == entries[("edge3<-0", "none")] == 0.0
    whole = math.sqrt(sum(float(p.grad.double().pow(2).sum()) for p in supernet.parameters()))
    assert norms[-1].item() == pytest.approx(whole)
    sampler.fold(arch, norms)
    conv3 = sum(entries[(k, "conv_3x3")] for k in arch if k != "edge2<-1") / 5   # divided by its count
    assert sampler.g[0][3].item() == pytest.approx(conv3)
    assert sampler.g[0][2].item() == pytest.approx(entries[("edge2<-1", "conv_1x1")])
    assert sampler.counts[0].tolist() == [0, 0, 1, 1]
    _plant(supernet, {"conv_1x1": 0.3, "conv_3x3": 1.0})
    sampler.fold(arch, sampler.path_norms(supernet))
    assert sampler.g[0][2].item() == pytest.approx((expected("2<-1", "conv_1x1", 0.1)
                                                    + expected("2<-1", "conv_1x1", 0.3)) / 2)


def test_entangled_values_get_the_norm_of_their_keys_parameters_and_the_rest_the_whole_path():
    strategy = api.build_strategy(_config("mobilenetv3"))
    sampler, supernet = strategy.sampler, strategy.supernet
    _plant(supernet, {"conv_dw": 2.0})
    norms = sampler.path_norms(supernet)
    layout = sampler.layout([])
    entry = next(i for i, (key, value, _) in enumerate(layout) if key == "stage0.block0.kernel_size")
    assert layout[entry][1] is None        # one shared tensor over the kernel sizes
    dw = [p for name, p in supernet.named_parameters() if name.startswith("blocks.0.0.conv_dw.")]
    assert norms[entry].item() == pytest.approx(math.sqrt(sum(4.0 * p.numel() for p in dw)))
    arch = sampler.space.max()
    sampler.fold(arch, norms)
    kernel = sampler.group_of["stage0.block0.kernel_size"]
    kernels = [norms[i].item() for i, (key, _, _) in enumerate(layout) if key.endswith("kernel_size")]
    assert len(kernels) == 3 and sampler.g[kernel][1].item() == pytest.approx(sum(kernels) / 3)
    resolution = sampler.group_of["resolution"]
    assert sampler.g[resolution].tolist() == [0.0, pytest.approx(norms[-1].item())]


@pytest.mark.parametrize("schedule", ["published", "shifted"])
def test_distribution_moves_to_the_larger_gradient_norm_and_weightless_ops_vanish_as_tau_nears_one(schedule):
    strategy = api.build_strategy(_config("cell201", f"strategy.sampler.mix_schedule={schedule}"))
    sampler, supernet = strategy.sampler, strategy.supernet
    _plant(supernet, {"conv_1x1": 0.05, "conv_3x3": 0.5})
    per_epoch, epochs = 4, 4
    io = _io(per_epoch, per_epoch * epochs)
    trajectory, taus = [], []
    for step in range(per_epoch * epochs):
        slots = sampler.slots(step)
        sampler.observe(StepFeedback(step, slots, [0.0], None, io, strategy.subnet_for))
        if (step + 1) % per_epoch == 0:
            trajectory.append(dict(zip(OPS, sampler.ip[0].tolist())))
            taus.append(sampler.tau)
    # the authors' tau is epoch / epochs with the epoch that just ended counted from 0
    finished = range(epochs) if schedule == "published" else range(1, epochs + 1)
    assert taus == [e / epochs for e in finished]
    assert [p["conv_3x3"] for p in trajectory] == sorted(p["conv_3x3"] for p in trajectory)
    moved = trajectory[1:] if schedule == "published" else trajectory
    assert all(p["conv_3x3"] > p["conv_1x1"] for p in moved)
    if schedule == "published":      # epoch 1 is drawn uniformly too
        assert trajectory[0] == pytest.approx(dict.fromkeys(OPS, 0.25), abs=1e-15)
    weightless = [p["none"] + p["skip_connect"] for p in trajectory]
    assert weightless == pytest.approx([(1 - tau) * 2 / 4 for tau in taus], abs=1e-12)   # g = 0 for them
    assert weightless[-1] == (0.125 if schedule == "published" else 0.0)
    assert sampler.logs()["pada/tau"] == taus[-1]
    assert sampler.logs()["pada/p_edge*<-*=conv_3x3"] == trajectory[-1]["conv_3x3"]


def test_a_sampler_that_missed_the_epoch_end_updates_at_its_next_step():
    strategy = api.build_strategy(_config("cell201", "strategy.sampler.mix_schedule=shifted"))
    sampler = strategy.sampler
    _plant(strategy.supernet, {"conv_1x1": 0.05, "conv_3x3": 0.5})
    io = _io(4, 16)
    for step in (0, 1, 2, 5):            # a few-shot part that did not train step 3, the epoch's last
        sampler.observe(StepFeedback(step, sampler.slots(step), [0.0], None, io, strategy.subnet_for))
        assert sampler.tau == (0.25 if step == 5 else 0.0) and sampler.epochs_done == (1 if step == 5 else 0)


@pytest.mark.slow
def test_resumed_pada_run_matches_an_uninterrupted_one(tmp_path, monkeypatch):
    data = tiny_config(sampler="pada", distill="none", steps=12, space="cell201")
    data["data"]["train_size"] = 256     # 4 steps an epoch: the stop (step 7) follows an update
    a, b = resumed_api_run(lambda: load_config(data), tmp_path, 7, monkeypatch)
    assert a["step"] == b["step"] == 12
    assert all(torch.equal(value, b["model"][key]) for key, value in a["model"].items())
    sa, sb = a["strategy"]["sampler"], b["strategy"]["sampler"]
    assert sa["tau"] == sb["tau"] == 8 / 12   # updated at steps 4 (0), 8 (1/3 at the stop) and 12 (2/3)
    for name in ("ip", "g", "counts"):
        assert all(torch.equal(x, y) for x, y in zip(sa[name], sb[name])), name
    assert not torch.equal(sa["ip"][0], torch.full((4,), 0.25, dtype=torch.float64))   # it moved


def test_bad_options_are_one_line_errors_naming_the_key():
    base = {"space": "cell201", "strategy": {"sampler": {"name": "pada"}}}
    assert load_config(base).strategy.sampler.options == PADAOptions()
    for key, value, message in [("num_random", 0, "num_random: must be an integer >= 1"),
                                ("sandwhich", True, "sandwhich: unknown"),
                                ("mix_schedule", "linear", "mix_schedule: linear is not allowed; choose one of 'published', 'shifted'")]:
        with pytest.raises(ConfigError, match=rf"strategy\.sampler\.options\.{message}") as error:
            load_config(base, [f"strategy.sampler.{key}={value}"])
        assert "\n" not in str(error.value)
