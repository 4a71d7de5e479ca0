"""What `nas export` refuses or warns about: a second export into a busy folder, a fine-tune far
longer than the run, fine-tune flags that cannot apply, a network that ignores its input, SIGTERM."""
from __future__ import annotations

import json
import os
import signal

import pytest
import torch

from nas import api, cli
from nas.core.errors import NasError
from nas.core.locks import folder_lock
from nas.engine.export import export_lock, save_export
from tests.conftest import make_space, make_supernet
from tests.support.safety import copy_run, one_line_error


@pytest.fixture
def run_dir(trained, tmp_path):
    return copy_run(trained, "tiny", tmp_path / "runs") / "tiny"


def export_args(run_dir, *more: str) -> list[str]:
    return ["export", str(run_dir), "--device", "cpu", *more]


def test_a_second_export_into_a_folder_being_exported_fails_at_once(run_dir, tmp_path, capsys):
    out = tmp_path / "out"
    with folder_lock(export_lock(out), "export folder"):         # what a running export holds
        one_line_error(capsys, export_args(run_dir, "--arch", "min", "--finetune", "0", "--out", str(out)),
                       str(out), f"in use by process {os.getpid()}")
    assert not out.exists()


@pytest.mark.parametrize("length", ["1000000000", "1e9", "81"])
def test_a_finetune_longer_than_ten_runs_is_refused_before_any_work(run_dir, capsys, monkeypatch, length):
    """The tiny run trains 8 steps: 80 is the ceiling, however the length is written."""
    monkeypatch.setattr("nas.engine.evaluator.Evaluator.evaluate", lambda *a, **k: pytest.fail("evaluated"))
    one_line_error(capsys, export_args(run_dir, "--arch", "min", "--finetune", length), "--finetune:",
                   "more than 10 times the run's 8 training steps (80)")


def test_finetune_flags_with_no_finetune_are_refused(run_dir, capsys):
    one_line_error(capsys, export_args(run_dir, "--arch", "min", "--finetune", "0", "--finetune-lr", "0.1"),
                   "--finetune-lr: applies to a fine-tune, and --finetune 0 ships the inherited weights")
    one_line_error(capsys, export_args(run_dir, "--arch", "min", "--distill"),     # the tiny run's length is 0
                   "--distill: applies to a fine-tune, and the run's export.finetune.length 0")


def test_distilling_the_max_subnet_from_itself_is_warned(run_dir, capsys, monkeypatch):
    def not_exported(*args, **kwargs):      # the warning comes first; the fine-tune itself is not the point
        raise NasError("not exported in this test")

    monkeypatch.setattr(api, "export_subnet", not_exported)
    for arch, warned in (("max", True), ("min", False)):
        assert cli.main(export_args(run_dir, "--arch", arch, "--finetune", "2", "--distill")) == 2
        err = capsys.readouterr().err
        assert ("warning: --distill: the max subnet is its own teacher" in err) == warned, err


def test_a_network_whose_output_ignores_its_input_exports_with_a_warning(tmp_path):
    space = make_space("cell201", small=True)
    supernet = make_supernet(space)
    dead = {key: "none" for key in space.max()}        # no path from the cell's input to its output
    record = save_export(supernet, dead, tmp_path / "dead")
    assert record["ignores_input"].startswith(f"{record['arch_id']} ignores its input"), record["ignores_input"]
    static = supernet.export(space.canonical(dead)).eval()
    with torch.no_grad():      # independently: two different images, one output
        size = space.input_size(space.canonical(dead))
        a, b = static(torch.randn(2, space.in_chans, size, size)).unbind(0)
    assert torch.equal(a, b)
    assert json.loads((tmp_path / "dead" / "metrics.json").read_text())["ignores_input"] == record["ignores_input"]
    assert save_export(supernet, space.min(), tmp_path / "live")["ignores_input"] is None


def test_sigterm_during_an_export_says_a_rerun_resumes(run_dir, tmp_path, capsys, monkeypatch):
    def terminated(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr("nas.engine.export.write_arch_file", terminated)
    assert cli.main(export_args(run_dir, "--arch", "min", "--finetune", "0", "--out", str(tmp_path / "out"))) == 143
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("nas export: stopped: SIGTERM: the export stopped before its files were written"), err
    assert "run the same nas export again" in err[-1] and not (tmp_path / "out").exists()
