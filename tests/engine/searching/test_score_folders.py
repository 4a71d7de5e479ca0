"""A search's score spec in its canonical spelling: one folder and one resume for equal specs,
a bounded folder name for long ones, and a spec outside the grammar refused before any folder."""
from __future__ import annotations

import json
from pathlib import Path

from estimators.score_spec import format_weight
from nas import api, cli
from nas.engine.searching.request import SCORE_PART_MAX, _score_part
from tests.support.safety import copy_run, folder_digests, one_line_error

NAMES = ["grad_norm", "jacov", "macs", "naswot", "params", "snip", "supernet", "synflow", "zico"]
CANONICAL = "+".join(f"{format_weight((i + 1) * 1.2345678901234567e-110)}*{name}" for i, name in enumerate(NAMES))
LONG = "+".join(reversed(CANONICAL.split("+")))


def _search(capsys, runs: Path, *flags: str) -> dict:
    assert cli.main(["search", "tiny", "--runs-dir", str(runs), "--json", "--quiet", *flags]) == 0
    return json.loads(capsys.readouterr().out)


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_equal_specs_share_one_folder_and_resume_each_other(trained, tmp_path, capsys):
    runs = copy_run(trained, "tiny", tmp_path)
    first = _search(capsys, runs, "--score", "2*macs+params", "--trials", "3")
    again = _search(capsys, runs, "--score", " params + 2.0*macs ", "--trials", "4")
    assert Path(first["dir"]).name == "evolution-score-2_macs+params-s0" and again["dir"] == first["dir"]
    assert again["evaluated"] == 4 and len(_lines(Path(again["dir"]) / "results.jsonl")) == 4
    folder = Path(first["dir"])
    assert {r["score"] for r in _lines(folder / "results.jsonl")} == {"2*macs+params"}
    assert again["score"] == "2*macs+params"
    assert json.loads((folder / "search.json").read_text())["settings"]["score"] == "2*macs+params"
    # a one-component spec is its estimator, whatever its weight: the plain macs search's folder
    single = _search(capsys, runs, "--score", "3*macs", "--trials", "2")
    assert Path(single["dir"]).name == "evolution-score-macs-s0" and single["score"] == "macs"


def test_a_folder_whose_settings_spell_the_spec_otherwise_resumes(trained, tmp_path):
    run = api.load_run("tiny", trained)
    api.search(run, "random", trials=2, out=tmp_path, progress=False, score="macs+params")
    stored = json.loads((tmp_path / "search.json").read_text())
    stored["settings"]["score"] = "params + 1.0*macs"        # as a search before canonical spellings wrote it
    (tmp_path / "search.json").write_text(json.dumps(stored))
    found = api.search(run, "random", trials=3, out=tmp_path, progress=False, score="1*params+macs")
    assert (found.evaluated, found.new) == (3, 1)


def test_a_long_spec_gets_a_bounded_folder_name(trained, tmp_path, capsys):
    runs = copy_run(trained, "tiny", tmp_path)
    printed = _search(capsys, runs, "--score", LONG, "--trials", "2", "--seed", "1")
    name = Path(printed["dir"]).name
    part = _score_part(printed["score"])
    assert len(printed["score"]) > 255 and name == f"evolution-score-{part}-s1" and len(part) == SCORE_PART_MAX
    assert printed["score"] == CANONICAL
    assert _score_part(printed["score"].replace("e-109*zico", "e-108*zico")) != part     # the hash tells them apart


def test_a_spec_outside_the_grammar_is_one_line_before_any_folder(trained, capsys):
    before = folder_digests(trained)
    for spec, needle in [("1e308*macs+1e308*params", "--score: the weights of '1e308*macs+1e308*params' sum beyond"),
                         ("1_0*macs+params", "--score: the weight of 'macs' in '1_0*macs+params' must be a positive"),
                         ("*macs", "--score: the weight of 'macs' in '*macs'")]:
        one_line_error(capsys, ["search", "tiny", "--runs-dir", str(trained), "--score", spec, "--trials", "2",
                                "--quiet"], needle)
    assert folder_digests(trained) == before
