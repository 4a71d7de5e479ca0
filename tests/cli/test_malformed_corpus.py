"""Every verb over the corpus of malformed inputs in tests/data/malformed (see its cases.yaml):
exit code 2, one line on stderr naming the problem, and no file created, lost or changed."""
from __future__ import annotations

from pathlib import Path

import pytest

from nas import cli
from tests.support.corpus import case_argv, cases, derive_checkpoints, folder_digests


@pytest.fixture(scope="module")
def derived(trained, tmp_path_factory) -> dict[str, Path]:
    return derive_checkpoints(trained / "tiny" / "checkpoints" / "last.pt", tmp_path_factory.mktemp("derived"))


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
