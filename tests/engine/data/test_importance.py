"""PA&DA data sampling: per-example norms, p_data, the drawn epoch orders, DDP agreement,
resume, and config errors."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from nas import api
from nas.core.config import load_config
from nas.core.errors import ConfigError
from nas.engine.data.batches import epoch_order
from nas.engine.data.datasets import load_dataset
from nas.engine.distributed import DistEnv
from nas.engine.data.importance import DataImportance, data_importance, example_norms
from nas.engine.run_dir import RunDir
from nas.engine.data.sources import in_memory_source
from nas.engine.training.trainer import Trainer
from tests.support.gloo import two_gloo_ranks
from tests.support.helpers import resumed_api_run
from tests.support.importance_ranks import record_half_batches
from tests.support.tiny import tiny_config


def test_example_norms_are_the_autograd_norms_of_the_summed_cross_entropy_wrt_the_logits():
    generator = torch.Generator().manual_seed(0)
    logits = (torch.randn(32, 10, generator=generator) * 4).requires_grad_()
    labels = torch.randint(0, 10, (32,), generator=generator)
    grad, = torch.autograd.grad(F.cross_entropy(logits, labels, reduction="sum"), logits)
    assert torch.allclose(example_norms(logits, labels), grad.norm(dim=1), atol=1e-6)
    targets = torch.softmax(torch.randn(32, 10, generator=generator), 1)    # mixup/cutmix targets
    grad, = torch.autograd.grad(F.cross_entropy(logits, targets, reduction="sum"), logits)
    assert torch.allclose(example_norms(logits, targets), grad.norm(dim=1), atol=1e-6)


def test_example_norms_lie_between_zero_and_sqrt_two():
    generator = torch.Generator().manual_seed(1)
    labels = torch.randint(0, 10, (256,), generator=generator)
    norms = example_norms(torch.randn(256, 10, generator=generator) * 20, labels)
    assert norms.min() >= 0 and norms.max() <= math.sqrt(2) + 1e-6
    sure = F.one_hot(labels, 10).float() * 100.0                  # right and certain: 0
    wrong = F.one_hot((labels + 1) % 10, 10).float() * 100.0      # wrong and certain: sqrt(2)
    assert torch.allclose(example_norms(sure, labels), torch.zeros(256), atol=1e-6)
    assert torch.allclose(example_norms(wrong, labels), torch.full((256,), math.sqrt(2)), atol=1e-6)


def _recorded(importance: DataImportance, epoch: int, norms_of: torch.Tensor, steps: int) -> None:
    """Record, for `steps` steps of `epoch`, the norm `norms_of[i]` for image i."""
    b = importance.batch_size
    for step in range(steps):
        index = importance.order(epoch)[step * b:(step + 1) * b]
        importance.record(epoch, step, norms_of[index].float())


def test_p_data_sums_to_one_is_uniform_at_tau_zero_and_mixes_the_mean_norms():
    n = 12
    norms_of = torch.linspace(0.1, 1.2, n, dtype=torch.float64)
    importance = DataImportance(n, 4, seed=0)
    _recorded(importance, 0, norms_of, 3)
    state = importance.state_dict()
    importance.end_epoch(0.0)
    assert torch.equal(importance.probs, torch.full((n,), 1 / n, dtype=torch.float64))
    importance.load_state_dict(state)
    importance.end_epoch(0.25)
    expected = 0.25 * norms_of / norms_of.sum() + 0.75 / n
    assert importance.probs.sum().item() == pytest.approx(1.0, abs=1e-12)
    assert torch.allclose(importance.probs, expected.float().double(), atol=1e-7)


def test_resampling_keeps_the_epoch_length_draws_with_replacement_and_averages_repeats():
    n, b = 64, 8
    importance = DataImportance(n, b, seed=3, undrawn_norm="keep")
    assert torch.equal(importance.order(0), epoch_order(n, 3, 0))       # epoch 0: the plain permutation
    norms_of = torch.zeros(n, dtype=torch.float64)
    norms_of[:8] = 1.0                                                  # eight hard images
    _recorded(importance, 0, norms_of, n // b)
    importance.end_epoch(0.9)
    order = importance.order(1)
    assert len(order) == n and 0 <= order.min() and order.max() < n
    assert len(set(order.tolist())) < n                                 # with replacement
    hard = (order < 8).sum().item()
    assert hard > 0.5 * n                                               # p(hard) = 0.9 + 0.1 * 8 / 64
    assert torch.equal(order, importance.order(1))                      # a pure function
    # repeats are averaged: each image's recorded norms this epoch are its draw positions
    positions = torch.arange(n, dtype=torch.float64)
    for step in range(n // b):
        importance.record(1, step, positions[step * b:(step + 1) * b].float())
    importance.end_epoch(1.0)
    for image in range(n):
        drawn = (order == image).nonzero().flatten()
        expected = positions[drawn].mean().item() if len(drawn) else (1.0 if image < 8 else 0.0)
        assert importance.norms[image].item() == pytest.approx(expected), image   # unseen: last norm


def test_images_never_drawn_count_with_the_mean_norm_and_the_source_follows_the_order():
    splits = load_dataset("fashion_mnist", val_size=64, train_size=40)
    config = load_config({**tiny_config(space="cell201"), "data": {"name": "fashion_mnist", "sampling": "pada",
                                                                   "pada": {"undrawn_norm": "keep"}},
                          "train": {"batch_size": 8, "steps": 10, "epochs": None}})
    source = in_memory_source(splits)
    importance = data_importance(config, source)
    norms_of = torch.rand(40, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    _recorded(importance, 0, norms_of, 4)               # 32 of the 40 images
    seen = torch.zeros(40, dtype=torch.bool)
    seen[importance.order(0)[:32]] = True
    importance.end_epoch(1.0)
    mean = norms_of[seen].float().double().mean()
    weights = torch.where(seen, norms_of.float().double(), mean)
    assert torch.allclose(importance.probs, weights / weights.sum())
    order = importance.order(1)
    labels = [y for _, y in source.train_batches(8, config.train.seed, 1)]
    assert torch.equal(torch.cat(labels), splits.train_labels[order[:40]])
    assert data_importance(load_config(tiny_config(space="cell201")), source) is None


def _train_epoch(importance: DataImportance, epoch: int, norms_of: torch.Tensor, total_steps: int) -> None:
    """Record `norms_of[i]` for every image i of each step of `epoch`, ending each step."""
    per_epoch = importance.num_images // importance.batch_size
    for step in range(per_epoch):
        index = importance.order(epoch)[step * importance.batch_size:(step + 1) * importance.batch_size]
        importance.record(epoch, step, norms_of[index].float())
        importance.after_step(epoch * per_epoch + step + 1, per_epoch, total_steps)


def test_published_defaults_draw_the_second_epoch_uniformly_and_zero_the_images_an_epoch_missed():
    n, b, epochs = 64, 8, 4
    total = epochs * n // b
    norms_of = torch.linspace(0.05, 1.4, n, dtype=torch.float64).float().double()
    importance = DataImportance(n, b, seed=5)        # mix_schedule published, undrawn_norm zero
    _train_epoch(importance, 0, norms_of, total)
    assert importance.tau == 0.0                     # epoch 0 of 4 ended: 0 / 4
    assert torch.equal(importance.probs, torch.full((n,), 1 / n, dtype=torch.float64))
    order = importance.order(1)
    missed = [i for i in range(n) if i not in set(order.tolist())]
    assert missed                                    # n draws with replacement miss some images
    _train_epoch(importance, 1, norms_of, total)
    assert importance.tau == 1 / epochs
    expected = [0.0 if i in missed else norms_of[i].item() for i in range(n)]
    total_norm = sum(expected)
    expected_p = [0.25 * x / total_norm + 0.75 / n for x in expected]
    assert importance.probs.tolist() == pytest.approx(expected_p, rel=1e-12)
    assert all(importance.probs[i].item() == pytest.approx(0.75 / n) for i in missed)


def test_the_former_rules_stay_available_as_shifted_and_keep():
    n, b, epochs = 64, 8, 4
    total = epochs * n // b
    norms_of = torch.linspace(0.05, 1.4, n, dtype=torch.float64).float().double()
    importance = DataImportance(n, b, seed=5, mix_schedule="shifted", undrawn_norm="keep")
    _train_epoch(importance, 0, norms_of, total)
    assert importance.tau == 1 / epochs             # (e + 1) / E
    _train_epoch(importance, 1, norms_of, total)
    assert importance.tau == 2 / epochs
    assert torch.equal(importance.norms, norms_of)   # every image keeps its norm, drawn in epoch 1 or not
    assert importance.probs.tolist() == pytest.approx((0.5 * norms_of / norms_of.sum() + 0.5 / n).tolist(), rel=1e-12)
    config = load_config({"space": "cell201", "data": {"sampling": "pada",
                                                       "pada": {"mix_schedule": "shifted", "undrawn_norm": "keep"}}})
    made = data_importance(config, in_memory_source(load_dataset("fashion_mnist", val_size=64, train_size=40)))
    assert (made.mix_schedule, made.undrawn_norm) == ("shifted", "keep")


@pytest.mark.slow
def test_two_gloo_ranks_hold_the_sums_of_the_whole_batch(tmp_path):
    out = two_gloo_ranks(record_half_batches, tmp_path)
    (sums0, counts0), (sums1, counts1) = out[0], out[1]
    single = DataImportance(32, 8, seed=0)
    _recorded(single, 0, torch.arange(32, dtype=torch.float64) / 32, 4)
    assert torch.equal(sums0, sums1) and torch.equal(counts0, counts1)
    assert torch.equal(sums0, single.sums) and torch.equal(counts0, torch.ones(32, dtype=torch.float64))


def _pada_config(steps: int = 12, sampler: str = "uniform"):
    data = tiny_config(sampler=sampler, distill="none", steps=steps, space="cell201")
    data["data"].update(train_size=256, sampling="pada")   # batches of 64: 4 steps an epoch
    return load_config(data)


def _training_rank_job(rank: int, store: str, out: dict) -> None:
    config = _pada_config(steps=10, sampler="pada")
    splits = load_dataset("fashion_mnist", val_size=config.data.val_size, train_size=256)
    trainer = Trainer(config, api.build_strategy(config), splits, RunDir(Path(store).parent / f"r{rank}"),
                      env=DistEnv(rank, 2, rank, "cpu"), progress=False)
    trainer.fit()
    out[rank] = (trainer.importance.state_dict(), trainer.strategy.sampler.state_dict(),
                 torch.cat([p.detach().flatten() for p in trainer.strategy.model.parameters()]))


@pytest.mark.slow
def test_two_gloo_ranks_training_with_pada_paths_and_data_agree(tmp_path):
    out = two_gloo_ranks(_training_rank_job, tmp_path)
    (data0, paths0, params0), (data1, paths1, params1) = out[0], out[1]
    assert all(torch.equal(data0[k], data1[k]) for k in data0 if k != "tau") and data0["tau"] == data1["tau"] == 0.4
    assert data0["counts"].sum() == 2 * 64       # the two steps of epoch 2 so far, both ranks' rows
    assert all(torch.equal(a, b) for a, b in zip(paths0["ip"], paths1["ip"])) and paths0["tau"] == 0.4   # epoch 1 of 10 / 4 ended
    assert torch.equal(params0, params1)


def test_resumed_run_with_data_sampling_matches_an_uninterrupted_one(tmp_path, monkeypatch):
    a, b = resumed_api_run(_pada_config, tmp_path, 6, monkeypatch)     # stopped mid-epoch 1
    assert a["step"] == b["step"] == 12
    assert all(torch.equal(value, b["model"][key]) for key, value in a["model"].items())
    da, db = a["data_sampling"], b["data_sampling"]
    assert da.keys() == db.keys() and da["tau"] == db["tau"] == 8 / 12
    assert all(torch.equal(da[k], db[k]) for k in da if k != "tau")
    assert da["known"].all() and not torch.allclose(da["probs"], torch.full((256,), 1 / 256, dtype=torch.float64))


def test_bad_settings_are_one_line_errors_naming_data_sampling():
    base = {"space": "cell201", "data": {"sampling": "pada", "in_memory": False}}
    message = r"data\.sampling: pada draws each epoch's images from in-memory data"
    with pytest.raises(ConfigError, match=message) as error:
        load_config(base)
    assert "\n" not in str(error.value)
    with pytest.raises(ConfigError, match=r"data\.sampling: .*choose one of 'uniform', 'pada'"):
        load_config({"space": "cell201", "data": {"sampling": "importance"}})
    with pytest.raises(ConfigError, match=r"data\.pada\.undrawn_norm: last is not allowed; choose one of 'zero', 'keep'"):
        load_config({"space": "cell201", "data": {"sampling": "pada", "pada": {"undrawn_norm": "last"}}})
    with pytest.raises(ConfigError, match=r"data\.pada: applies only with data\.sampling: pada") as error:
        load_config({"space": "cell201", "data": {"pada": {"mix_schedule": "shifted"}}})
    assert "\n" not in str(error.value)
    importance = DataImportance(8, 4, seed=0)
    with pytest.raises(ConfigError, match=r"data\.sampling: pada needs the logits of a trained path, and step 0"):
        importance.after_step(1, 2, 4)      # the strategy handed no logits
