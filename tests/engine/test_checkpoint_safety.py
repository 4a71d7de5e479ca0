"""Checkpoints that cannot poison a run: never NaN, verified on load, matched to the run's config,
and `--resume` that never silently starts over."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from nas import api, cli
from nas.core import yaml_io
from nas.core.config import load_config
from nas.core.errors import CheckpointError, ConfigError, RunError, TrainingDiverged
from nas.engine.checkpoint import load_checkpoint, non_finite_tensors, save_checkpoint, state_dict_mismatch
from nas.engine.training.trainer import Trainer
from tests.support.corpus import damage_tensor_data
from tests.support.safety import copy_run, folder_digests, one_line_error
from tests.support.tiny import tiny_config


def _config(tmp_path: Path, **train) -> str:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml_io.dumps(tiny_config(steps=16, **train)))
    return str(path)


def _eval_top1(capsys, runs: Path, *flags: str) -> float:
    assert cli.main(["eval", "tiny", "--runs-dir", str(runs), "--arch", "max", "--json", *flags]) == 0
    return float(re.search(r'"top1": ([0-9.]+)', capsys.readouterr().out).group(1))


def test_a_diverging_run_never_saves_nan_and_names_the_last_good_checkpoint(tmp_path, capsys):
    err = one_line_error(capsys, ["train", _config(tmp_path), "--runs-dir", str(tmp_path), "--quiet", "--set",
                                  "train.optimizer.lr=1e6", "train.checkpoint.every_steps=1"],
                         "non-finite", "lower train.optimizer.lr", code=1)
    named = re.search(r"the last good checkpoint is (\S+) \(step (\d+)\)", err)
    assert named is not None, err
    assert load_checkpoint(named.group(1))["step"] == int(named.group(2)) >= 1
    for path in (tmp_path / "tiny" / "checkpoints").glob("*.pt"):    # every checkpoint written is finite
        assert not non_finite_tensors(load_checkpoint(path)), path


def test_a_run_diverging_before_its_first_checkpoint_says_there_is_none(tmp_path, capsys):
    one_line_error(capsys, ["train", _config(tmp_path), "--runs-dir", str(tmp_path), "--quiet", "--set",
                            "train.optimizer.lr=1e6", "train.checkpoint.every_steps=1000"],
                   "non-finite", "no checkpoint was written yet", code=1)
    assert not list((tmp_path / "tiny" / "checkpoints").glob("*.pt"))


def test_resume_without_last_pt_refuses_and_names_what_is_there(trained, tmp_path, capsys):
    runs = copy_run(trained, "tiny", tmp_path)
    (runs / "tiny" / "checkpoints" / "last.pt").unlink()
    before = folder_digests(runs)
    argv = ["train", str(runs / "tiny" / "config.yaml"), "--name", "tiny", "--runs-dir", str(runs), "--resume",
            "--quiet"]
    one_line_error(capsys, argv, "has no last.pt (there: best.pt)", "with --resume --checkpoint best.pt",
                   "another --name")
    assert folder_digests(runs) == before          # best.pt, metrics.jsonl and the rest untouched
    assert cli.main([*argv, "--checkpoint", "best.pt"]) == 0
    assert load_checkpoint(runs / "tiny" / "checkpoints" / "last.pt")["step"] == 8


def test_resume_of_a_run_stopped_before_its_first_checkpoint_starts_over(tmp_path, capsys):
    config = load_config(tiny_config(steps=8))
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "config.yaml").write_text(yaml_io.dumps(config.to_dict()))   # nothing else: nothing to lose
    assert cli.main(["train", str(tmp_path / "tiny" / "config.yaml"), "--name", "tiny", "--runs-dir", str(tmp_path),
                     "--resume", "--quiet"]) == 0
    assert load_checkpoint(tmp_path / "tiny" / "checkpoints" / "last.pt")["step"] == 8


class _Killed(BaseException):
    """Stands for a SIGKILL: nothing after it runs (no handler, no later checkpoint)."""


def _epoch_records(run: Path) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k != "elapsed_s"} for line in lines]


@pytest.mark.parametrize("logged", [False, True])
def test_a_kill_between_the_epoch_checkpoint_and_its_evaluation_evaluates_again(trained, tmp_path, monkeypatch,
                                                                                 logged):
    """The epoch-end checkpoint is written before evaluation: a run killed during the evaluation
    (or after its record, before the checkpoint that follows) evaluates that epoch once more on
    resume and logs it once, ending as the uninterrupted run."""
    original = Trainer.end_of_epoch

    def killed(self, epoch, logger):
        if logged:
            original(self, epoch, logger)
        raise _Killed

    monkeypatch.setattr(Trainer, "end_of_epoch", killed)
    config = load_config(tiny_config(steps=8))
    with pytest.raises(_Killed):
        api.train(config, name="tiny", runs_dir=tmp_path, progress=False)
    state = load_checkpoint(tmp_path / "tiny" / "checkpoints" / "last.pt")
    assert state["step"] == 8 and state["evaluation_pending"] is True
    assert (tmp_path / "tiny" / "metrics.jsonl").is_file() == logged
    monkeypatch.undo()
    api.train(config, name="tiny", runs_dir=tmp_path, progress=False, resume=True)
    assert _epoch_records(tmp_path / "tiny") == _epoch_records(trained / "tiny")      # one record, the same
    for name in ("last.pt", "best.pt"):
        a, b = (load_checkpoint(runs / "tiny" / "checkpoints" / name) for runs in (tmp_path, trained))
        assert a["evaluation_pending"] is b["evaluation_pending"] is False and a["best_score"] == b["best_score"]
        assert all(torch.equal(a["model"][k], b["model"][k]) for k in b["model"])


def test_resume_forgets_the_epochs_logged_after_its_checkpoint(trained, tmp_path):
    runs = copy_run(trained, "tiny", tmp_path)
    metrics = runs / "tiny" / "metrics.jsonl"
    logged = metrics.read_text()
    metrics.write_text(logged + '{"epoch": 1, "step": 24, "val_top1_max": 0.5}\n{"epoch": 2, "st')  # killed after
    assert cli.main(["train", str(runs / "tiny" / "config.yaml"), "--name", "tiny", "--runs-dir", str(runs),
                     "--resume", "--quiet"]) == 0
    assert metrics.read_text() == logged and json.loads(logged)["step"] == 8


def test_resume_config_is_the_runs_own_config_checked_first(trained):
    """The public API the CLI's --resume goes through: the name a run gets, the config it resumes with."""
    assert api.run_name(load_config("fashion_mnist_mbv3")) == "fashion_mnist_mbv3"
    assert api.run_name(load_config(tiny_config())) == "run"
    saved = api.resume_config("tiny", runs_dir=trained)
    assert saved == load_config(trained / "tiny" / "config.yaml")
    assert api.resume_config("tiny", ["train.seed=0"], runs_dir=trained) == saved     # agrees: fine
    with pytest.raises(ConfigError, match=r"^overrides train.seed: contradicts .*config.yaml, which is authoritative"):
        api.resume_config("tiny", ["train.seed=3"], runs_dir=trained)
    with pytest.raises(RunError, match="^resume: no run at .*absent to resume"):
        api.resume_config("absent", runs_dir=trained)


def test_checkpoint_flag_of_train_needs_resume(tmp_path, capsys):
    one_line_error(capsys, ["train", _config(tmp_path), "--runs-dir", str(tmp_path), "--checkpoint", "best.pt"],
                   "--checkpoint: only with --resume")
    assert not (tmp_path / "tiny").exists()


def test_damaged_last_pt_is_refused_and_best_pt_suggested(trained, tmp_path, capsys):
    runs = copy_run(trained, "tiny", tmp_path)
    damage_tensor_data(runs / "tiny" / "checkpoints" / "last.pt")
    before = folder_digests(runs)
    one_line_error(capsys, ["eval", "tiny", "--runs-dir", str(runs), "--arch", "max"],
                   "last.pt: does not match its digest", "use the other checkpoint with --checkpoint best.pt")
    assert folder_digests(runs) == before
    assert _eval_top1(capsys, runs, "--checkpoint", "best.pt") > 0


def test_format_1_checkpoints_without_a_digest_still_load(trained, tmp_path, capsys):
    runs = copy_run(trained, "tiny", tmp_path)
    last = runs / "tiny" / "checkpoints" / "last.pt"
    state = {k: v for k, v in load_checkpoint(last).items() if k not in ("digest", "evaluation_pending")}
    torch.save({**state, "format_version": 1}, last)     # as nas wrote it before the digest
    assert "digest" not in torch.load(last, weights_only=True)
    assert _eval_top1(capsys, runs) == _eval_top1(capsys, trained)
    assert cli.main(["train", str(runs / "tiny" / "config.yaml"), "--name", "tiny", "--runs-dir", str(runs),
                     "--resume", "--quiet"]) == 0       # restores strategy and weights; nothing left to train


def test_config_yaml_edited_after_training_is_refused_naming_the_keys(trained, tmp_path, capsys):
    runs = copy_run(trained, "tiny", tmp_path)
    config = runs / "tiny" / "config.yaml"
    config.write_text(config.read_text().replace("resolutions: [20, 28]", "resolutions: [24, 28]"))
    assert load_config(config).space.options.resolutions == (24, 28)   # still a valid, shape-compatible config
    before = folder_digests(runs)
    for verb in ("eval", "export"):
        one_line_error(capsys, [verb, "tiny", "--runs-dir", str(runs), "--arch", "min"],
                       "trained with another config than", "space.options.resolutions: [20, 28] in the checkpoint, "
                       "[24, 28] now")
    one_line_error(capsys, ["train", str(config), "--name", "tiny", "--runs-dir", str(runs), "--resume", "--quiet"],
                   "space.options.resolutions: [20, 28] in the checkpoint")
    assert folder_digests(runs) == before


def test_state_dict_mismatch_names_the_first_keys():
    expected = {f"w{i}": torch.zeros(2, 2) for i in range(5)}
    given = {"w0": torch.zeros(2, 2), "w1": torch.zeros(3, 2), "x0": torch.zeros(1), "x1": torch.zeros(1)}
    assert state_dict_mismatch(expected, given) == (
        "missing: w2, w3, w4; unexpected: x0, x1; other shape: w1 [3, 2] vs [2, 2] here")
    assert state_dict_mismatch(expected, dict(expected)) == ""
    many = {f"v{i}": torch.zeros(1) for i in range(5)}
    assert state_dict_mismatch(many, {}) == "missing: v0, v1, v2 and 2 more"


def test_the_strategy_state_is_digested_and_never_saved_non_finite(tmp_path):
    """Strategies save more than weights (a learning sampler's logits and optimiser): the digest
    covers it and a NaN in it is refused like one in the weights."""
    state = {"model": {"w": torch.ones(2)}, "strategy": {"sampler": {"logits": torch.zeros(4), "step": 3}}}
    path = save_checkpoint(state, tmp_path / "last.pt")
    saved = torch.load(path, weights_only=True)
    saved["strategy"]["sampler"]["logits"][0] = 0.5          # a change inside the strategy state alone
    torch.save(saved, path)
    with pytest.raises(CheckpointError, match="does not match its digest"):
        load_checkpoint(path)
    state["strategy"]["sampler"]["logits"][1] = float("nan")
    with pytest.raises(TrainingDiverged, match=r"not written: 1 tensor with NaN .*first: strategy.sampler.logits"):
        save_checkpoint(state, tmp_path / "next.pt")
    assert not (tmp_path / "next.pt").exists()
