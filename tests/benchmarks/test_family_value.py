"""benchmarks/family_value.py: a member's targets and the best committed arch within its budget."""
from __future__ import annotations

import json

from benchmarks.family_value import best_within, member_row, search_seconds, thread_seconds


def _seed(arch_id: str, macs: int, top1: float) -> dict:
    return {"arch_id": arch_id, "macs": macs, "params": 1, "test_top1": top1, "seconds": 10.0, "threads": 2}


def test_best_within_takes_the_best_mean_of_archs_with_two_seeds_that_fit():
    records = {"a": [_seed("a", 100, 0.90), _seed("a", 100, 0.92)],      # mean 0.91, fits
               "b": [_seed("b", 300, 0.95), _seed("b", 300, 0.95)],      # over the budget
               "c": [_seed("c", 150, 0.99)],                             # one seed only
               "d": [_seed("d", 200, 0.905), _seed("d", 200, 0.905)]}
    assert best_within(records, 250, "macs") == {"arch_id": "a", "macs": 100, "test_top1_mean": 0.91}
    assert best_within(records, 50, "macs") is None


def test_a_member_meets_alone_within_one_sd_and_is_compared_with_the_min_subnet_only_when_it_costs_more():
    member = {"index": 1, "budget": 500, "budget_spec": "50%", "arch_id": "m", "macs": 400, "params": 9}
    alone = [_seed("m", 400, 0.90), _seed("m", 400, 0.92)]          # mean 0.91, sd 0.01414
    shipped = {"shipped": "finetuned", "test_top1": 0.897, "inherited": {"test_top1": 0.85},
               "finetune": {"steps": 10}}
    low = {"arch_id": "min", "macs": 100, "test_top1": 0.88}
    row = member_row(member, shipped, alone, None, low, "macs")
    assert row["meets_alone"] and row["above_min"] and row["gap_points"] == -1.3
    row = member_row(member, {**shipped, "test_top1": 0.895}, alone, None, low, "macs")
    assert not row["meets_alone"]
    assert member_row({**member, "macs": 100}, shipped, alone, None, low, "macs")["above_min"] is None


def test_search_seconds_count_an_arch_reused_by_a_later_member_once(tmp_path):
    for folder, records in (("m1", [{"arch_id": "x", "eval_seconds": 2.0}, {"arch_id": "y", "eval_seconds": 1.0}]),
                            ("m2", [{"arch_id": "x", "eval_seconds": 0.0}, {"arch_id": "z", "eval_seconds": 4.0}])):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert search_seconds(tmp_path, [{"dir": "m1"}, {"dir": "m2"}], threads=2) == (14.0, 3)
    assert thread_seconds({"seconds": 3.0, "threads": 2}) == 6.0 and thread_seconds({"seconds": 3.0}) == 3.0
