"""A run config's `search:` section (`nas.core.search_config`): `nas search RUN`, `nas.search` and
`nas.search_family` take what they are not given from it; a flag wins, a budget flag replaces its
budgets; a bad value is one line naming `search.KEY`; a config without it searches as before."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from nas import api, cli
from nas.core import yaml_io
from nas.core.config import load_config
from nas.core.errors import ConfigError
from nas.core.search_config import SearchConfig
from nas.engine.searching.family import read_family
from tests.support.family import FavoursMax, favours_max  # noqa: F401  (fixture)
from tests.support.figures import no_figures  # noqa: F401  (fixture)
from tests.support.tiny import tiny_config

pytestmark = pytest.mark.usefixtures("no_figures", "favours_max")

FAMILY = {"searcher": "random", "score": FavoursMax.name, "max_macs": ["20%", "60%"], "trials": 4, "seed": 1}
SAME_FLAGS = ["--searcher", "random", "--score", FavoursMax.name, "--max-macs", "20%,60%", "--trials", "4",
              "--seed", "1"]


def _runs(trained: Path, where: Path, search: dict | None = None) -> Path:
    """A copy of the shared tiny run under `where` (without the searches other tests made in it),
    its config.yaml given the `search:` section."""
    shutil.copytree(trained / "tiny", where / "tiny", ignore=shutil.ignore_patterns("search", "export"))
    if search is not None:
        path = where / "tiny" / "config.yaml"
        path.write_text(yaml_io.dumps({**yaml_io.load_mapping(path), "search": search}))
    return where


def _search(runs: Path, *flags: str) -> int:
    return cli.main(["search", "tiny", "--runs-dir", str(runs), *flags])


def _only_folder(runs: Path) -> Path:
    (folder,) = (runs / "tiny" / "search").iterdir()
    return folder


def test_a_yaml_family_is_the_family_of_the_same_flags(trained, tmp_path):
    from_yaml, from_flags = _runs(trained, tmp_path / "yaml", FAMILY), _runs(trained, tmp_path / "flags")
    assert _search(from_yaml, "--quiet") == 0
    assert _search(from_flags, "--quiet", *SAME_FLAGS) == 0
    yaml_dir, flag_dir = _only_folder(from_yaml), _only_folder(from_flags)
    assert yaml_dir.name == flag_dir.name
    family = read_family(yaml_dir)
    assert (family["budget_specs"], family["searcher"], family["trials"], family["seed"]) == (["20%", "60%"], "random",
                                                                                             4, 1)
    assert len({m["arch_id"] for m in family["members"]}) == 2
    without_source = [{k: v for k, v in read_family(d).items() if k != "source"} for d in (yaml_dir, flag_dir)]
    assert without_source[0] == without_source[1]
    # the Python API reads the same section: the same folder, continued (nothing evaluated again)
    again = api.search_family(api.load_run("tiny", from_yaml), progress=False)
    assert again.dir == yaml_dir and again.new == 0
    assert [m.arch_id for m in again.members] == [m["arch_id"] for m in family["members"]]


def test_a_flag_wins_and_a_budget_flag_replaces_the_yaml_budgets(trained, tmp_path, capsys):
    runs = _runs(trained, tmp_path, FAMILY)
    # one budget given: a one-budget search, with the section's searcher, score, trials and seed
    assert _search(runs, "--quiet", "--json", "--max-params", "90%") == 0
    one = json.loads(capsys.readouterr().out)
    assert one["evaluated"] == FAMILY["trials"] and one["score"] == FavoursMax.name
    assert Path(one["dir"]).name.startswith("random-params") and Path(one["dir"]).name.endswith("-s1")
    assert _search(runs, "--quiet", "--json", "--max-params", "90%", "--trials", "6") == 0
    assert json.loads(capsys.readouterr().out)["evaluated"] == 6
    # a family flag: its budgets alone, said on each member's header line
    assert _search(runs, "--members", "2") == 0
    err = capsys.readouterr().err
    assert "family member 1/2: --max-macs 20% (in place of the config's search.max_macs)" in err, err
    assert "family member 2/2: --max-macs 80% (in place of the config's search.max_macs)" in err, err
    # without a budget flag the section's family is searched, and says so
    assert _search(runs) == 0
    assert "family member 2/2: 60% (the config's search.max_macs)" in capsys.readouterr().err
    run = api.load_run("tiny", runs)
    with pytest.raises(ConfigError, match=r"config\.yaml: search\.max_macs: asks a family .*nas\.search_family"):
        api.search(run, progress=False)
    assert api.search(run, max_macs="50%", progress=False).evaluated == FAMILY["trials"]


@pytest.mark.parametrize("section, problem", [
    ({"trails": 5}, "search.trails: unknown key (did you mean 'trials'?)"),
    ({"trials": "many"}, "search.trials: expected int, got many"),
    ({"searcher": "evolutoin"}, "search.searcher: unknown searcher 'evolutoin' (did you mean 'evolution'?)"),
    ({"max_macs": ["20%", "60%"], "max_params": ["1M", "2M"]},
     "search.max_macs: a family's budgets are on one cost, and search.max_params holds a list too"),
    ({"members": 2, "max_macs": ["20%", "60%"]}, "search.members: gives the MACs budgets"),
    ({"max_macs": []}, "search.max_macs: an empty list"),
    ({"max_macs": ["60%", "20%"]}, "search.max_macs: a family's budgets must be strictly increasing (no "
                                   "duplicates), got 60%, 20%;"),
    # needs the space (a percentage beside an amount), checked when the search reads it
    ({"max_macs": ["20%", 1]}, "search.max_macs: a family's budgets must be strictly increasing (no duplicates), "
                               "got 20% ("),
    ({"max_params": "1K"}, "search.max_params: 0.001M is below the cheapest subnet"),
    ({"score": "nonsense"}, "search.score: unknown estimator 'nonsense'"),
    ({"finalists": 5, "trials": 3}, "search.finalists: 5 is more than trials (3)"),
])
def test_a_bad_search_value_is_one_line_naming_its_key(trained, tmp_path, capsys, section, problem):
    runs = _runs(trained, tmp_path, section)
    assert _search(runs, "--quiet") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"nas search: error: {runs / 'tiny' / 'config.yaml'}: "
                                                         f"{problem}"), err
    assert not (runs / "tiny" / "search").exists() and FavoursMax.scored == []


def test_a_config_is_searched_with_its_section_and_refused_in_its_words(tmp_path, capsys):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml_io.dumps({**tiny_config(), "search": {**FAMILY, "score": "macs"}}))
    assert cli.main(["search", str(path), "--out", str(tmp_path / "fam"), "--quiet"]) == 0
    assert read_family(tmp_path / "fam")["budget_specs"] == FAMILY["max_macs"]
    capsys.readouterr()
    path.write_text(yaml_io.dumps({**tiny_config(), "search": {"finalists": 2}}))
    assert cli.main(["search", str(path), "--out", str(tmp_path / "one"), "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == (f"nas search: error: {path}: search.finalists: fine-tuning finalists "
                                               "needs a trained run")


def test_a_config_without_the_section_searches_as_before_and_round_trips(trained, tmp_path, capsys):
    config = load_config(tiny_config())
    assert config.search == SearchConfig() and load_config(config.to_dict()) == config
    with_section = load_config({**tiny_config(), "search": {"max_macs": ["35%", "50%"], "max_params": "2M"}})
    assert with_section.to_dict()["search"]["max_macs"] == ["35%", "50%"]
    assert load_config(with_section.to_dict()) == with_section
    # nas search's own defaults: evolution, seed 0, 50 trials, no finalists
    runs = _runs(trained, tmp_path)
    assert _search(runs, "--quiet", "--json", "--max-macs", "50%", "--score", "macs") == 0
    found = json.loads(capsys.readouterr().out)
    assert Path(found["dir"]).name.startswith("evolution-macs") and Path(found["dir"]).name.endswith("-s0")
    assert found["evaluated"] == 50 and "finalists" not in found
