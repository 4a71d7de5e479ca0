"""The learning-rate schedule: warm-up is a prefix of the cosine, capped at a tenth of the run."""
from __future__ import annotations

import math

import pytest
import torch
import yaml

from nas import api
from nas.core.config import load_config
from nas.engine.training.schedule import build_scheduler, capped_warmup, effective_warmup
from tests.support.tiny import tiny_config


def _rates(total: int, warmup: int, lr: float = 0.1, warmup_lr: float = 1e-5, min_lr: float = 0.0,
           name: str = "cosine") -> list[float]:
    config = load_config(tiny_config(steps=total, optimizer={"name": "sgd", "lr": lr},
                                     scheduler={"name": name, "warmup_steps": warmup, "warmup_lr": warmup_lr,
                                                "min_lr": min_lr})).train
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    scheduler = build_scheduler(optimizer, config, total)
    rates = []
    for step in range(total + 1):
        scheduler.step_update(step)
        rates.append(optimizer.param_groups[0]["lr"])
    return rates


def _closed_form(step: int, total: int, warmup: int, lr: float, warmup_lr: float, min_lr: float) -> float:
    if step < warmup:
        return warmup_lr + step * (lr - warmup_lr) / warmup
    progress = min(step - warmup, total - warmup) / (total - warmup)
    return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * progress))


@pytest.mark.parametrize("total, warmup, min_lr", [(312, 31, 0.0), (100, 10, 1e-3), (50, 0, 0.0)])
def test_rate_at_every_step_is_a_warmup_prefix_of_the_cosine(total, warmup, min_lr):
    rates = _rates(total, warmup, lr=0.1, warmup_lr=1e-5, min_lr=min_lr)
    expected = [_closed_form(t, total, warmup, 0.1, 1e-5, min_lr) for t in range(total + 1)]
    assert rates == pytest.approx(expected, rel=1e-9, abs=1e-12)
    peak = rates.index(max(rates))
    assert peak == warmup and rates[peak] == pytest.approx(0.1)
    assert all(a <= b for a, b in zip(rates[:peak], rates[1:peak + 1]))      # monotone up to the peak
    assert all(a >= b for a, b in zip(rates[peak:], rates[peak + 1:]))      # then monotone down
    steps = [abs(b - a) for a, b in zip(rates, rates[1:])]
    assert max(steps) <= 0.1 / max(warmup, 1) + 1e-12       # no jump bigger than one warm-up step
    assert rates[-1] == pytest.approx(min_lr, abs=1e-12)     # ends at the floor


def test_the_old_cliff_is_gone_at_312_steps_with_200_warmup_steps():
    """The shipped 200-step warm-up on a 312-step run used to fall from 0.0995 to 0.029 at step 200."""
    rates = _rates(312, 200)
    assert max(abs(b - a) for a, b in zip(rates, rates[1:])) < 0.1 / 31 + 1e-12
    assert rates.index(max(rates)) == 31


def test_warmup_longer_than_a_tenth_is_cut_to_a_tenth():
    assert effective_warmup(200, 312) == 31 and effective_warmup(30, 312) == 30 and effective_warmup(5, 9) == 0
    train = load_config(tiny_config(steps=40, scheduler={"name": "cosine", "warmup_steps": 8})).train
    capped, message = capped_warmup(train, 40)
    assert capped.scheduler.warmup_steps == 4
    assert message == ("train.scheduler.warmup_steps: 8 is more than a tenth of the run's 40 steps; using 4 "
                       "(recorded in the run's config)")
    same, none = capped_warmup(capped, 40)
    assert same == capped and none is None


def test_a_run_logs_the_cut_once_and_records_what_it_used(tmp_path, capsys):
    config = load_config(tiny_config(steps=20, scheduler={"name": "cosine", "warmup_steps": 8}))
    summary = api.train(config, name="cut", runs_dir=tmp_path, progress=False, device="cpu")
    err = capsys.readouterr().err
    assert err.count("train.scheduler.warmup_steps: 8 is more than a tenth of the run's 20 steps; using 2") == 1
    saved = yaml.safe_load(summary.dir.config.read_text())
    assert saved["train"]["scheduler"]["warmup_steps"] == 2
    api.train(load_config(summary.dir.config),
              name="cut", runs_dir=tmp_path, progress=False, device="cpu", resume=True)
    assert "warmup_steps" not in capsys.readouterr().err      # the recorded value is already within the cap
