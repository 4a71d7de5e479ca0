"""`--extends M` grows the M-arch selection a ground truth measured (a grown one included), as
`selections.json` in its folder records: growing a grown ground truth again keeps all its archs."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nas import api
from nas.core.arch import arch_id
from nas.core.config import load_config
from nas.core.errors import ConfigError
from nas.engine.fidelity.arch_selection import select_archs
from nas.engine.fidelity.runner import plan
from tests.support.tiny import tiny_config

REPO = Path(__file__).resolve().parents[3]


def _ids(archs) -> list[str]:
    return [arch_id(a) for a in archs]


@pytest.fixture()
def measure(tmp_path):
    config = load_config(tiny_config())
    space = api.build_space(config)

    def measured(archs: int, extends: int | str | None, root: Path = tmp_path / "truth"):
        return plan(config, space, api.standalone_model, root, archs=archs, epochs=1, seeds=1, recipe=None,
                    extends=extends)
    return space, measured


def test_extends_grows_the_grown_selection_the_ground_truth_measured(measure, tmp_path):
    space, measured = measure
    grown = measured(4, 2)
    assert set(_ids(grown.archs)) != set(_ids(select_archs(space, 4)))     # the plain 4-arch selection differs
    again = measured(6, 4)
    assert set(_ids(grown.archs)) <= set(_ids(again.archs)) and len(again.archs) == 6
    assert again.extends == "4-ext2" and again.ident().endswith("-ext4-ext2")
    assert _ids(measured(6, "4-ext2").archs) == _ids(again.archs)
    records = [json.loads(p.read_text()) for p in sorted((grown.truth.folder / "selections").iterdir())]
    assert records == [{"selection": "4-ext2", "selection_seed": 0, "arch_ids": _ids(grown.archs)},
                       {"selection": "6-ext4-ext2", "selection_seed": 0, "arch_ids": _ids(again.archs)}]
    # where no 4-arch selection was measured, --extends 4 is the plain one
    fresh = measured(6, 4, tmp_path / "fresh")
    assert fresh.extends == "4" and _ids(fresh.archs) == _ids(select_archs(space, 6, extends=4))


def test_a_measured_plain_selection_is_the_bare_size_and_several_grown_ones_must_be_named(measure):
    _, measured = measure
    measured(4, 2)
    measured(4, None)
    assert measured(6, 4).extends == "4" and measured(6, "4-ext2").extends == "4-ext2"
    measured(5, 2)
    measured(5, 3)
    message = ("extends: the ground truth measured 2 grown selections of 5 archs (5-ext2, 5-ext3) and not the "
               "plain one: name the one to grow by its lineage")
    with pytest.raises(ConfigError, match=re.escape(message)):
        measured(6, 5)
    assert measured(6, "5-ext3").extends == "5-ext3"


def test_the_committed_ground_truth_records_the_selections_it_holds():
    folder = REPO / "benchmarks" / "ground_truth" / "cell201-1c4fd9d48cb1" / "9c00f91f87-e4"
    recipe = json.loads((folder / "recipe.json").read_text())
    config = tiny_config()
    config["space"] = recipe["space"]
    space = api.build_space(load_config(config))
    record = [json.loads((folder / "selections" / f"{name}.json").read_text()) for name in ("24", "48-ext24")]
    assert [(r["selection"], r["selection_seed"]) for r in record] == [("24", 0), ("48-ext24", 0)]
    for entry, archs in zip(record, (select_archs(space, 24), select_archs(space, 48, extends=24))):
        assert entry["arch_ids"] == _ids(archs)
        assert all((folder / f"{i}-s{k}.json").is_file() for i in entry["arch_ids"] for k in (0, 1))
    # so --archs 96 --extends 48 grows the 48 trained archs, not the plain 48-arch selection
    plain = set(_ids(select_archs(space, 48)))
    assert len(plain & set(record[1]["arch_ids"])) < 24


def test_planning_on_a_ground_truth_it_may_only_read_records_nothing(measure, tmp_path):
    from tests.support.safety import read_only

    space, measured = measure
    folder = measured(4, 2).truth.folder.parent.parent     # the root holding the space's folders
    with read_only(folder):
        again = measured(6, 4, folder)      # a script reading the ground truth, e.g. to rank estimators
    assert again.extends == "4-ext2" and not (again.truth.folder / "selections" / "6-ext4-ext2.json").exists()
