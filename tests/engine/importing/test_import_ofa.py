"""`nas import ofa`: every spelling OFA's loader accepts, the run folder it writes, and one line
with exit 2 for every bad file. Checkpoints are crafted from OFA's own network (no downloads)."""
from __future__ import annotations

import argparse
import json

import pytest
import torch

from nas import api
from nas.cli import main
from nas.engine.importing import sha256
from nas.engine.importing.ofa import ofa_subnet

pytest.importorskip("ofa", reason="the ofa package (pip install -e .[dev]) makes OFA's checkpoints")


@pytest.fixture(scope="module")
def ofa_state():
    from ofa.imagenet_classification.elastic_nn.networks import OFAMobileNetV3

    torch.manual_seed(0)
    net = OFAMobileNetV3(n_classes=10, width_mult=1.0, ks_list=[3, 5, 7], expand_ratio_list=[3, 4, 6],
                         depth_list=[2, 3, 4])
    return net.state_dict()


def run_import(tmp_path, payload, name="ofa", extra=()) -> int:
    path = tmp_path / f"{name}.pth"
    torch.save(payload, path)
    return main(["import", "ofa", str(path), "--name", name, "--runs-dir", str(tmp_path / "runs"), *extra])


def flat_and_legacy(state: dict) -> dict:
    """OFA's keys in the other spellings its loader accepts: flat layers and `mobile_inverted_conv`."""
    renamed = {}
    for key, value in state.items():
        key = key.replace(".bn.bn.", ".bn.").replace(".conv.conv.weight", ".conv.weight")
        renamed[key.replace("blocks.1.conv.", "blocks.1.mobile_inverted_conv.")] = value
    return renamed


@pytest.mark.slow
def test_import_writes_a_run_that_loads_like_a_trained_one(ofa_state, tmp_path, capsys):
    assert run_import(tmp_path, {"state_dict": ofa_state}, extra=["--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    record = json.loads((tmp_path / "runs" / "ofa" / "imported.json").read_text())
    assert printed["record"] == record and printed["config"] == "imagenet_ofa_mbv3_w10"
    assert (record["width"], record["num_classes"], record["keys"]) == ("1.0", 10, len(ofa_state))
    assert record["sha256"] == sha256(tmp_path / "ofa.pth")
    run = api.load_run(tmp_path / "runs" / "ofa", device="cpu")
    assert run.step == 0 and run.space.num_classes == 10 and run.config.data.num_classes == 10
    weights = run.strategy.model.state_dict()
    assert torch.equal(weights["blocks.1.0.conv_dw.transforms.7to5"],
                       ofa_state["blocks.1.conv.depth_conv.conv.7to5_matrix"])
    assert torch.equal(weights["blocks.6.0.conv.weight.tensor"], ofa_state["final_expand_layer.conv.weight"])
    assert torch.equal(weights["conv_head.weight"], ofa_state["feature_mix_layer.conv.weight"])


@pytest.mark.slow
def test_every_spelling_ofas_loader_accepts_gives_the_same_weights(ofa_state, tmp_path):
    assert run_import(tmp_path, {"state_dict": ofa_state}, "nested") == 0
    assert run_import(tmp_path, flat_and_legacy(ofa_state), "flat") == 0     # a bare state dict too
    nested, flat = (api.load_run(tmp_path / "runs" / n, device="cpu").strategy.model.state_dict()
                    for n in ("nested", "flat"))
    assert nested.keys() == flat.keys() and all(torch.equal(nested[k], flat[k]) for k in nested)
    assert json.loads((tmp_path / "runs" / "flat" / "imported.json").read_text())["spellings"] == [
        "mobile_inverted_conv"]


@pytest.mark.parametrize("corrupt, message", [
    (lambda s: [1, 2], "holds a list, not a state dict"),
    (lambda s: {"state_dict": {**s, "first_conv.conv.weight": torch.zeros(32, 3, 3, 3)}},
     "unknown width: the stem has 32 channels (OFA's MobileNetV3: 16 channels: w1.0, 24 channels: w1.2)"),
    (lambda s: {k: v for k, v in s.items() if not k.startswith("blocks.2.")},
     "missing blocks.2.conv.inverted_bottleneck.conv.weight, blocks.2.conv.inverted_bottleneck.bn.weight, "
     "blocks.2.conv.inverted_bottleneck.bn.bias and 17 more"),    # its 20 keys: 6 + 8 (2 matrices) + 6
    (lambda s: {**s, "head.extra.weight": torch.zeros(1)}, "unexpected head.extra.weight"),
    (lambda s: {**s, "classifier.linear.bias": torch.zeros(11)}, "other shapes: classifier.linear.bias [11]"),
    (lambda s: {"state_dict": s, "args": argparse.Namespace(lr=0.1)},
     "pickles Python objects (argparse.Namespace) that a weights-only load refuses; convert it once"),
    (lambda s: {"state_dict": {**s, "note": "text"}}, "not a state dict: note not a name with a tensor"),
])
def test_bad_files_get_one_line_and_exit_2(ofa_state, tmp_path, capsys, corrupt, message):
    assert run_import(tmp_path, corrupt(ofa_state)) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err, err
    assert not (tmp_path / "runs" / "ofa" / "config.yaml").exists()


@pytest.mark.slow
def test_a_file_that_is_not_a_checkpoint_and_a_taken_name(ofa_state, tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    assert main(["import", "ofa", str(tmp_path / "notes.txt"), "--name", "x", "--runs-dir", str(tmp_path)]) == 2
    assert "not a PyTorch checkpoint" in capsys.readouterr().err
    assert run_import(tmp_path, {"state_dict": ofa_state}) == 0
    assert run_import(tmp_path, {"state_dict": ofa_state}) == 2
    assert "already exists" in capsys.readouterr().err


@pytest.mark.slow
def test_an_import_killed_before_config_yaml_is_rerun(ofa_state, tmp_path):
    (tmp_path / "runs" / "ofa" / "checkpoints").mkdir(parents=True)
    (tmp_path / "runs" / "ofa" / "checkpoints" / "last.pt").write_bytes(b"partial")
    assert run_import(tmp_path, {"state_dict": ofa_state}) == 0
    assert api.load_run(tmp_path / "runs" / "ofa", device="cpu").step == 0


@pytest.mark.slow
def test_width_1_2_is_read_from_the_shapes_and_matches_ofa(tmp_path):
    from tests.support.ofa_nets import random_ofa_net

    net = random_ofa_net(1.2, n_classes=10).double()
    payload = {"state_dict": net.state_dict()}
    assert run_import(tmp_path, payload, extra=["--set", "space.options.resolutions=[32]"]) == 0
    run = api.load_run(tmp_path / "runs" / "ofa", device="cpu")
    assert json.loads((tmp_path / "runs" / "ofa" / "imported.json").read_text())["config"] == "imagenet_ofa_mbv3_w12"
    for arch in (run.space.max(), run.space.min()):
        net.set_active_subnet(**{k: v for k, v in ofa_subnet(run.space, arch).items() if k != "image_size"})
        x = torch.randn(2, 3, 32, 32, dtype=torch.float64)
        with torch.no_grad():
            theirs, ours = net(x), run.export_model(arch).double()(x)
        assert (ours - theirs).abs().max() <= 1e-5 * theirs.abs().max()
