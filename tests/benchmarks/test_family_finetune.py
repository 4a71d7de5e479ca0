"""benchmarks/family_finetune.py: a member's anchor on the min-max line and what it lost against it."""
from __future__ import annotations

import pytest

from benchmarks.family_finetune import anchor, exported_family, member_figures, pick_members
from nas.core.errors import NasError
from nas.core.files import write_json
from nas.engine.export.family import FAMILY_EXPORT
from nas.engine.searching.family import write_family


def test_the_anchor_is_the_straight_line_through_the_min_and_max_subnets():
    low, high = (1_000_000, 0.90), (5_000_000, 0.94)
    assert anchor(1_000_000, low, high) == pytest.approx(0.90)
    assert anchor(5_000_000, low, high) == pytest.approx(0.94)
    assert anchor(2_000_000, low, high) == pytest.approx(0.91)


def test_a_member_loss_is_its_anchor_minus_its_inherited_val_top1_in_points():
    member = {"arch_id": "m", "macs": 3_000_000}
    shipped = {"inherited": {"val_top1": 0.905, "test_top1": 0.90}}
    row = member_figures(member, shipped, (1_000_000, 0.90), (5_000_000, 0.94))
    assert row == {"arch_id": "m", "macs": 3_000_000, "inherited_val": 0.905, "inherited_test": 0.90,
                   "anchor_val": 0.92, "loss_points": 1.5}


def _family(folder, arch_ids=("a1", "a2")):
    """A finished two-member family.json, written as a family search writes it."""
    members = [{"index": i, "budget": 1_000_000 * i, "budget_spec": f"{10 * i}%", "dir": f"m{i}", "arch_id": a,
                "arch": {"id": a}, "macs": 900_000 * i, "params": 1000, "score": "macs", "score_value": 1.0}
               for i, a in enumerate(arch_ids, 1)]
    write_family(folder, {"kind": "family", "cost": "macs", "budget_specs": [m["budget_spec"] for m in members],
                          "budgets": [m["budget"] for m in members], "other_budgets": {}, "members": members,
                          "searcher": "random", "score": "macs", "seed": 0, "trials": 4, "evaluations": 8,
                          "device": "cpu", "batch": 1})


def _export(folder, arch_ids=("a1", "a2"), step=100, run="runs/r"):
    ends = {end: {"arch_id": end, "macs": macs, "val_top1": val} for end, macs, val in
            (("min_subnet", 500_000, 0.88), ("max_subnet", 5_000_000, 0.92))} if run else {}
    write_json(folder / FAMILY_EXPORT, {"run": run, "step": step, "members": [{"arch_id": a} for a in arch_ids],
                                        **ends})


def test_an_exported_family_gives_its_members_their_records_and_the_export_s_anchors(tmp_path):
    _family(tmp_path)
    _export(tmp_path)
    members, shipped, low, high = exported_family(tmp_path, 100)
    assert [m["arch_id"] for m in members] == ["a1", "a2"] and set(shipped) == {"a1", "a2"}
    assert (low, high) == ((500_000, 0.88), (5_000_000, 0.92))


@pytest.mark.parametrize("export, said", [
    (None, "family_export.json: not a family export"),
    ({"arch_ids": ("a1",)}, "members a2 are not exported"),
    ({"step": 50}, "was exported from step 50, the run holds step 100"),
    ({"run": None}, "its members were trained alone"),
])
def test_a_family_that_cannot_be_fine_tuned_again_is_one_line_naming_why(tmp_path, export, said):
    _family(tmp_path)
    if export is not None:
        _export(tmp_path, **export)
    with pytest.raises(NasError, match=said) as caught:
        exported_family(tmp_path, 100)
    assert caught.value.param == "family" and "\n" not in str(caught.value)


def test_members_are_picked_by_index_and_an_index_the_family_lacks_is_named():
    members = [{"index": 1}, {"index": 2}, {"index": 3}]
    assert pick_members(members, None) == members and pick_members(members, [3, 1]) == [members[0], members[2]]
    with pytest.raises(NasError, match="members: 4: the family has members 1-3"):
        pick_members(members, [2, 4])
