"""The export's fine-tune state: keyed by what changes its steps, checked for room, removed once used."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from nas import api, cli
from nas.core.config import FinetuneConfig
from nas.engine import export as export_module
from nas.engine.export.finetune import finetune_subnet, partial_path
from nas.engine.fidelity import standalone
from tests.support.helpers import kill_standalone_at
from tests.support.safety import copy_run, one_line_error


@pytest.fixture
def run(trained, tmp_path):
    return api.load_run(copy_run(trained, "tiny", tmp_path / "runs") / "tiny", device="cpu")


@pytest.fixture
def threads():
    """Restores torch's thread count after a test that changes it."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def partials(run) -> list[str]:
    return sorted(p.name for p in (run.dir.root / "export").glob(".*partial*"))


def test_a_finetune_in_other_kernels_or_threads_never_resumes_the_partial_state(run, monkeypatch, threads):
    from nas.engine import precision

    arch, settings = run.space.max(), FinetuneConfig(length=6)
    torch.set_num_threads(1)
    base = partial_path(run, arch, 6, settings)
    torch.set_num_threads(2)      # other threads sum in another order
    assert partial_path(run, arch, 6, settings) != base
    torch.set_num_threads(1)
    assert partial_path(run, arch, 6, settings) == base
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: True)     # auto now chooses bf16 autocast
    monkeypatch.setattr(precision, "dense_convolutions_with_bn", lambda model: True)
    assert partial_path(run, arch, 6, settings) != base
    monkeypatch.undo()
    assert partial_path(run, arch, 6, settings) == base
    run.config = replace(run.config, train=replace(run.config.train, accelerate="compiled"))   # inductor's steps
    assert partial_path(run, arch, 6, settings) != base


def test_a_resume_with_other_threads_starts_anew_and_says_the_old_partial_is_kept(run, monkeypatch, threads, capsys):
    arch, settings = run.space.min(), FinetuneConfig(length=4, lr=0.05)
    torch.set_num_threads(2)
    kill_standalone_at(monkeypatch, 4)
    with pytest.raises(KeyboardInterrupt):
        finetune_subnet(run, arch, settings, progress=False, save_every_steps=2)
    left = partial_path(run, arch, 4, settings)
    assert left.is_file() and json.loads(left.with_suffix(".json").read_text())["threads"] == 2
    monkeypatch.undo()
    torch.set_num_threads(1)
    capsys.readouterr()
    tuned = finetune_subnet(run, arch, settings, progress=False, save_every_steps=2)
    assert tuned.record["resumed_from"] == 0 and tuned.record["threads"] == 1
    err = capsys.readouterr().err
    assert f"note: {left} (a partial fine-tune of" in err and "threads 2" in err and "is kept" in err, err
    assert left.is_file()


def test_the_finetune_space_check_counts_its_partial_state(run, monkeypatch, capsys):
    """Room for the export but not for the fine-tune's saved state: one line, exit 2, before any step."""
    from collections import namedtuple

    from nas.core.files import MIN_FREE_BYTES

    arch = run.space.max()
    export_need = export_module.export_bytes(run.space.params(arch))      # the export folder's own check
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr("nas.core.files.shutil.disk_usage",
                        lambda path: usage(1 << 40, 1 << 40, MIN_FREE_BYTES + export_need + 1))
    monkeypatch.setattr(standalone, "train_step", lambda *a, **k: pytest.fail("trained before the space check"))
    one_line_error(capsys, ["export", str(run.dir.root), "--arch", "max", "--finetune", "3", "--device", "cpu"],
                   "RUN:", "free", "needed")


def test_a_diverging_finetune_names_the_finetune_rate_not_the_runs(run, capsys):
    assert cli.main(["export", str(run.dir.root), "--arch", "min", "--finetune", "5", "--finetune-lr", "1e30",
                     "--device", "cpu"]) == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]   # beside the progress bar
    assert len(errors) == 1 and "non-finite loss" in errors[0], errors
    assert "lower export.finetune.lr (--finetune-lr)" in errors[0], errors
    assert "train.optimizer.lr" not in errors[0] and "grad_clip" not in errors[0], errors    # the tiny run clips


@pytest.mark.slow
def test_the_finetune_state_is_kept_until_its_export_is_written_then_removed(run, monkeypatch, tmp_path):
    settings = FinetuneConfig(length=7, lr=0.05)      # the tiny run saves every 5 steps
    real_save = export_module.save_export

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device", str(tmp_path / "out"))

    monkeypatch.setattr(export_module, "save_export", full_disk)
    with pytest.raises(OSError):
        api.export_subnet(run, "min", out=tmp_path / "out", finetune=settings, progress=False)
    assert len(partials(run)) == 2        # the state and its key: the fine-tune is not lost
    monkeypatch.setattr(export_module, "save_export", real_save)
    result = api.export_subnet(run, "min", out=tmp_path / "out", finetune=settings, progress=False)
    assert result.record["finetune"]["resumed_from"] == 5 and "partial" not in result.record["finetune"]
    assert partials(run) == []


class _HeadNamedHead(torch.nn.Module):
    """A ViT-like export: its classifier is `head`, not `classifier`."""

    def __init__(self, classes: int):
        super().__init__()
        self.head = torch.nn.Linear(4, classes)


def test_a_head_that_fits_the_data_is_kept_whatever_its_name():
    """A ViT's export (head named `head`) fine-tuned on its own data keeps its head; only a head
    that does not fit needs a `classifier` to replace (the shipped ViT config failed here)."""
    from nas.core.errors import ConfigError
    from nas.engine.export.finetune import replace_head

    model = _HeadNamedHead(10)
    assert replace_head(model, 10, 10, seed=0) is None
    with pytest.raises(ConfigError, match=r"^data\.root: the data has 3 classes but the model's head has 10"):
        replace_head(model, 10, 3, seed=0)
    imported = torch.nn.Sequential()
    imported.classifier = torch.nn.Linear(4, 1000)
    assert replace_head(imported, 1000, 3, seed=0) == {"replaced": True, "classes_before": 1000, "classes": 3}
    assert imported.classifier.out_features == 3
