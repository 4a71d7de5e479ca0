"""An export through `nas.api` is the run's supernet for its arch, bit for bit: its weights are
the BN-recalibrated supernet's sliced weights, and its program computes what they compute."""
from __future__ import annotations

import random

import pytest
import torch
from safetensors.torch import load_file

from nas import api


@pytest.mark.slow
def test_an_export_holds_the_recalibrated_supernets_weights_and_outputs(trained, tmp_path):
    run = api.load_run("tiny", trained, device="cpu")
    archs = {"min": run.space.min(), "sampled": run.space.sample(random.Random(3))}
    for name, arch in archs.items():
        arch = run.space.canonical(arch)
        size = run.space.input_size(arch)
        x = torch.randn(3, run.space.in_chans, size, size, generator=torch.Generator().manual_seed(1))
        raw = run.subnet(arch).export(arch).state_dict()       # the checkpoint's BN statistics
        with run.evaluator.prepared(arch) as supernet, torch.no_grad():
            reference = supernet.export(arch)
            expected = {k: v.clone() for k, v in reference.state_dict().items()}
            outputs = reference(x)

        result = api.export_subnet(run, arch, tmp_path / name)
        weights = load_file(result.dir / "weights.safetensors")
        assert weights.keys() == expected.keys(), name
        assert all(torch.equal(weights[k], expected[k]) for k in expected), name
        assert not all(torch.equal(weights[k], raw[k]) for k in raw if k.endswith("running_var")), name
        program = torch.export.load(str(result.dir / "model.pt2")).module()
        with torch.no_grad():
            assert torch.equal(program(x), outputs), name
