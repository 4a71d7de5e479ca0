"""The contract every registered strategy, sampler and distillation loss keeps.

Each plugin against the defaults of the others, on a tiny real-data space: the loss falls over
a few dozen steps on a fixed batch; a state round trip (save, rebuild from the config, load)
gives a bit-identical next step; two gloo ranks train the same subnets and end with equal
weights; the anchors a strategy reports (what a search evaluates first) are trained at every
step (after a few-shot split: at every step of their sub-supernet). The test-only plugins of
`tests.supernets.toys` (a strategy that splits its model, a sampler that learns) are
registered too, so the seam they use is held to the same contract, and so is a
mixture-of-supernets model (routers and experts: all-reduced, checkpointed, optimised).
"""
from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import pytest
import torch

import tests.supernets.toys  # noqa: F401  (registers toy_split and toy_learning)
from nas import api
from nas.core.arch import arch_id
from nas.core.config import load_config
from nas.core.registry import DISTILL_LOSSES, SAMPLERS, STRATEGIES
from nas.engine.checkpoint import load_checkpoint, save_checkpoint
from nas.engine.data.datasets import load_dataset
from nas.engine.distributed import DistEnv
from nas.engine.run_dir import RunDir
from nas.engine.training.trainer import Trainer
from supernets.few_shot import FewShotStrategy
from supernets.router import Router
from tests.support.tiny import tiny_config


def _valid(strategy: str, sampler: str, distill: str) -> bool:
    """A distillation loss needs a sampler that trains the max subnet, its teacher; few-shot
    splitting refuses the shiftnas sampler (fitted to one space); progressive shrinking draws its
    own subnets and takes only the default sampler, which it does not use."""
    if strategy == "few_shot" and sampler == "shiftnas":
        return False
    if strategy == "progressive_shrinking":
        return sampler == "sandwich"
    return distill == "none" or SAMPLERS.get(sampler).obj.trains_max


def _combinations() -> list[tuple[str, str, str]]:
    """Every registered plugin once against the defaults of the others: each strategy with the
    sandwich rule and no distillation, each sampler and each loss under one-shot training."""
    combos = [(strategy, "sandwich", "none") for strategy in STRATEGIES.names()]
    combos += [("one_shot", sampler, "none") for sampler in SAMPLERS.names()]
    combos += [("one_shot", "sandwich", distill) for distill in DISTILL_LOSSES.names()]
    return sorted(set(combos))


def _cover(combos: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """Few combinations (of all valid ones) in which every plugin appears at least once."""
    names = {name for combo in combos for name in combo}
    valid = [(a, b, c) for a in STRATEGIES.names() for b in SAMPLERS.names() for c in DISTILL_LOSSES.names()
             if _valid(a, b, c)]
    chosen: list[tuple[str, str, str]] = []
    while names - {n for combo in chosen for n in combo}:
        missing = names - {n for combo in chosen for n in combo}
        chosen.append(max(valid, key=lambda combo: (len(missing & set(combo)), combo)))
    return sorted(chosen)


COMBOS = _combinations()
# (strategy, sampler, distill, mixture routing): a mixture under a sampler that learns, and one
# under a strategy that splits its model (so the routers are copied)
MIXTURES = [("one_shot", "toy_learning", "none", "layer"), ("toy_split", "sandwich", "none", "neuron")]
CASES = [combo + (None,) for combo in COMBOS] + MIXTURES


def _case_id(case: tuple) -> str:
    return "-".join(case[:3]) + (f"-mixture_{case[3]}" if case[3] is not None else "")


def _config(strategy: str, sampler: str, distill: str, routing: str | None = None, lr: float = 0.05):
    # few_shot: a global batch of 128 over the 512 training images makes 4 steps an epoch, so
    # its first split (end of epoch 1) falls after step 4, like the toy split
    data = tiny_config(sampler=sampler, distill=distill, steps=40,
                       optimizer={"name": "sgd", "lr": lr, "momentum": 0.9, "weight_decay": 5.0e-4},
                       **({"batch_size": 128} if strategy == "few_shot" else {}))
    data["strategy"]["name"] = strategy
    if strategy == "few_shot":
        data["strategy"]["options"] = {"split": {"at_epochs": [1], "batches": 2}}
    if strategy == "progressive_shrinking":    # every dimension open by step 15, at the run's rate
        data["strategy"]["options"] = {"phases": [{"name": name, "share": 4 if name == "width" else 1, "subnets": 2}
                                                  for name in ("full", "kernel", "depth", "expand", "width")]}
    if routing is not None:
        data["strategy"]["mixture"] = {"experts": 2, "routing": routing, "hidden": 16}
    if sampler == "attentive":
        data["strategy"]["sampler"].update(num_random=1, k=2, table_size=200, table_fill=2, table_tries=20)
    if sampler == "shiftnas":   # shift the bins every other step from the start
        data["strategy"]["sampler"].update(bins=4, update_every=2, warmup_epochs=0, table_size=200, table_fill=2,
                                           table_tries=20)
    return load_config(data)


@pytest.fixture(scope="module")
def splits():
    return load_dataset("fashion_mnist", val_size=256, train_size=512)


def _trainer(config, splits, root: Path, env: DistEnv = DistEnv()) -> Trainer:
    strategy = api.build_strategy(config)
    strategy.set_cache_dir(root)
    return Trainer(config, strategy, splits, RunDir(root), env=env, progress=False)


def _batch(splits, start: int = 0, size: int = 64):
    return splits.train_images[start:start + size].float() / 255, splits.train_labels[start:start + size]


def _params(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.strategy.model_state_dict().items()}


def test_every_plugin_is_covered():
    covered = {name for combo in COMBOS for name in combo}
    assert set(STRATEGIES.names()) | set(SAMPLERS.names()) | set(DISTILL_LOSSES.names()) <= covered
    assert {"toy_split", "toy_learning", "few_shot"} <= covered


def _label_losses(trainer: Trainer, x: torch.Tensor, y: torch.Tensor) -> list[float]:
    """Cross-entropy of the min and max subnets on a batch (batch statistics, no update)."""
    space, losses = trainer.strategy.space, []
    for arch in (space.min(), space.max()):
        module = trainer.strategy.subnet_for(arch)
        buffers = [(b, b.clone()) for b in module.buffers()]
        with torch.no_grad():
            losses.append(torch.nn.functional.cross_entropy(module.train()(x), y).item())
        for b, value in buffers:
            b.copy_(value)
    return losses


@pytest.mark.parametrize("strategy, sampler, distill, routing", CASES, ids=map(_case_id, CASES))
def test_loss_falls_on_a_fixed_batch(tmp_path, splits, strategy, sampler, distill, routing):
    trainer = _trainer(_config(strategy, sampler, distill, routing, lr=0.2), splits, tmp_path)
    x, y = _batch(splits)
    before = _label_losses(trainer, x, y)
    for _ in range(20):
        trainer.train_one_step(x, y)
    after = _label_losses(trainer, x, y)
    assert all(a < b - 0.1 for a, b in zip(after, before)), (before, after)   # nats, min and max


@pytest.mark.parametrize("strategy, sampler, distill, routing", CASES, ids=map(_case_id, CASES))
def test_state_round_trip_gives_a_bit_identical_next_step(tmp_path, splits, strategy, sampler, distill, routing):
    config = _config(strategy, sampler, distill, routing)
    first = _trainer(config, splits, tmp_path / "a")
    for step in range(6):      # past the toy and few-shot splits (after step 4)
        first.train_one_step(*_batch(splits, 64 * step))
    save_checkpoint(first.checkpoint_state(), tmp_path / "last.pt")
    second = _trainer(config, splits, tmp_path / "b")
    second.restore(load_checkpoint(tmp_path / "last.pt"))
    assert second.strategy.state_dict().keys() == first.strategy.state_dict().keys()
    x, y = _batch(splits, 64 * 6)
    logs_first, logs_second = first.train_one_step(x, y), second.train_one_step(x, y)
    assert logs_first == logs_second
    a, b = _params(first), _params(second)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert [dict(s) for s in first.strategy.trained_archs(7)] == [dict(s) for s in second.strategy.trained_archs(7)]


@pytest.mark.parametrize("strategy, sampler, distill", COMBOS)
def test_anchors_are_trained_at_every_step(tmp_path, splits, strategy, sampler, distill):
    trainer = _trainer(_config(strategy, sampler, distill), splits, tmp_path)
    space = trainer.strategy.space
    anchors = [arch_id(a) for a in trainer.strategy.anchor_archs()]
    # samplers that train the max subnet (the teacher) every step also train min: both anchor a search;
    # a strategy that draws its own subnets (progressive shrinking) has no sampler and no anchors
    trains_max = strategy != "progressive_shrinking" and SAMPLERS.get(sampler).obj.trains_max
    assert anchors == ([arch_id(space.max()), arch_id(space.min())] if trains_max else [])
    for step in range(6):     # past the toy and few-shot splits (after step 4)
        trained = {arch_id(a) for a in trainer.strategy.trained_archs(step)}
        assert set(_anchors_of_step(trainer.strategy, step)) <= trained, step
        trainer.train_one_step(*_batch(splits, 64 * step))


def _anchors_of_step(strategy, step: int) -> list[str]:
    """The anchors a step must train: all of them, or after a few-shot split those of the
    sub-supernet the step trains (the run's anchors are the union of its sub-supernets')."""
    if not isinstance(strategy, FewShotStrategy):
        return [arch_id(a) for a in strategy.anchor_archs()]
    union = {arch_id(a) for part in strategy.parts for a in part.anchor_archs()}
    assert union == {arch_id(a) for a in strategy.anchor_archs()}
    return [arch_id(a) for a in strategy.parts[strategy.part_of_step(step)].anchor_archs()]


def _rank_job(rank: int, store: str, combo: tuple, out: dict) -> None:
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        splits = load_dataset("fashion_mnist", val_size=256, train_size=512)
        trainer = _trainer(_config(*combo), splits, Path(store).parent / f"r{rank}", DistEnv(rank, 2, rank, "cpu"))
        routers = [p for m in trainer.strategy.model.modules() if isinstance(m, Router) for p in m.parameters()]
        initial = [p.detach().clone() for p in routers]
        archs = []
        for step in range(6):
            x, y = _batch(splits, 32 * (2 * step + rank), 32)     # each rank its own images
            trainer.train_one_step(x, y)
            archs.append([dict(a) for a in trainer.strategy.trained_archs(step)])
        # parameters only: BN running statistics are per rank (each rank sees its own images)
        moved = sum(not torch.equal(p, q) for p, q in zip(routers, initial))
        out[rank] = (archs, torch.cat([p.detach().flatten() for p in trainer.strategy.model.parameters()]), moved)
    finally:
        torch.distributed.destroy_process_group()


# a split-and-mixture case rides on a covering combination instead of adding a DDP run
DDP_CASES = [combo + ("neuron" if combo == ("toy_split", "sandwich", "alpha") else None,) for combo in _cover(COMBOS)]


@pytest.mark.slow
@pytest.mark.parametrize("combo", DDP_CASES, ids=map(_case_id, DDP_CASES))
def test_two_gloo_ranks_agree(tmp_path, combo):
    context = mp.get_context("spawn")
    with context.Manager() as manager:
        out = manager.dict()
        procs = [context.Process(target=_rank_job, args=(rank, str(tmp_path / "store"), combo, out))
                 for rank in range(2)]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(timeout=300)
        assert [proc.exitcode for proc in procs] == [0, 0]
        (archs0, params0, moved0), (archs1, params1, moved1) = out[0], out[1]
    assert archs0 == archs1
    assert torch.equal(params0, params1)
    if combo[3] is not None:      # the routers learned, from each rank's own images, and agree
        assert moved0 == moved1 > 0
