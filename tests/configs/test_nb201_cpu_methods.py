"""The seed methods of benchmarks.nb201_supernets (their `--set` overrides of cifar10_nb201_cpu)
each train a few steps on a generated image folder (SPOS, the config as shipped, trains in
tests/configs/test_shipped_configs.py)."""
from __future__ import annotations

import json

import pytest

from benchmarks.nb201_supernets import CONFIG, METHODS
from nas import api
from nas.core.config import load_config
from tests.configs.test_shipped_configs import tiny_overrides

SAMPLERS = {"sandwich": "sandwich", "pada": "pada", "gm": "uniform"}


@pytest.mark.slow
@pytest.mark.parametrize("method", sorted(SAMPLERS))
def test_each_seed_method_trains_on_the_cpu_config(method, tmp_path, monkeypatch):
    assert set(SAMPLERS) == set(METHODS) - {"spos"}
    overrides = tiny_overrides(CONFIG, tmp_path, monkeypatch) + METHODS[method]
    if method == "gm":      # one split inside the 2 steps, probed on one batch
        overrides += ["strategy.options.split.at=[0.5]", "strategy.options.split.batches=1"]
    config = load_config(CONFIG, overrides)
    assert (config.space.options.channels, config.space.options.cells_per_stage) == (16, 2)
    assert config.strategy.sampler.name == SAMPLERS[method]
    run = api.train(config, name=method, runs_dir=tmp_path / "runs", progress=False, device="cpu")
    metrics = [json.loads(line) for line in run.dir.metrics.read_text().splitlines()]
    assert [m["step"] for m in metrics] == [2]
    loaded = api.load_run(run.run, device="cpu")
    if method == "gm":
        assert len(loaded.strategy.parts) == 2       # the split happened
    assert 0 <= api.evaluate(loaded, "max", "val").top1 <= 1
