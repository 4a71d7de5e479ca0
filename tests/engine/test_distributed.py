"""DDP under torchrun (gloo, 2 CPU processes) equals one process accumulating both half-batches."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from nas import api
from nas.core.config import load_config
from nas.engine.checkpoint import load_checkpoint
from nas.engine.data.batches import Augment, train_batches
from nas.engine.run_dir import RunDir
from nas.engine.training.trainer import Trainer
from supernets.base import StepIO
from tests.support.helpers import torchrun
from tests.support.tiny import tiny_config

ROOT = Path(__file__).resolve().parents[2]
STEPS = 6
TOLERANCE = 1e-6   # float32: the all-reduce sums the two half-batch gradients in another order


def _single_process_reference(steps: int) -> dict[str, torch.Tensor]:
    """One process: each step accumulates the gradients of the two half-batches, halved (DDP's mean)."""
    config = load_config(tiny_config(steps=steps))
    splits = api.load_splits(config)
    strategy = api.build_strategy(config)
    supernet = strategy.supernet
    trainer = Trainer(config, strategy, splits, RunDir(Path("/nonexistent")), progress=False)
    io = StepIO(forward=supernet, pass_context=lambda final: torch.enable_grad(), all_reduce_mean=lambda t: t)
    augment = Augment(config.data.augment.crop_padding, config.data.augment.hflip)
    batches = train_batches(splits, config.train.batch_size, config.train.seed, 0, 0, augment)
    for step, (images, labels) in zip(range(steps), batches):
        trainer.scheduler.step_update(step)
        trainer.optimizer.zero_grad(set_to_none=True)
        supernet.train()
        half = len(labels) // 2
        for part in (slice(0, half), slice(half, None)):
            strategy.train_step(images[part].contiguous(memory_format=torch.channels_last), labels[part], step, io)
        for p in supernet.parameters():
            if p.grad is not None:
                p.grad /= 2
        trainer._clip()
        trainer.optimizer.step()
    return {k: v.detach().clone() for k, v in supernet.named_parameters()}


@pytest.mark.slow
def test_two_gloo_ranks_sample_the_same_archs_and_match_one_process(tmp_path):
    stderr = torchrun("ddp_job.py", str(tmp_path), str(STEPS), cwd=tmp_path)
    assert "deprecated" not in stderr, stderr[-2000:]     # DDP is wrapped with this torch's own names
    archs = [json.loads((tmp_path / f"archs-{rank}.json").read_text()) for rank in (0, 1)]
    assert archs[0] == archs[1] and len(archs[0]) == STEPS * 3   # sandwich: max, 1 random, min
    for rank in (0, 1):    # what probes share their batches out by
        assert json.loads((tmp_path / f"io-{rank}.json").read_text()) == [[rank, 2]]
    state = load_checkpoint(tmp_path / "ddp" / "checkpoints" / "last.pt")
    assert json.loads((tmp_path / "ddp" / "environment.json").read_text())["ranks"] == 2
    assert state["step"] == STEPS and not any(k.startswith("module.") for k in state["model"])
    measured = api.fidelity(tmp_path / "ddp", archs=2, epochs=1, progress=False)   # like any other run
    assert measured.new == 2 and measured.summary["step"] == STEPS and len(measured.records) == 2
    torch.set_num_threads(1)
    reference = _single_process_reference(STEPS)
    worst = max((state["model"][name] - value).abs().max().item() for name, value in reference.items())
    assert worst <= TOLERANCE, worst
    initial = dict(api.build_supernet(load_config(tiny_config(steps=STEPS))).named_parameters())
    moved = max((reference[n] - initial[n]).abs().max().item() for n in reference)
    assert moved > 100 * TOLERANCE     # training moved the weights: the comparison is not vacuous
