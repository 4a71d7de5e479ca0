"""Training, evaluation, search and export on CUDA (skipped without a CUDA device).

Each test checks its CUDA result against something computed independently: the CPU, an
uninterrupted run, or the saved export.
"""
from __future__ import annotations

import json

import pytest
import torch

from nas import api, cli
from nas.core import yaml_io
from nas.core.config import load_config
from nas.engine.checkpoint import load_checkpoint
from nas.engine.devices import exact_float32
from tests.conftest import make_space, make_supernet
from tests.support.helpers import straight_and_resumed
from tests.support.tiny import tiny_config

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def _train(tmp_path, name="run", steps=24, device="cuda", overrides=(), **train):
    config = load_config(tiny_config(steps=steps, **train), list(overrides))
    return api.train(config, name=name, runs_dir=tmp_path, progress=False, device=device)


def test_cuda_run_passes_epoch_ends_and_evaluates_like_the_cpu(tmp_path):
    run = _train(tmp_path, steps=24)        # 16 steps an epoch: one epoch end with evaluation, then the last step
    records = [json.loads(line) for line in run.dir.metrics.read_text().splitlines()]
    assert [r["step"] for r in records] == [16, 24]
    state = load_checkpoint(run.dir.checkpoints / "last.pt")
    assert state["step"] == 24 and all(v.device.type == "cpu" for v in state["model"].values())
    best = load_checkpoint(run.dir.checkpoints / "best.pt")
    assert best["step"] in (16, 24)
    record = records[[r["step"] for r in records].index(best["step"])]
    on_cpu = api.load_run(run.dir.root, checkpoint="best.pt", device="cpu")
    on_cuda = api.load_run(run.dir.root, checkpoint="best.pt", device="cuda")
    assert next(on_cuda.strategy.model.parameters()).device.type == "cuda"
    for role, arch in on_cpu.strategy.monitored_archs().items():
        cpu = api.evaluate(on_cpu, arch).top1
        cuda = api.evaluate(on_cuda, arch).top1
        assert abs(cpu - record[f"val_top1_{role}"]) <= 0.01 and abs(cpu - cuda) <= 0.01, (role, cpu, cuda)


def test_cuda_resume_mid_epoch_matches_the_uninterrupted_run(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)

    def train(name, resume):
        return _train(tmp_path, name=name, steps=24) if not resume else api.train(
            load_config(tmp_path / name / "config.yaml"), name=name, resume=True, runs_dir=tmp_path, progress=False,
            device="cuda")

    a, b = straight_and_resumed(train, 19, monkeypatch)
    assert a["step"] == b["step"] == 24
    worst = max((value - b["model"][key]).abs().max().item() for key, value in a["model"].items()
                if value.is_floating_point())
    assert worst <= 1e-4, worst      # same batches and subnets; only float summation order may differ


def test_bf16_channels_last_training_on_cuda(tmp_path):
    run = _train(tmp_path, steps=20, precision="bf16", channels_last=True)
    state = load_checkpoint(run.dir.checkpoints / "last.pt")
    assert state["step"] == 20
    assert all(torch.isfinite(v).all() for v in state["model"].values() if v.is_floating_point())
    initial = api.build_supernet(load_config(tiny_config())).state_dict()
    assert any(not torch.equal(initial[k], v) for k, v in state["model"].items() if v.is_floating_point())


def test_search_and_export_on_cuda_give_the_subnet_the_saved_model_computes(tmp_path, capsys):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml_io.dumps(tiny_config(steps=16)))
    runs = str(tmp_path / "runs")
    assert cli.main(["train", str(path), "--name", "g", "--runs-dir", runs, "--quiet", "--device", "cuda"]) == 0
    assert cli.main(["search", "g", "--runs-dir", runs, "--searcher", "random", "--trials", "4", "--json",
                     "--quiet", "--device", "cuda:0", "--score", "supernet"]) == 0
    found = json.loads(capsys.readouterr().out)
    out = tmp_path / "winner"
    best = f"{found['dir']}/best.yaml"
    assert cli.main(["export", "g", "--runs-dir", runs, "--arch", best, "--out", str(out), "--json",
                     "--device", "cuda"]) == 0
    exported = json.loads(capsys.readouterr().out)
    assert exported["val_top1"] == found["val_top1"]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["checked_on"] == "cuda:0"
    # the saved program runs on the CPU and computes what the recalibrated supernet computes on CUDA
    program = torch.export.load(str(out / "model.pt2")).module()
    run = api.load_run("g", runs, device="cuda")
    arch = api.resolve_arch(run.space, best)
    size = arch["resolution"]
    x = torch.randn(8, 1, size, size, generator=torch.Generator().manual_seed(1))
    with run.evaluator.prepared(arch) as supernet, torch.no_grad(), exact_float32(torch.device("cuda")):
        reference = supernet(x.cuda()).cpu()
    assert (program(x) - reference).abs().max().item() <= 1e-3 * max(1.0, reference.abs().max().item())


@pytest.mark.parametrize("name", ["mobilenetv3", "vit", "cell201"])
def test_supernet_and_export_agree_on_cuda(name):
    space = make_space(name, small=True)
    supernet = make_supernet(space).cuda()
    import random

    rng = random.Random(0)
    for arch in [space.max(), space.min()] + [space.sample(rng) for _ in range(4)]:
        static = supernet.export(arch).cuda()
        supernet.set_active(arch)
        size = space.input_size(arch)
        x = torch.randn(4, space.in_chans, size, size, device="cuda")
        with torch.no_grad(), exact_float32(x.device):
            assert torch.backends.cudnn.allow_tf32 is False and torch.backends.cuda.matmul.allow_tf32 is False
            a, b = supernet(x), static(x)
        assert (a - b).abs().max().item() <= 1e-4 * max(1.0, a.abs().max().item()), arch
