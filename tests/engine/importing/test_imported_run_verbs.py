"""An imported OFA run is read like a trained run: BN-recalibrated evaluation on the user's
ImageFolder data, search under MACs, and export (timm, torch.export, a fine-tune) of the result."""
from __future__ import annotations

import json

import pytest
import torch

from nas import api
from nas.cli import main
from nas.core.config import FinetuneConfig
from safetensors.torch import load_file
from search_spaces.timm_models import load_timm_export
from tests.support.fake_data import write_png_tree
from tests.support.ofa_nets import random_ofa_net

pytest.importorskip("ofa", reason="the ofa package (pip install -e .[dev]) makes OFA's checkpoints")


@pytest.mark.slow
def test_imported_run_evaluates_searches_and_exports_on_the_users_data(tmp_path):
    write_png_tree(tmp_path / "tree", train_per_class=8, val_per_class=2)
    torch.save({"state_dict": random_ofa_net(1.0).state_dict()}, tmp_path / "ofa.pth")
    assert main(["import", "ofa", str(tmp_path / "ofa.pth"), "--name", "ofa", "--runs-dir", str(tmp_path / "runs"),
                 "--set", f"data.root={tmp_path / 'tree'}", "data.val_size=6", "data.image_size=40",
                 "data.workers=0", "space.options.resolutions=[32,40]", "eval.bn_recal_batches=1",
                 "eval.bn_recal_batch_size=8", "eval.batch_size=16", "train.precision=fp32",
                 "train.channels_last=false", "train.batch_size=8"]) == 0
    run = api.load_run(tmp_path / "runs" / "ofa", device="cpu")
    before = run.strategy.model.state_dict()["blocks.1.0.bn1.running_mean"].clone()
    low = api.evaluate(run, "min", "val")
    assert low.n_images == 6 and 0 <= low.top1 <= 1
    assert torch.equal(run.strategy.model.state_dict()["blocks.1.0.bn1.running_mean"], before)   # recalibrated apart

    budget = (run.space.macs(run.space.min()) + run.space.macs(run.space.max())) // 2
    found = api.search(run, "random", trials=3, max_macs=budget, out=tmp_path / "search", progress=False)
    assert found.macs <= budget

    exported = api.export_subnet(run, found.best, tmp_path / "export")
    timm_model = load_timm_export(tmp_path / "export")       # strict: ds first block, no head bias
    program = torch.export.load(str(tmp_path / "export" / "model.pt2")).module()
    x = torch.randn(2, 3, exported.record["preprocessing"]["resolution"], exported.record["preprocessing"]["resolution"])
    with torch.no_grad():
        assert (timm_model(x) - program(x)).abs().max() <= 1e-4 * program(x).abs().max()
    assert timm_model(x).shape == (2, 1000)      # the checkpoint's head, data with fewer classes

    # the data has 3 classes, the checkpoint's head 1000: the fine-tune replaces the head and says so
    tuned = api.export_subnet(run, found.best, tmp_path / "tuned", finetune=FinetuneConfig(length=2))
    assert tuned.record["shipped"] == "finetuned"
    assert tuned.record["finetune"]["head"] == {"replaced": True, "classes_before": 1000, "classes": 3}
    tuned_timm = load_timm_export(tmp_path / "tuned")        # strict, with the 3-class head
    assert tuned_timm(x).shape == (2, 3) and tuned.params == sum(p.numel() for p in tuned_timm.parameters())
    assert tuned.macs == exported.macs - 1280 * (1000 - 3)


@pytest.mark.slow
def test_an_imported_run_without_data_exports_its_checkpoint_statistics_unevaluated(tmp_path, capsys):
    from ofa.imagenet_classification.elastic_nn.networks import OFAMobileNetV3

    net = OFAMobileNetV3(n_classes=10, ks_list=[3, 5, 7], expand_ratio_list=[3, 4, 6], depth_list=[2, 3, 4])
    torch.save({"state_dict": net.state_dict()}, tmp_path / "ofa.pth")
    runs = str(tmp_path / "runs")
    assert main(["import", "ofa", str(tmp_path / "ofa.pth"), "--name", "ofa", "--runs-dir", runs,
                 "--set", "space.options.resolutions=[32]"]) == 0
    capsys.readouterr()
    assert main(["export", "ofa", "--arch", "min", "--out", str(tmp_path / "export"), "--runs-dir", runs,
                 "--device", "cpu", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert (record["val_top1"], record["evaluated"], record["bn_statistics"]) == (None, False, "imported, not recalibrated")
    assert record["preprocessing"]["mean"] == [0.485, 0.456, 0.406]
    run = api.load_run(tmp_path / "runs" / "ofa", device="cpu")
    weights = load_file(str(tmp_path / "export" / "weights.safetensors"))
    assert torch.equal(weights["bn1.running_var"], net.state_dict()["first_conv.bn.running_var"])
    assert run.imported["width"] == "1.0"
    assert main(["export", "ofa", "--arch", "min", "--out", str(tmp_path / "tuned"), "--runs-dir", runs,
                 "--device", "cpu", "--finetune", "2"]) == 2
    assert "--finetune: a fine-tune trains on data: set data.root" in capsys.readouterr().err
