"""benchmarks/elastic_overhead.py: per-phase timing bookkeeping and the --phases argument check."""
from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import elastic_overhead  # noqa: E402


def test_each_step_is_split_into_forward_backward_and_optimizer_step_by_the_clock():
    ticks = itertools.count()
    clock = lambda: float(next(ticks))       # every reading advances one unit: each phase lasts exactly 1
    models = [torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)]
    times = elastic_overhead.step_times(models, torch.randn(2, 4), torch.tensor([0, 2]), steps=5, clock=clock)
    assert [len(t) for t in times] == [2, 2]                 # 5 steps less 3 warm-up ones, per model
    assert all(phases == (1.0, 1.0, 1.0) for t in times for phases in t)


def test_phases_refuse_more_than_one_thread(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["elastic_overhead.py", "--phases", "--threads", "2"])
    with pytest.raises(SystemExit) as exit_info:
        elastic_overhead.main()
    assert exit_info.value.code == 2
    assert "--phases: thread CPU time sees one thread only: use it with --threads 1 on the CPU" in capsys.readouterr().err
