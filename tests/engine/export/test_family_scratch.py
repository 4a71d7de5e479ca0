"""The cheaper path: `nas export CONFIG --family DIR` trains each member alone from scratch; the note that says when."""
from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from nas import cli
from nas.core import yaml_io
from nas.core.config import load_config
from nas.core.locks import folder_lock
from nas.engine.export import export_lock
from nas.engine.export import scratch as scratch_module
from nas.engine.fidelity import standalone
from nas.engine.fidelity.ground_truth import init_seed, recipe_source
from nas.engine.fidelity.recipe import load_recipe, with_effective_warmup
from nas.engine.run import build_space, standalone_model
from nas.engine.untrained import untrained_run
from tests.support.family import plant_family
from tests.support.safety import one_line_error
from tests.support.tiny import tiny_config

STEPS = 4


@pytest.fixture
def config_family(tmp_path) -> tuple[Path, Path]:
    """(a tiny config file of 4 training steps, a one-member family searched on it untrained)."""
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml_io.dumps(tiny_config(steps=STEPS)))
    plant_family(untrained_run(load_config(path), tmp_path / "family"), tmp_path / "family", ("50%",))
    return path, tmp_path / "family"


@pytest.mark.slow
def test_a_config_family_trains_each_member_alone_and_ships_it_as_scratch(config_family, capsys, monkeypatch):
    config, family = config_family
    assert cli.main(["export", str(config), "--family", str(family), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    members = json.loads((family / "family.json").read_text())["members"]
    assert [m["arch_id"] for m in result["members"]] == [m["arch_id"] for m in members]
    for entry in result["members"]:
        metrics = json.loads((Path(entry["export_dir"]) / "metrics.json").read_text())
        assert Path(entry["export_dir"]) == family / "export" / entry["arch_id"]
        assert metrics["shipped"] == "scratch" and metrics["scratch"]["steps"] == STEPS
        assert metrics["test_top1"] == entry["test_top1"] and metrics["inherited"] is None
    arch = members[0]["arch"]       # the weights are what nas fidelity's first standalone training gives
    loaded = load_config(config)
    model = standalone_model(loaded, arch, init_seed(0, arch))
    recipe = with_effective_warmup(load_recipe(loaded), STEPS)
    size = build_space(loaded).input_size(arch)
    standalone.train_alone(model, recipe, recipe_source(recipe.data), 0, resolution=size)
    shipped = load_file(Path(result["members"][0]["export_dir"]) / "weights.safetensors")
    trained = {k: v for k, v in model.state_dict().items() if "running" not in k and "num_batches" not in k}
    assert trained and all(torch.equal(v.contiguous(), shipped[k]) for k, v in trained.items())
    monkeypatch.setattr(standalone, "train_alone", lambda *a, **k: pytest.fail("a finished member trained again"))
    assert cli.main(["export", str(config), "--family", str(family), "--json"]) == 0
    assert [m["kept"] for m in json.loads(capsys.readouterr().out)["members"]] == [True]
    assert cli.main(["summary", str(family)]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.strip()[:1].isdigit()]
    assert [row[6:8] for row in rows] == [["trained", "alone"]]
    assert [row[5] for row in rows] == [f"{100 * e['test_top1']:.2f}%" for e in result["members"]]


def test_fine_tune_options_with_a_config_are_one_line(tmp_path, capsys):
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml_io.dumps(tiny_config(steps=STEPS)))
    one_line_error(capsys, ["export", str(config), "--family", str(tmp_path), "--finetune", "10"], "--finetune:",
                   "trained alone from scratch")


# the tiny config's epoch: 1,024 training images in batches of 64, 16 steps; lengths in the
# other unit than the training are converted through it
@pytest.mark.parametrize("length, train, says", [
    ("100%", {"steps": 40}, True), ("25%", {"steps": 40}, False), ("2e", {"epochs": 2, "steps": None}, True),
    ("1e", {"epochs": 2, "steps": None}, False), (40, {"steps": 40}, True), (40, {"epochs": 2, "steps": None}, True),
    (31, {"epochs": 2, "steps": None}, False), (32, {"epochs": 2, "steps": None}, True),
    ("3e", {"steps": 40}, True), ("2e", {"steps": 40}, False)])
def test_the_note_says_the_supernet_does_not_pay_when_a_fine_tune_costs_a_training(length, train, says):
    data = tiny_config(**train)
    data["export"] = {"finetune": {"length": length}}
    note = scratch_module.cheaper_path_note(load_config(data), "CFG.yaml")
    assert (note is not None) == says
    if says:
        assert "does not pay" in note and "nas export CFG.yaml --family DIR" in note


@pytest.mark.parametrize("length, code", [("100%", 1), ("25%", 0)])
def test_nas_space_supernet_pays_exits_1_where_the_cheaper_path_is_training_alone(tmp_path, capsys, length, code):
    data = tiny_config(steps=STEPS)
    data["export"] = {"finetune": {"length": length}}
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml_io.dumps(data))
    assert cli.main(["space", str(config), "--supernet-pays"]) == code
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1
    assert ("does not pay" in out[0] and f"nas export {config} --family DIR" in out[0]) == (code == 1), out


@pytest.mark.parametrize("config, code", [("fashion_mnist_mbv3", 0), ("fashion_mnist_cell201", 1),
                                          ("fashion_mnist_vit", 1)])
def test_the_shipped_configs_say_where_their_supernet_pays(capsys, config, code):
    """MobileNetV3's 25% fine-tunes reach the members alone; cell201's and the ViT's need a whole
    training (benchmarks/notes/19-ships-vs-alone.md, benchmarks/notes/29-family-make-run-vit.md), so `make run` trains their members alone."""
    assert cli.main(["space", config, "--supernet-pays"]) == code
    said = capsys.readouterr().out
    assert ("does not pay" in said) == bool(code) and ("can pay" in said) == (not code), said


@pytest.mark.parametrize("length, code, share", [(5000, 1, "291%"), (1000, 0, None), ("3e", 0, None)])
def test_a_fine_tune_in_steps_on_cell201s_epochs_is_counted_in_trainings(capsys, length, code, share):
    """cell201 trains 4 epochs of 55,000 images in batches of 128: 1,716 steps, so 5,000 steps of
    fine-tune are 2.9 trainings (the steps were once read as no length at all: "pays")."""
    assert cli.main(["space", "fashion_mnist_cell201", "--supernet-pays", "--set",
                     f"export.finetune.length={length}"]) == code
    said = capsys.readouterr().out
    assert ("does not pay" in said) == bool(code) and (share is None or f"fine-tunes for {share} of a" in said), said


def test_nas_space_supernet_pays_reads_a_runs_saved_config_and_refuses_set(trained, tmp_path, capsys):
    from tests.support.safety import copy_run
    runs = copy_run(trained, "tiny", tmp_path)
    saved = yaml_io.loads((runs / "tiny" / "config.yaml").read_text())
    expected = 1 if scratch_module.cheaper_path_note(load_config(saved), "x") else 0
    assert cli.main(["space", "tiny", "--runs-dir", str(runs), "--supernet-pays"]) == expected
    saved["export"] = {"finetune": {"length": "100%" if expected == 0 else "10%"}}     # the other answer
    (runs / "tiny" / "config.yaml").write_text(yaml_io.dumps(saved))
    capsys.readouterr()
    assert cli.main(["space", "tiny", "--runs-dir", str(runs), "--supernet-pays"]) == 1 - expected
    assert ("does not pay" in capsys.readouterr().out) == (expected == 0)
    one_line_error(capsys, ["space", "tiny", "--runs-dir", str(runs), "--supernet-pays", "--set", "train.seed=1"],
                   "--set: overrides apply to a config, not to a trained run")


def test_a_member_trained_alone_is_kept_only_in_the_format_asked(tmp_path):
    """An onnx export of a config's family trains again a member whose folder holds no model.onnx."""
    wanted = {"steps": STEPS, "seed": 0, "recipe_digest": "abc"}
    (tmp_path / "metrics.json").write_text(json.dumps({"arch_id": "a", "shipped": "scratch", "scratch": wanted}))
    assert scratch_module.finished_scratch(tmp_path, "a", wanted, "pt2") is not None
    assert scratch_module.finished_scratch(tmp_path, "a", wanted, "onnx") is None
    (tmp_path / "model.onnx").write_bytes(b"onnx")
    assert scratch_module.finished_scratch(tmp_path, "a", wanted, "onnx") is not None


def test_a_name_that_is_both_a_run_and_a_shipped_config_is_refused_with_the_two_spellings(tmp_path, capsys):
    (tmp_path / "fashion_mnist_cell201").mkdir()
    (tmp_path / "fashion_mnist_cell201" / "config.yaml").write_text("{}")
    one_line_error(capsys, ["export", "fashion_mnist_cell201", "--family", "DIR", "--runs-dir", str(tmp_path)],
                   "RUN: fashion_mnist_cell201 names both the run", "and the shipped config",
                   f"nas export {tmp_path / 'fashion_mnist_cell201'} --family DIR (the run",
                   "nas export fashion_mnist_cell201.yaml --family DIR (the config")


def test_a_checkpoint_with_a_config_family_is_one_line(tmp_path, capsys):
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml_io.dumps(tiny_config(steps=STEPS)))
    one_line_error(capsys, ["export", str(config), "--family", str(tmp_path), "--checkpoint", "best.pt"],
                   "--checkpoint:", "is a config, which has no checkpoint")


@pytest.fixture
def no_default_sigterm():
    """SIGTERM outside the export's own handler fails the test instead of ending pytest."""
    def reached(signum, frame):
        raise AssertionError("SIGTERM reached a handler the export did not install")

    previous = signal.signal(signal.SIGTERM, reached)
    yield
    signal.signal(signal.SIGTERM, previous)


def test_sigterm_during_a_scratch_training_is_one_line_and_exit_143(config_family, capsys, monkeypatch,
                                                                    no_default_sigterm):
    config, family = config_family
    monkeypatch.setattr(scratch_module, "train_member", lambda *a, **k: os.kill(os.getpid(), signal.SIGTERM))
    assert cli.main(["export", str(config), "--family", str(family)]) == 143
    last = capsys.readouterr().err.strip().splitlines()[-1]       # after the progress bar's lines
    assert last.startswith("nas export: stopped: SIGTERM:") and "run the same nas export again" in last, last


def test_the_scratch_path_takes_the_export_folders_lock(config_family, capsys, monkeypatch):
    config, family = config_family
    member = json.loads((family / "family.json").read_text())["members"][0]
    out_dir = family / "export" / member["arch_id"]
    monkeypatch.setattr(scratch_module, "train_member", lambda *a, **k: pytest.fail("trained under another's lock"))
    with folder_lock(export_lock(out_dir), "held by the test"):
        assert cli.main(["export", str(config), "--family", str(family)]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("nas export: error:") and f"this export folder {out_dir} is in use by process" in last, last


def test_supernet_pays_says_it_cannot_tell_where_an_imagefolders_epoch_is_unknown(tmp_path, capsys):
    data = tiny_config(epochs=2, steps=None)
    data["data"] = {"name": "imagefolder", "root": str(tmp_path), "image_size": 28, "val_size": 10}
    data["export"] = {"finetune": {"length": 400}}
    config = tmp_path / "folder.yaml"
    config.write_text(yaml_io.dumps(data))
    assert cli.main(["space", str(config), "--supernet-pays"]) == 0
    said = capsys.readouterr().out
    assert said.startswith("a supernet may pay here, or not") and "give data.train_size" in said, said
    data["data"]["train_size"] = 640           # 10 steps an epoch of 64: 400 steps are 20 trainings of 2 epochs
    config.write_text(yaml_io.dumps(data))
    assert cli.main(["space", str(config), "--supernet-pays"]) == 1
    assert "fine-tunes for 2000% of a training" in capsys.readouterr().out
