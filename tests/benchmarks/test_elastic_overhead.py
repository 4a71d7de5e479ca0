"""benchmarks/elastic_overhead.py: per-phase timing bookkeeping and the --phases argument check."""
from __future__ import annotations

import itertools

import pytest
import torch

from benchmarks import common, elastic_overhead


def test_each_step_is_split_into_forward_backward_and_optimizer_step_by_the_clock():
    ticks = itertools.count()
    clock = lambda: float(next(ticks))       # every reading advances one unit: each phase lasts exactly 1
    models = [torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)]
    totals, phases = elastic_overhead.step_times(models, torch.randn(2, 4), torch.tensor([0, 2]), steps=5, clock=clock)
    assert [len(t) for t in phases] == [5, 5]                # the timed steps only, per model
    assert all(split == (1.0, 1.0, 1.0) for t in phases for split in t)
    # a step reads the clock 4 times inside the loop's 2 readings: 5 units from the loop's start to its end
    assert totals == [[5.0] * 5, [5.0] * 5]
    # the warm-up steps ran too: 3 per model, each taking 4 readings of its own (no reading of the loop)
    assert next(ticks) == 2 * (4 * common.WARMUP + 6 * 5)


def test_phases_refuse_more_than_one_thread(capsys):
    with pytest.raises(SystemExit) as exit_info:
        elastic_overhead.main(["--phases", "--threads", "2"])
    assert exit_info.value.code == 2
    assert "--phases: thread CPU time sees one thread only: use it with --threads 1 on the CPU" in capsys.readouterr().err
