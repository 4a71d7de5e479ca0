"""An export replaces its folder in one rename: an interrupted export leaves the previous one whole,
and a folder holding anything but an export is never replaced."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from nas import api, cli
from nas.core.arch import arch_id, read_arch_file
from nas.core.files import atomic_dir, recover_dir
from nas.engine.export import export_lock, save_export
from tests.support.safety import folder_digests, one_line_error


def _export(trained: Path, out: Path, arch: str) -> int:
    return cli.main(["export", "tiny", "--runs-dir", str(trained), "--arch", arch, "--out", str(out)])


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


@pytest.mark.slow
def test_ctrl_c_during_an_export_into_an_existing_folder_keeps_the_old_export(trained, tmp_path, capsys,
                                                                              monkeypatch):
    out = tmp_path / "out"
    run = api.load_run("tiny", trained)
    save_export(run.subnet(run.space.max()), run.space.max(), out)      # an earlier export (without evaluations)
    before = folder_digests(out)

    def interrupted(*args, **kwargs):      # model.pt2 and weights.safetensors are written by now
        raise KeyboardInterrupt

    monkeypatch.setattr("nas.engine.export.write_arch_file", interrupted)
    assert _export(trained, out, "min") == 130
    assert "nas export: interrupted" in capsys.readouterr().err
    leftovers = [p.name for p in tmp_path.iterdir() if p != export_lock(out)]      # the lock stays: never stale
    assert folder_digests(out) == before and leftovers == ["out"]
    monkeypatch.undo()
    save_export(run.subnet(run.space.min()), run.space.min(), out)      # the next export replaces it whole
    assert read_arch_file(out / "arch.yaml") == run.space.min()
    assert json.loads((out / "metrics.json").read_text())["arch_id"] == arch_id(run.space.min())
    assert sorted(p.name for p in out.iterdir()) == sorted(before) and leftovers == ["out"]


def test_a_folder_left_by_a_killed_export_is_put_back_and_its_temporary_removed(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "metrics.json").write_text("old\n")
    dead = _dead_pid()
    out.rename(tmp_path / f".out.{dead}.old")                  # killed between the two renames
    (tmp_path / f".out.{dead}.tmp").mkdir()
    (tmp_path / f".out.{dead}.tmp" / "model.pt2").write_bytes(b"half")
    recover_dir(out)
    assert (out / "metrics.json").read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["out"]
    with atomic_dir(out) as tmp:
        (tmp / "metrics.json").write_text("new\n")
    assert (out / "metrics.json").read_text() == "new\n" and [p.name for p in tmp_path.iterdir()] == ["out"]


def test_an_error_inside_an_atomic_folder_leaves_the_old_one(tmp_path):
    out = tmp_path / "out"
    with atomic_dir(out) as tmp:
        (tmp / "a").write_text("1")
    with pytest.raises(OSError), atomic_dir(out) as tmp:
        (tmp / "a").write_text("2")
        raise OSError(28, "No space left on device")
    assert (out / "a").read_text() == "1" and [p.name for p in tmp_path.iterdir()] == ["out"]


def test_a_folder_holding_other_files_is_never_replaced(trained, tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine\n")
    before = folder_digests(tmp_path)
    one_line_error(capsys, ["export", "tiny", "--runs-dir", str(trained), "--arch", "max", "--out", str(tmp_path)],
                   f"--out: {tmp_path} holds files that are not an export (notes.txt)")
    assert folder_digests(tmp_path) == before
