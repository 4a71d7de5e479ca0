"""benchmarks/gpu_check.py's parts that need no GPU: arguments, the latency error figures, and a
clear one-line refusal without CUDA."""
from __future__ import annotations

import pytest
import torch

from benchmarks import gpu_check
from benchmarks.search_quality import percentage_errors


def test_arguments():
    args = gpu_check.parse_args([])
    assert (args.device, args.archs, args.steps, args.batch, args.out) == ("cuda:0", 30, 40, 128, None)
    args = gpu_check.parse_args(["--device", "cuda:1", "--archs", "5", "--out", "/tmp/x"])
    assert (args.device, args.archs, args.out) == ("cuda:1", 5, "/tmp/x")
    for bad in (["--device", "cpu"], ["--archs", "0"], ["--steps", "2"]):
        with pytest.raises(SystemExit):
            gpu_check.parse_args(bad)


def test_percentage_errors_against_a_hand_computation():
    result = percentage_errors([1.1, 0.9, 2.0, 3.3], [1.0, 1.0, 2.0, 3.0])     # 10%, 10%, 0%, 10%
    assert result["mape_pct"] == pytest.approx(7.5) and result["median_ape_pct"] == pytest.approx(10.0)
    for predicted, measured in (([1.0], []), ([1.0], [0.0]), ([1.0, 2.0], [1.0])):
        with pytest.raises(ValueError):
            percentage_errors(predicted, measured)


def test_without_cuda_it_refuses_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_check.main([]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "gpu_check: needs a CUDA GPU (torch.cuda.is_available() is False)"
