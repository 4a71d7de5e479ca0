"""Every shipped config runs: builds, trains a few steps on tiny data, evaluates, searches a
handful of archs and exports. Fashion-MNIST configs read a 96-image copy of the real files (the
export evaluates the whole test split); configs whose data this machine lacks (CIFAR, ImageFolder
trees) get a tiny fake dataset of the right format; large images are shrunk, and bf16 (for GPUs)
becomes fp32, so a config takes seconds on a CPU."""
from __future__ import annotations

import json

import pytest
import torch

from nas import api
from nas.core.config import load_config, shipped_configs
from tests.support.fake_data import write_fake_cifar, write_fashion_subset, write_png_tree

SMALL = ["train.epochs=null", "train.steps=2", "train.batch_size=8", "train.checkpoint.every_steps=1",
         "train.precision=fp32",
         "eval.bn_recal_batches=1", "eval.bn_recal_batch_size=8", "eval.batch_size=500", "data.workers=0"]
SHRUNK_SIDE = 32


def tiny_overrides(name: str, tmp_path, monkeypatch) -> list[str]:
    """`--set` overrides that make config `name` train in seconds on tiny (maybe fake) data."""
    config = load_config(name)
    data = config.data
    overrides = list(SMALL)
    if data.name in ("cifar10", "cifar100"):
        import torchvision.datasets.cifar as tv_cifar

        write_fake_cifar(tmp_path, data.name, per_file=4, n_test=6)     # 20 (cifar10) training images
        monkeypatch.setattr(tv_cifar, "check_integrity", lambda *args, **kwargs: True)  # fake files, real md5s
        overrides += [f"data.root={tmp_path}", "data.val_size=4", "data.train_size=null"]
    elif data.name == "imagefolder":
        write_png_tree(tmp_path / "tree", train_per_class=8, val_per_class=2)
        overrides += [f"data.root={tmp_path / 'tree'}", "data.val_size=6", "data.train_size=null",
                      "data.num_classes=null"]     # the tree's classes, not ImageNet's
    else:
        write_fashion_subset(tmp_path, n_train=64, n_test=32)
        overrides += [f"data.root={tmp_path}", "data.val_size=16", "data.train_size=null"]
    if config.strategy.name == "few_shot":    # one split inside the 2 steps, which stay 2
        overrides += ["strategy.options.split.at=[0.5]", "strategy.options.split.budget=shared"]
    if config.strategy.name == "progressive_shrinking":    # a step for each of its phases
        overrides.append("train.steps=20")
    if data.image_size is not None and data.image_size > SHRUNK_SIDE:
        overrides.append(f"data.image_size={SHRUNK_SIDE}")
        if hasattr(config.space.options, "resolutions"):
            overrides.append(f"space.options.resolutions=[{SHRUNK_SIDE}]")
    return overrides


def test_shipped_configs_include_the_user_data_configs():
    assert {"cifar10_mbv3", "imagenet_mbv3", "fashion_mnist_mbv3"} <= set(shipped_configs())


@pytest.mark.slow
@pytest.mark.parametrize("name", shipped_configs())
def test_shipped_config_trains_evaluates_searches_and_exports(name, tmp_path, monkeypatch):
    config = load_config(name, tiny_overrides(name, tmp_path, monkeypatch))
    run = api.train(config, name="run", runs_dir=tmp_path / "runs", progress=False, device="cpu")
    metrics = [json.loads(line) for line in run.dir.metrics.read_text().splitlines()]
    steps = config.train.steps
    ends = [m["step"] for m in metrics]     # one record an epoch end, the last at the run's end
    assert ends == sorted(set(ends)) and ends[-1] == steps
    assert all(0 <= v <= 1 for m in metrics for k, v in m.items() if "top1" in k)

    loaded = api.load_run(run.run, device="cpu")
    assert loaded.step == steps
    if config.strategy.name == "few_shot":
        assert len(loaded.strategy.parts) == 2       # the split really happened
    low = api.evaluate(loaded, "min", "val")
    assert low.n_images == config.data.val_size and 0 <= low.top1 <= 1

    found = api.search(loaded, "random", trials=3, out=tmp_path / "search", progress=False)
    lines = (tmp_path / "search" / "results.jsonl").read_text().splitlines()
    assert found.evaluated == len(lines) == 3

    exported = api.export_subnet(loaded, found.best, tmp_path / "export")
    assert exported.arch_id == found.arch_id and exported.macs == found.macs
    program = torch.export.load(str(tmp_path / "export" / "model.pt2")).module()
    side = loaded.space.input_size(found.best)
    assert program(torch.zeros(2, loaded.data.in_chans, side, side)).shape == (2, loaded.data.num_classes)
