"""Names, folders, devices and storages the user gives: one line naming the flag, exit 2, checked
before any long work, and nothing created, lost or changed."""
from __future__ import annotations

import collections
import errno
from pathlib import Path

import pytest
import torch

from nas.core import yaml_io
from nas.engine.checkpoint import load_checkpoint, save_checkpoint
from tests.support.safety import copy_run, folder_digests, full_disk_at, one_line_error, read_only
from tests.support.tiny import tiny_config


def _config(tmp_path: Path, name: str = "tiny.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml_io.dumps(tiny_config(steps=8)))
    return str(path)


def _tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _run(trained: Path) -> list[str]:
    return ["tiny", "--runs-dir", str(trained)]


@pytest.mark.parametrize("name", ["../escaped", "ABS/elsewhere", "other/export", ".", "..", "a b", "", "x\ny"])
def test_run_names_stay_one_folder_under_runs(tmp_path, capsys, name):
    config = _config(tmp_path)
    (tmp_path / "runs" / "other").mkdir(parents=True)
    name = name.replace("ABS", str(tmp_path / "abs"))
    before = _tree(tmp_path)
    for resume in ([], ["--resume"]):
        one_line_error(capsys, ["train", config, "--name", name, "--runs-dir", str(tmp_path / "runs"), "--quiet",
                                *resume], "--name:", "is not a valid name: use letters, digits")
    assert _tree(tmp_path) == before


def test_study_names_stay_one_folder_under_search(trained, capsys):
    before = folder_digests(trained)
    one_line_error(capsys, ["search", *_run(trained), "--searcher", "optuna-tpe", "--study", "../../escaped",
                            "--trials", "2", "--quiet"], "--study: '../../escaped' is not a valid name")
    assert folder_digests(trained) == before and not (trained / "escaped").exists()


@pytest.mark.parametrize("verb", ["search", "latency-table"])
@pytest.mark.parametrize("device", ["tpu9", "cpu:1", "cuda:x", "gpu", "cuda:64"])
def test_device_is_cpu_cuda_or_cuda_n_of_this_machine(trained, capsys, verb, device):
    if device == "cuda:64":
        expected = f"--device: {device}: " + ("this machine has" if torch.cuda.is_available() else
                                               "CUDA is not available here")
    else:
        expected = f"--device: {device!r} is not a device; use cpu, cuda or cuda:N"
    before = folder_digests(trained)
    one_line_error(capsys, [verb, *_run(trained), "--device", device, "--quiet"], expected)
    assert folder_digests(trained) == before


@pytest.mark.parametrize("argv, message", [
    (["search", "--workers", "0"], "--workers: must be an integer >= 1, got 0"),
    (["search", "--workers", "-2"], "--workers: must be an integer >= 1, got -2"),
    (["search", "--batch", "0"], "--batch: must be an integer >= 1, got 0"),
    (["latency-table", "--batch", "0"], "--batch: must be an integer >= 1, got 0"),
    (["latency-table", "--threads", "0"], "--threads: must be an integer >= 1, got 0"),
])
def test_process_counts_must_be_positive(trained, capsys, argv, message):
    before = folder_digests(trained)
    one_line_error(capsys, [argv[0], *_run(trained), *argv[1:], "--quiet"], message)
    assert folder_digests(trained) == before


@pytest.mark.parametrize("verb", ["export", "search"])
def test_out_naming_a_file_is_refused(trained, tmp_path, capsys, verb):
    target = tmp_path / "notes.txt"
    target.write_text("the user's file\n")
    arch = ["--arch", "max"] if verb == "export" else ["--trials", "2", "--quiet"]
    one_line_error(capsys, [verb, *_run(trained), *arch, "--out", str(target)], f"--out: {target} is a file")
    one_line_error(capsys, [verb, *_run(trained), *arch, "--out", str(target / "below")], f"--out: {target} is a file")
    assert target.read_text() == "the user's file\n" and _tree(tmp_path) == ["notes.txt"]


@pytest.mark.parametrize("verb", ["export", "search"])
def test_out_in_a_read_only_folder_is_refused_before_any_work(trained, tmp_path, capsys, verb):
    arch = ["--arch", "max"] if verb == "export" else ["--trials", "2", "--quiet"]
    (tmp_path / "ro").mkdir()
    with read_only(tmp_path / "ro"):
        one_line_error(capsys, [verb, *_run(trained), *arch, "--out", str(tmp_path / "ro" / "out")],
                       "--out: cannot write in", str(tmp_path / "ro"))
    assert _tree(tmp_path) == ["ro"]


def test_a_read_only_run_folder_is_refused_before_any_work(trained, tmp_path, capsys):
    runs = copy_run(trained, "tiny", tmp_path / "copy")
    before = folder_digests(runs)
    with read_only(runs / "tiny"):
        for argv in (["train", str(runs / "tiny" / "config.yaml"), "--name", "tiny", "--resume", "--quiet"],
                     ["search", "tiny", "--trials", "2", "--quiet"], ["export", "tiny", "--arch", "max"],
                     ["latency-table", "tiny", "--quiet"]):
            one_line_error(capsys, [*argv, "--runs-dir", str(runs)], "cannot write in", str(runs / "tiny"))
    assert folder_digests(runs) == before


def test_a_full_disk_is_refused_before_any_work(trained, tmp_path, capsys, monkeypatch):
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr("nas.core.files.shutil.disk_usage", lambda path: usage(1 << 30, (1 << 30) - (1 << 20), 1 << 20))
    before = folder_digests(trained)
    for argv in (["train", _config(tmp_path), "--name", "new", "--runs-dir", str(trained), "--quiet"],
                 ["search", *_run(trained), "--trials", "2", "--quiet"], ["export", *_run(trained), "--arch", "max"],
                 ["latency-table", *_run(trained), "--quiet"]):
        one_line_error(capsys, argv, "has 1 MiB free", "needed; free some space or choose another folder")
    assert folder_digests(trained) == before and not (trained / "new").exists()


def test_a_disk_that_fills_up_while_writing_is_one_line_naming_the_file(trained, tmp_path, capsys):
    runs = copy_run(trained, "tiny", tmp_path)
    checkpoints = runs / "tiny" / "checkpoints"
    (checkpoints / "last.pt").unlink()
    best = folder_digests(checkpoints)
    full_disk_at(checkpoints / "last.pt")        # resuming from best.pt writes last.pt first
    one_line_error(capsys, ["train", str(runs / "tiny" / "config.yaml"), "--name", "tiny", "--runs-dir", str(runs),
                            "--resume", "--checkpoint", "best.pt", "--quiet"],
                   f"{checkpoints / 'last.pt'}: No space left on device", code=1)
    assert folder_digests(checkpoints) == best and sorted(p.name for p in checkpoints.iterdir()) == ["best.pt"]


def test_a_checkpoint_write_on_a_full_disk_keeps_the_previous_one(tmp_path):
    path = save_checkpoint({"step": 1}, tmp_path / "last.pt")
    full_disk_at(path)
    with pytest.raises(OSError) as raised:
        save_checkpoint({"step": 2}, path)
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(path)
    assert load_checkpoint(path)["step"] == 1 and [p.name for p in tmp_path.iterdir()] == ["last.pt"]


def test_a_journal_storage_on_a_file_that_is_not_a_journal_is_refused_untouched(trained, tmp_path, capsys):
    notes = tmp_path / "notes.log"
    notes.write_text("my own log\nline two\n")
    one_line_error(capsys, ["search", *_run(trained), "--searcher", "optuna-tpe", "--trials", "2", "--quiet",
                            "--storage", f"journal://{notes}", "--out", str(tmp_path / "s")],
                   f"--storage: {notes} is not an Optuna journal")
    assert notes.read_text() == "my own log\nline two\n"


def test_a_storage_password_is_never_printed(trained, tmp_path, capsys):
    err = one_line_error(capsys, ["search", *_run(trained), "--searcher", "optuna-tpe", "--trials", "2", "--quiet",
                                  "--storage", "postgresql://bob:hunter2@127.0.0.1:1/nas", "--out",
                                  str(tmp_path / "s")], "--storage: cannot open postgresql://bob:***@127.0.0.1:1/nas")
    assert "hunter2" not in err


def test_a_failed_first_train_leaves_no_run_folder(tmp_path, capsys):
    config = _config(tmp_path)
    runs = tmp_path / "runs"
    one_line_error(capsys, ["train", config, "--runs-dir", str(runs), "--quiet", "--set", "data.val_size=100000"],
                   "data.val_size: must be an integer from 1 to 59999")
    assert not (runs / "tiny").exists()
    one_line_error(capsys, ["train", config, "--runs-dir", str(runs), "--quiet", "--resume"],
                   "--resume: no run at")       # not a run with a bad stored config
