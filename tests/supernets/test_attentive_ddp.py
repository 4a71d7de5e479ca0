"""Attentive sampling under real DDP (2 CPU processes, gloo): ranks see different batches,
all-reduce their candidate losses and so train the same subnets."""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _rank(rank: int, store: str, cache_dir: str, results) -> None:
    from pathlib import Path

    from nas import api
    from nas.core.config import load_config
    from nas.engine.data.datasets import load_dataset
    from nas.engine.distributed import DistEnv
    from nas.engine.run_dir import RunDir
    from nas.engine.training.trainer import Trainer
    from tests.support.tiny import tiny_config

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        config = load_config(tiny_config(sampler="attentive", distill="alpha"), ["strategy.sampler.k=4"])
        strategy = api.build_strategy(config)
        strategy.set_cache_dir(Path(cache_dir))
        chosen, draw = [], strategy.sampler.random_archs
        strategy.sampler.random_archs = lambda step, score: chosen.append(draw(step, score)) or chosen[-1]
        splits = load_dataset("fashion_mnist", val_size=512, train_size=1024)
        trainer = Trainer(config, strategy, splits, RunDir(Path(cache_dir) / f"r{rank}"),
                          env=DistEnv(rank, 2, rank, "cpu"), progress=False)
        for step in range(3):
            start = 32 * (2 * step + rank)                 # each rank its own images
            trainer.train_one_step(splits.train_images[start:start + 32].float() / 255,
                                   splits.train_labels[start:start + 32])
        params = torch.cat([p.detach().flatten() for p in strategy.model.parameters()])
        results[rank] = (chosen, params)
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_ranks_with_different_data_train_the_same_attentive_subnets(tmp_path):
    store = tmp_path / "store"       # a file rendezvous: no port to find free and hope it stays free
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_rank, args=(str(store), str(tmp_path), results), nprocs=2)
        (chosen0, params0), (chosen1, params1) = results[0], results[1]
    assert len(chosen0) == 3 and chosen0 == chosen1
    assert torch.equal(params0, params1)
    assert (tmp_path / "attentive_table.json").is_file()
