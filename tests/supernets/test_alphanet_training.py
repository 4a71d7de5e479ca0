"""AlphaNet on real data: `distill: alpha` + `sampler: attentive` train, log and resume."""
from __future__ import annotations

import os
import signal

from nas import api
from nas.core.config import load_config
from nas.engine.checkpoint import load_checkpoint
from nas.engine.trainer import Trainer
from supernets import attentive_table
from tests.nas.tiny import tiny_config


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
    run = api.train(config, name="alphanet", runs_dir=tmp_path, progress=False, device="cpu")
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
