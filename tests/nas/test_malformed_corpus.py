"""Every verb over the corpus of malformed inputs in tests/data/malformed (see its cases.yaml):
exit code 2, one line on stderr naming the problem, and no file created, lost or changed."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from nas import cli
from tests.nas.corpus import CORPUS, cases, derive_checkpoints, folder_digests


@pytest.fixture(scope="module")
def derived(trained, tmp_path_factory) -> dict[str, Path]:
    return derive_checkpoints(trained / "tiny" / "checkpoints" / "last.pt", tmp_path_factory.mktemp("derived"))


def _resume_argv(checkpoint: Path, trained: Path, tmp_path: Path) -> tuple[list[str], Path]:
    """`nas train --resume` of a copy of the trained run whose last.pt is `checkpoint`."""
    runs = tmp_path / "runs"
    shutil.copytree(trained / "tiny", runs / "tiny", ignore=shutil.ignore_patterns(".lock"))
    shutil.copyfile(checkpoint, runs / "tiny" / "checkpoints" / "last.pt")
    return ["train", str(runs / "tiny" / "config.yaml"), "--name", "tiny", "--runs-dir", str(runs), "--resume",
            "--quiet"], runs


def case_argv(kind: str, name: str, verb: str, trained: Path, derived: dict[str, Path],
              tmp_path: Path) -> tuple[list[str], Path]:
    """The command line of one case and the folder it must leave unchanged."""
    path = derived[name] if kind == "derived_checkpoints" else CORPUS / kind / name
    run = ["tiny", "--runs-dir", str(trained)]
    if kind == "configs":
        if verb == "space":
            return ["space", str(path)], tmp_path
        return ["train", str(path), "--name", "c", "--runs-dir", str(tmp_path / "runs"), "--quiet"], tmp_path
    if kind == "archs":
        return [verb, *run, "--arch", str(path)], trained
    if verb == "resume":
        return _resume_argv(path, trained, tmp_path)
    extra = {"eval": ["--arch", "max"], "export": ["--arch", "max"], "search": ["--trials", "2", "--quiet"],
             "latency-table": ["--quiet"]}[verb]
    return [verb, *run, "--checkpoint", str(path), *extra], trained


@pytest.mark.parametrize("kind, name, verb, message", cases(), ids=lambda v: str(v)[:24])
def test_every_verb_refuses_every_malformed_input_in_one_line(kind, name, verb, message, trained, derived,
                                                               tmp_path, capsys):
    argv, watched = case_argv(kind, name, verb, trained, derived, tmp_path)
    before = folder_digests(watched)
    code = cli.main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert message in err, err
    assert folder_digests(watched) == before           # nothing created, lost or changed
