"""AlphaNet on real data: `distill: alpha` + `sampler: attentive` train, log and resume; in-place
distillation (kl, alpha) pulls a student toward its teacher more than the labels alone."""
from __future__ import annotations

import contextlib
import os
import signal

import pytest
import torch
import torch.nn.functional as F

from nas import api
from nas.core.config import load_config
from nas.core.errors import Interrupted
from nas.engine.checkpoint import load_checkpoint
from nas.engine.data.datasets import load_dataset
from nas.engine.run_dir import RunDir
from nas.engine.training.trainer import Trainer
from supernets import attentive_table
from supernets.base import StepIO, preserved_buffers
from tests.support.tiny import tiny_config


@pytest.mark.slow
def test_tiny_alphanet_run_learns_logs_the_divergence_and_reuses_its_table_on_resume(tmp_path, monkeypatch):
    records = []
    original = Trainer.train_one_step

    def recording(self, images, labels):
        logs = original(self, images, labels)
        records.append(logs)
        if self.state.step == 18:
            os.kill(os.getpid(), signal.SIGINT)
        return logs

    monkeypatch.setattr(Trainer, "train_one_step", recording)
    config = load_config(tiny_config(sampler="attentive", distill="alpha", steps=24,
                                     optimizer={"name": "sgd", "lr": 0.2}),
                         ["strategy.sampler.num_random=1", "strategy.sampler.k=2"])
    with pytest.raises(Interrupted, match="SIGINT at step 18, checkpoint saved") as stopped:
        api.train(config, name="alphanet", runs_dir=tmp_path, progress=False, device="cpu")
    assert stopped.value.exit_code == 130
    run = RunDir(tmp_path / "alphanet")
    assert load_checkpoint(run.checkpoints / "last.pt")["step"] == 18
    assert all({"loss/max", "loss/random0", "divergence/random0", "alpha_min_share/min"} <= r.keys()
               for r in records)
    label_losses = [r["loss/max"] for r in records]
    assert sum(label_losses[-6:]) < sum(label_losses[:6]), label_losses
    assert all(r["divergence/min"] >= 0 and 0 <= r["alpha_min_share/min"] <= 1 for r in records)
    table = run.root / attentive_table.TABLE_FILE
    assert table.is_file()
    written = table.stat().st_mtime_ns

    def no_build(*args, **kwargs):
        raise AssertionError("resume should reuse the cached table")

    monkeypatch.setattr(attentive_table, "build_rows", no_build)
    monkeypatch.setattr(Trainer, "train_one_step", original)
    api.train(load_config(run.config), name="alphanet", resume=True, runs_dir=tmp_path, progress=False, device="cpu")
    assert load_checkpoint(run.checkpoints / "last.pt")["step"] == 24
    assert table.stat().st_mtime_ns == written


def _sandwich(distill: str):
    return api.build_strategy(load_config(tiny_config(sampler="sandwich", distill=distill)))


def _train(strategy, splits, steps: range) -> None:
    """Sandwich steps `steps` on consecutive training batches (SGD, fresh momentum)."""
    images, labels = splits.train_images.float() / 255, splits.train_labels
    io = StepIO(forward=strategy.model, pass_context=lambda final: contextlib.nullcontext(),
                all_reduce_mean=lambda t: t)
    optimizer = torch.optim.SGD(strategy.model.parameters(), lr=0.1, momentum=0.9)
    for step in steps:
        start = 64 * step % 512
        optimizer.zero_grad()
        strategy.train_step(images[start:start + 64], labels[start:start + 64], step, io)
        optimizer.step()


def _student_teacher_kl(strategy, splits) -> float:
    """KL(teacher || student) of the max and min subnets on held-out images."""
    held, space = splits.val_images[:128].float() / 255, strategy.space
    with preserved_buffers(strategy.model), torch.no_grad():
        teacher = F.log_softmax(strategy.subnet_for(space.max())(held), 1)
        student = F.log_softmax(strategy.subnet_for(space.min())(held), 1)
    return F.kl_div(student, teacher, log_target=True, reduction="batchmean").item()


@pytest.fixture(scope="module")
def warm():
    """Data, and weights after 12 label-only sandwich steps (teacher and student disagree by then)."""
    splits = load_dataset("fashion_mnist", val_size=256, train_size=512)
    strategy = _sandwich("none")
    _train(strategy, splits, range(12))
    return splits, strategy.model_state_dict()


@pytest.mark.parametrize("distill", ["kl", "alpha"])
def test_in_place_distillation_pulls_the_student_toward_the_teacher_beyond_what_the_labels_do(warm, distill):
    splits, weights = warm
    kls = {}
    for name in ("none", distill):         # the same weights, batches and subnets; only the loss differs
        strategy = _sandwich(name)
        strategy.load_model_state_dict(weights)
        before = _student_teacher_kl(strategy, splits)
        _train(strategy, splits, range(12, 22))
        kls[name] = before, _student_teacher_kl(strategy, splits)
    (start, labels_only), (same_start, distilled) = kls["none"], kls[distill]
    assert same_start == start
    # the teacher grows confident in these steps, so the gap widens under labels alone; with
    # distillation the student follows it: the KL is (and rises by) less than half as much
    assert distilled < 0.5 * labels_only and distilled - start < 0.5 * (labels_only - start), kls
