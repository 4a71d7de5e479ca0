"""`nas import alphanet`'s loader: AlphaNet's checkpoint layout onto the `attentive_mbv3` supernet.

The files are crafted from nas's own supernet, renamed here, by hand, to the layout of
AttentiveNAS's `AttentiveNasDynamicModel` (read from their code), saved as their trainer saves
it: DDP's `module.` prefix, `bn_tracking` BN copies, a projection on every block, the training
`args` pickled in PyTorch's legacy format.
"""
from __future__ import annotations

import collections
import json
import os

import pytest
import torch

from nas import api, cli
from nas.core.errors import CheckpointError, PathError
from nas.engine.importing.alphanet import RECALIBRATE_NOTE, alphanet_state_dict, load_alphanet
from search_spaces.attentive_mbv3 import AttentiveMbv3Options, AttentiveMbv3Space
from tests.conftest import make_space, make_supernet
from tests.support.fake_data import write_png_tree

BN = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")


class TrainingArgs(dict):
    """Stands for their `AttrDict` of training settings."""


class Trap:
    """Unpickling this would create a folder (its `__reduce__` names os.makedirs)."""

    def __init__(self, folder: str):
        self.folder = folder

    def __reduce__(self):
        return (os.makedirs, (self.folder,))


def their_layout(net) -> collections.OrderedDict:
    """`net`'s tensors under AttentiveNAS's dynamic-model names, as DDP saves them."""
    ours = net.state_dict()
    theirs = collections.OrderedDict()

    def bn(their: str, our: str, width: int):
        for entry in BN:
            theirs[f"module.{their}.bn.{entry}"] = ours[f"{our}.{entry}"]
        for k in (0, 1):
            theirs[f"module.{their}.bn_tracking.{k}.running_mean"] = torch.randn(width)

    theirs["module.first_conv.conv.conv.weight"] = ours["stem.conv.weight.tensor"]
    bn("first_conv.bn", "stem.bn", ours["stem.bn.weight"].numel())
    n = 0
    for i, stage in enumerate(net.blocks):
        for j, block in enumerate(stage):
            t, o = f"blocks.{n}.mobile_inverted_conv", f"blocks.{i}.{j}"
            if block.expand is not None:
                theirs[f"module.{t}.inverted_bottleneck.conv.conv.weight"] = ours[f"{o}.expand.conv.weight.tensor"]
                bn(f"{t}.inverted_bottleneck.bn", f"{o}.expand.bn", ours[f"{o}.expand.bn.weight"].numel())
            theirs[f"module.{t}.depth_conv.conv.conv.weight"] = ours[f"{o}.conv_dw.weight.tensor"]
            bn(f"{t}.depth_conv.bn", f"{o}.bn_dw", ours[f"{o}.bn_dw.weight"].numel())
            if block.se is not None:
                for fc, conv in (("reduce", "conv_reduce"), ("expand", "conv_expand")):
                    theirs[f"module.{t}.depth_conv.se.fc.{fc}.weight"] = ours[f"{o}.se.{conv}.weight.tensor"]
                    theirs[f"module.{t}.depth_conv.se.fc.{fc}.bias"] = ours[f"{o}.se.{conv}.bias.tensor"]
            theirs[f"module.{t}.point_linear.conv.conv.weight"] = ours[f"{o}.conv_pwl.weight.tensor"]
            bn(f"{t}.point_linear.bn", f"{o}.bn_pwl", ours[f"{o}.bn_pwl.weight"].numel())
            projection = ours.get(f"{o}.projection.weight.tensor")
            if projection is None:        # they keep one on blocks whose widths never differ too
                out = ours[f"{o}.conv_pwl.weight.tensor"].shape[0]
                projection = torch.randn(out, out, 1, 1)
            theirs[f"module.blocks.{n}.shortcut.conv.conv.weight"] = projection
            n += 1
    theirs["module.last_conv.final_expand_layer.conv.conv.weight"] = ours["final_expand.conv.weight.tensor"]
    bn("last_conv.final_expand_layer.bn", "final_expand.bn", ours["final_expand.bn.weight"].numel())
    theirs["module.last_conv.feature_mix_layer.conv.conv.weight"] = ours["feature_mix.weight.tensor"]
    theirs["module.classifier.linear.linear.weight"] = ours["classifier.weight.tensor"]
    theirs["module.classifier.linear.linear.bias"] = ours["classifier.bias.tensor"]
    return theirs


def save_like_them(path, state, trap_folder) -> None:
    args = TrainingArgs(bn_momentum=0.0, supernet_config=TrainingArgs(resolutions=[192]), trap=Trap(trap_folder))
    torch.save({"epoch": 360, "args": args, "state_dict": state, "optimizer": {}}, path,
               _use_new_zipfile_serialization=False)


@pytest.fixture
def space():
    return make_space("attentive_mbv3")


def test_their_file_loads_and_computes_what_the_source_supernet_computes(space, tmp_path):
    source = make_supernet(space, seed=0)
    save_like_them(tmp_path / "alphanet.pth.tar", their_layout(source), str(tmp_path / "fired"))
    target = make_supernet(space, seed=1)
    record = load_alphanet(tmp_path / "alphanet.pth.tar", target)
    assert not (tmp_path / "fired").exists()          # the pickled args never ran
    assert record["note"] == RECALIBRATE_NOTE and "recalibrate BN" in RECALIBRATE_NOTE
    assert record["dropped"]["bn_tracking"] > 0 and record["dropped"]["unused_shortcuts"] > 0
    x = torch.randn(3, space.in_chans, 28, 28)
    for arch in (space.max(), space.min()):
        source.set_active(arch)
        target.set_active(arch)
        with torch.no_grad():
            assert torch.equal(source(x), target(x))


def test_a_projection_some_arch_uses_is_kept(space, tmp_path):
    source = make_supernet(space)
    save_like_them(tmp_path / "f.pth", their_layout(source), str(tmp_path / "fired"))
    state, _ = alphanet_state_dict(tmp_path / "f.pth", make_supernet(space, seed=3))
    assert torch.equal(state["blocks.1.0.projection.weight.tensor"],
                       source.state_dict()["blocks.1.0.projection.weight.tensor"])


def test_missing_extra_and_misshapen_keys_are_named(space, tmp_path):
    net = make_supernet(space)
    theirs = their_layout(net)
    missing = collections.OrderedDict((k, v) for k, v in theirs.items() if "point_linear.conv" not in k)
    torch.save({"state_dict": missing}, tmp_path / "missing.pth")
    with pytest.raises(CheckpointError, match=r"lacks \d+ keys of AlphaNet's supernet \(blocks\.0\."):
        alphanet_state_dict(tmp_path / "missing.pth", net)
    torch.save({"state_dict": {**theirs, "module.blocks.0.extra.weight": torch.zeros(1)}}, tmp_path / "extra.pth")
    with pytest.raises(CheckpointError, match=r"has 1 key AlphaNet's supernet does not \(blocks\.0\.extra\.weight\)"):
        alphanet_state_dict(tmp_path / "extra.pth", net)
    theirs["module.classifier.linear.linear.bias"] = torch.zeros(7)
    torch.save({"state_dict": theirs}, tmp_path / "shape.pth")
    with pytest.raises(CheckpointError, match=r"classifier\.linear\.linear\.bias has shape \[7\]"):
        alphanet_state_dict(tmp_path / "shape.pth", net)


def test_files_that_are_no_checkpoint_say_so_in_one_line(space, tmp_path):
    net = make_supernet(space)
    (tmp_path / "notes.txt").write_text("not a checkpoint\n")
    with pytest.raises(CheckpointError, match="is not a PyTorch checkpoint") as error:
        alphanet_state_dict(tmp_path / "notes.txt", net)
    assert "\n" not in str(error.value)
    with pytest.raises(PathError, match="is not a file"):
        alphanet_state_dict(tmp_path / "absent.pth", net)
    torch.save({"state_dict": {"w": "text"}}, tmp_path / "strings.pth")
    with pytest.raises(CheckpointError, match="holds no state dict of tensors"):
        alphanet_state_dict(tmp_path / "strings.pth", net)


def test_a_pickled_model_is_refused_with_how_to_convert_it(space, tmp_path):
    torch.save(torch.nn.Linear(2, 2), tmp_path / "model.pth", _use_new_zipfile_serialization=False)
    with pytest.raises(CheckpointError, match=r"a pickled model\? convert it: python -c .*weights_only=False"):
        alphanet_state_dict(tmp_path / "model.pth", make_supernet(space))


SMALL_SPACE = ["space.options.resolutions=[24,28]", "space.options.stem_widths=[8,16]",
               "space.options.depths=[[1,2],[1,2],[1,2]]", "space.options.widths=[[8,16],[16,24],[24,32]]",
               "space.options.kernel_sizes=[[3],[3,5],[3,5]]", "space.options.expand_ratios=[[1],[4,6],[6]]",
               "space.options.strides=[1,2,2]", "space.options.se=[false,false,true]",
               "space.options.activations=[swish,swish,swish]", "space.options.head_widths=[32,48]"]


@pytest.mark.slow
def test_nas_import_alphanet_makes_a_run_every_verb_reads(tmp_path, capsys):
    tree = tmp_path / "tree"
    write_png_tree(tree, train_per_class=8, val_per_class=2)
    classes = sum(p.is_dir() for p in (tree / "train").iterdir())
    source = make_supernet(AttentiveMbv3Space(AttentiveMbv3Options(), 3, classes))   # SMALL_SPACE's options
    save_like_them(tmp_path / "alphanet_pretrained.pth.tar", their_layout(source), str(tmp_path / "fired"))
    data = [f"data.root={tree}", "data.num_classes=null", "data.image_size=28", "data.val_size=6",
            "data.workers=0", "eval.bn_recal_batches=1", "eval.bn_recal_batch_size=8"]
    runs = str(tmp_path / "runs")
    assert cli.main(["import", "alphanet", str(tmp_path / "alphanet_pretrained.pth.tar"), "--name", "alpha",
                     "--runs-dir", runs, "--set", *SMALL_SPACE, *data]) == 0
    assert "note: AlphaNet trained BN with momentum 0" in capsys.readouterr().out
    assert not (tmp_path / "fired").exists()
    run = api.load_run("alpha", runs, device="cpu")
    x = torch.randn(2, 3, 28, 28)
    for arch in (run.space.max(), run.space.min()):
        source.set_active(arch)
        with torch.no_grad():    # the run's channels_last layout sums in another order
            torch.testing.assert_close(run.subnet(arch).eval()(x), source(x), rtol=1e-5, atol=1e-6)
    assert cli.main(["eval", "alpha", "--runs-dir", runs, "--arch", "min"]) == 0
    assert "top-1" in capsys.readouterr().out
    # without data: the file's statistics exported as they are, resized as their model resizes
    assert cli.main(["import", "alphanet", str(tmp_path / "alphanet_pretrained.pth.tar"), "--name", "bare",
                     "--runs-dir", runs, "--set", *SMALL_SPACE, f"data.num_classes={classes}"]) == 0
    assert cli.main(["export", "bare", "--runs-dir", runs, "--arch", "min",
                     "--out", str(tmp_path / "bare-export")]) == 0
    metrics = json.loads((tmp_path / "bare-export" / "metrics.json").read_text())
    assert metrics["preprocessing"]["interpolation"] == "bicubic"
    assert metrics["bn_statistics"] == "imported, not recalibrated"


def test_a_bad_file_exits_2_with_one_line(tmp_path, capsys):
    (tmp_path / "bad.pth").write_text("not a checkpoint")
    assert cli.main(["import", "alphanet", str(tmp_path / "bad.pth"), "--name", "x",
                     "--runs-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is not a PyTorch checkpoint" in err
    assert not (tmp_path / "runs" / "x" / "config.yaml").exists()
