"""What identifies the weights a family was searched on: the checkpoint, its step and the weights'
digest, never the run's path (a moved run or a relocated clone continues its families)."""
from __future__ import annotations

import json
import shutil

import pytest

from nas import api
from nas.core.errors import ConfigError
from nas.engine.searching.family import read_family
from tests.support.family import FavoursMax, favours_max  # noqa: F401  (fixture)
from tests.support.figures import no_figures  # noqa: F401  (fixture)
from tests.support.safety import copy_run

pytestmark = pytest.mark.usefixtures("no_figures")


def _family(run, out):
    return api.search_family(run, "random", out=out, progress=False, score=FavoursMax.name, max_macs=["20%", "60%"],
                             trials=4)


def test_a_relocated_run_and_family_continue_the_family_and_record_the_weights(trained, favours_max, tmp_path):
    runs = copy_run(trained, "tiny", tmp_path / "clone")
    run = api.load_run(runs / "tiny", device="cpu")
    _family(run, runs / "tiny" / "search" / "fam")
    assert read_family(runs / "tiny" / "search" / "fam")["source"]["weights"] == run.weights
    moved = tmp_path / "elsewhere"
    shutil.move(runs, moved)
    favours_max.clear()
    again = _family(api.load_run(moved / "tiny", device="cpu"), moved / "tiny" / "search" / "fam")
    assert again.new == 0 and favours_max == []


def test_other_weights_at_the_same_step_are_another_family(trained, favours_max, tmp_path):
    runs = copy_run(trained, "tiny", tmp_path)
    run = api.load_run(runs / "tiny", device="cpu")
    _family(run, tmp_path / "fam")
    data = read_family(tmp_path / "fam")
    data["source"]["weights"] = "sha256:" + "0" * 64
    (tmp_path / "fam" / "family.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="a family searched with other settings"):
        _family(run, tmp_path / "fam")


def test_a_family_searched_before_the_weights_digest_existed_continues(trained, favours_max, tmp_path):
    runs = copy_run(trained, "tiny", tmp_path)
    run = api.load_run(runs / "tiny", device="cpu")
    _family(run, tmp_path / "fam")
    data = read_family(tmp_path / "fam")
    del data["source"]["weights"]
    (tmp_path / "fam" / "family.json").write_text(json.dumps(data))
    favours_max.clear()
    assert _family(run, tmp_path / "fam").new == 0 and favours_max == []
