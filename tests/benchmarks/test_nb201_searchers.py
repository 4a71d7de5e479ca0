"""benchmarks/nb201_searchers.py: searcher options from the command line."""
from __future__ import annotations

import pytest

from benchmarks.nb201_searchers import searcher_options
from nas.core.errors import ConfigError


def test_options_are_grouped_by_searcher_and_read_as_yaml_scalars():
    assert searcher_options(["evolution.population=20", "evolution.mutation_prob=0.3", "optuna-tpe.x=a"]) == {
        "evolution": {"population": 20, "mutation_prob": 0.3}, "optuna-tpe": {"x": "a"}}
    assert searcher_options([]) == {}


@pytest.mark.parametrize("pair", ["population=20", "evolution.population", ".population=2", "evolution.=2"])
def test_a_malformed_option_names_the_argument(pair):
    with pytest.raises(ConfigError, match=r"^--option: expected SEARCHER.KEY=VALUE, got"):
        searcher_options([pair])
